// SPDX-License-Identifier: Apache-2.0
// cli.h - what every subcommand shares: exit codes, usage errors, device lists.
//
// Data goes to stdout, diagnostics to stderr. A usage error is one line on stderr and exit 2; a
// runtime error one line and exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::cli {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// Thrown by option parsing that CLI11 cannot express; main() prints it as a usage error.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "0,1,3" -> {0,1,3}; "" -> {} (all). Throws UsageError for anything else, naming the option, and for a
// GPU given twice unless `repeats` (ranks sharing a GPU: "0,0").
std::vector<int> parseDeviceList(const std::string& text, const std::string& option, bool repeats = false);

// Prints "tpscope: error: MESSAGE" on stderr and returns `code`.
int fail(int code, const std::string& message);

// TPSCOPE_METER_FAKE=1: every meter this process starts uses two scripted GPUs instead of the hardware
// (MeterOptions::fake_gpus), so the CLI tests and CI run the meter end to end without a GPU.
bool fakeMeterGpus();

// This process's command line as it was started (/proc/self/cmdline), for records.
std::vector<std::string> processArgv();

// A wire as records and tables name it: "exact", "int8", ...; "auto:0.01" for tpsWireAuto with `budget`.
std::string wireLabel(tpsWire_t wire, float budget = 0);

// A record's "communicator": every setting of a communicator that decides which kernel runs, i.e. its
// resolved configuration (tpsCommGetConfig) and the p2p backend's published limits (the rest of its
// geometry is fixed by the git revision); null for nullopt (no communicator).
nlohmann::json communicatorJson(const std::optional<tpsConfig_t>& config);

// One subcommand: registers its options on `app` and later runs if it was selected.
struct Command {
  virtual ~Command() = default;
  virtual CLI::App* subcommand() const = 0;
  virtual int run() = 0;
};

// Builds the whole command tree; the returned commands are run by main() or by tests.
std::vector<std::unique_ptr<Command>> registerCommands(CLI::App& app);

// Parses argv and runs the selected subcommand; returns the process exit code. main() is this.
int runCli(int argc, char** argv);

}  // namespace tpscope::cli
