// SPDX-License-Identifier: Apache-2.0
// main.cc - the tpscope binary: every subcommand lives in its own file under tools/tpscope/.
#include "cli.h"

int main(int argc, char** argv) { return tpscope::cli::runCli(argc, argv); }
