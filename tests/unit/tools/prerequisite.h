// SPDX-License-Identifier: Apache-2.0
// prerequisite.h - a test whose prerequisite is missing (a program scripts/test builds, a file fetched
// from the network once) fails and says what is missing: the test command is strict by default, so
// CI cannot pass on tests that never ran. TPSCOPE_TEST_LENIENT=1 (an explicit choice for a local run,
// README "Tests") turns that failure into a skip with the same reason.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tpscope::testing {

// True only under TPSCOPE_TEST_LENIENT=1.
inline bool lenientTests() {
  const char* e = std::getenv("TPSCOPE_TEST_LENIENT");
  return e && std::string(e) == "1";
}

}  // namespace tpscope::testing

// Ends the current test (or SetUp) for a missing prerequisite: a failure with `why`, or under
// TPSCOPE_TEST_LENIENT=1 a skip with it. `why` is a stream expression, as for GTEST_SKIP().
#define TPS_MISSING_PREREQUISITE(why)                                            \
  do {                                                                           \
    if (::tpscope::testing::lenientTests()) GTEST_SKIP() << why;                 \
    FAIL() << why << " (a strict run fails here; TPSCOPE_TEST_LENIENT=1 skips)"; \
  } while (0)
