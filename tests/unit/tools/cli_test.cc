// SPDX-License-Identifier: Apache-2.0
// cli_test - the tpscope binary's usage errors: exit 2 and one line on stderr, nothing on stdout.
#include "cli.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

#include "cli_runner.h"

namespace {

using Result = tpscope::testing::CliResult;
using tpscope::testing::runTpscope;
int lines(const std::string& s) { return tpscope::testing::lineCount(s); }

TEST(Cli, UnknownFlagIsAUsageErrorOnOneLine) {
  Result r = runTpscope("topo --frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--frobnicate"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, UnknownSubcommandIsAUsageError) {
  Result r = runTpscope("teleport");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

TEST(Cli, BadDeviceIndexIsAUsageError) {
  for (const char* bad : {"abc", "0,x", "-1", "0,0", "1,,2"}) {
    Result r = runTpscope(std::string("topo -i ") + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("-i"), std::string::npos) << r.err;
  }
}

TEST(Cli, NonexistentGpuIsAUsageErrorWhereGpusExistAndARuntimeErrorWhereNone) {
  Result r = runTpscope("topo -i 999");
  EXPECT_EQ(lines(r.err), 1) << r.err;
  if (r.err.find("does not exist") != std::string::npos)
    EXPECT_EQ(r.exit_code, 2);  // GPUs present, index out of range
  else
    EXPECT_EQ(r.exit_code, 1);  // no GPU or no driver: explained in one line
}

TEST(Cli, BadFormatIsAUsageError) {
  Result r = runTpscope("topo --format yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
}

TEST(Cli, HelpAndVersionExitZero) {
  Result h = runTpscope("--help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("topo"), std::string::npos);
  Result v = runTpscope("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("tpscope "), std::string::npos);
}

TEST(Cli, TopoWithoutGpusExplainsInOneLine) {
  Result r = runTpscope("topo");
  if (r.exit_code == 0) GTEST_SKIP() << "this machine has a GPU; tests/gpu covers topo output";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("cannot read the topology"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, DeviceListParser) {
  using tpscope::cli::parseDeviceList;
  EXPECT_EQ(parseDeviceList("0,1,3", "-i"), (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(parseDeviceList("", "-i").empty());
  EXPECT_THROW(parseDeviceList("1,", "-i"), tpscope::cli::UsageError);
  EXPECT_THROW(parseDeviceList("+1", "-i"), tpscope::cli::UsageError);
}

}  // namespace
