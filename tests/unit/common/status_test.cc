// SPDX-License-Identifier: Apache-2.0
// status_test - unit tests for the C API's status strings and version.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "tpscope/tpscope.h"

TEST(Status, EveryCodeHasItsOwnString) {
  std::set<std::string> seen;
  for (int r = tpsSuccess; r < tpsNumResults; ++r) {
    std::string s = tpsGetErrorString(static_cast<tpsResult_t>(r));
    EXPECT_NE(s, "unknown status code") << r;
    EXPECT_TRUE(seen.insert(s).second) << "duplicate string for " << r;
  }
  EXPECT_STREQ(tpsGetErrorString(static_cast<tpsResult_t>(99)), "unknown status code");
  EXPECT_STREQ(tpsGetErrorString(tpsTimeout), "timeout");
}

TEST(Status, VersionIsSemantic) {
  std::string v = tpsGetVersion();
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

TEST(Status, GitRevisionNamesACommitOrSaysUnknown) {
  const std::string g = tpsGetGitRevision();
  EXPECT_TRUE(std::regex_match(g, std::regex("[0-9a-f]{12}(-dirty)?|unknown"))) << g;
}
