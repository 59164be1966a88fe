// SPDX-License-Identifier: Apache-2.0
// git_revision.cc - tpsGetGitRevision, alone in its file: the header it reads is rewritten whenever the
// revision changes, and only this file recompiles then.
#include "git_revision.h"

#include "tpscope/tpscope.h"

extern "C" const char* tpsGetGitRevision(void) { return TPSCOPE_GIT_REVISION; }
