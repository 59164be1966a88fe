// SPDX-License-Identifier: Apache-2.0
// bench_cli_test - `tpscope bench allreduce` refuses bad command lines with exit 2, one line on stderr
// naming the flag, and nothing on stdout; all of it before touching a GPU, so it holds on any machine.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"

namespace tpscope::testing {
namespace {

void expectUsageError(const std::string& args, const std::string& mention, const std::string& env = "") {
  CliResult r = runTpscope("bench allreduce " + args, env);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << args << " should mention " << mention << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
}

TEST(BenchCli, BadSizesAreUsageErrors) {
  expectUsageError("-b 8Q", "-b");
  expectUsageError("-e lots", "-e");
  expectUsageError("-b 1M -e 8K", "-b");
  expectUsageError("-b 0", "-b");
  expectUsageError("-b 2 -e 8 -d float", "-b");  // below one element
  expectUsageError("-f 1 -i 0", "-i");
  expectUsageError("-f -1", "--stepfactor");
  expectUsageError("-f 0", "--stepfactor");
  expectUsageError("-f 2 -i 1M", "-i");
  expectUsageError("-f 1 -i 8 -b 8K -e 256M", "sizes");
  expectUsageError("--tune -b 2G", "-b");  // --tune sweeps to 1G unless -e says otherwise
}

TEST(BenchCli, BadFlagsAreUsageErrors) {
  expectUsageError("-d int8", "-d");
  expectUsageError("--backend host,shm", "--backend");
  expectUsageError("--backend nccl,nccl", "--backend");
  expectUsageError("-c 2", "--check");
  expectUsageError("-n 0", "--iters");
  expectUsageError("-o prod", "--op");
  expectUsageError("--format yaml", "--format");
  expectUsageError("-g 2 --devices 0,1", "--devices");
  expectUsageError("--devices 0", "--devices");
  expectUsageError("--devices 0,x", "--devices");
  expectUsageError("-g 1", "-g");
  expectUsageError("--frobnicate", "--frobnicate");
}

TEST(BenchCli, BadProcsAreUsageErrors) {
  expectUsageError("--procs 1", "--procs");
  expectUsageError("--procs 9", "--procs");
  expectUsageError("--procs x", "--procs");
  expectUsageError("--procs 2 --tune", "--procs");
  expectUsageError("--procs 2 --devices 0,1,2", "--procs");  // more GPUs than ranks
  expectUsageError("--procs 2 -g 3", "--procs");
}

TEST(BenchCli, BadWiresAreUsageErrors) {
  expectUsageError("--wire int9", "--wire");
  expectUsageError("--wire exact,exact", "--wire");
  expectUsageError("--wire auto:0.01", "TPSCOPE_WIRE");
  expectUsageError("--procs 2 --wire exact,int8", "--procs");
  // With TPSCOPE_WIRE set, the exact wire's communicator would run on it: comparing or tuning wires refuses.
  expectUsageError("--wire exact,int8", "TPSCOPE_WIRE=fp8", "TPSCOPE_WIRE=fp8");
  expectUsageError("--tune", "TPSCOPE_WIRE=int8", "TPSCOPE_WIRE=int8");
}

TEST(BenchCli, TheRankWorkerRefusesAMissingPlan) {
  CliResult r = runTpscope("bench allreduce-rank --plan /nonexistent/plan.json --rank 0 --out /dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("plan"), std::string::npos) << r.err;
  EXPECT_EQ(runTpscope("bench allreduce-rank --rank 0").exit_code, 2);  // --plan and --out are required
  EXPECT_EQ(runTpscope("bench --help").out.find("allreduce-rank"), std::string::npos) << "a hidden subcommand";
}

TEST(BenchCli, NvlinkMulticastIsRefused) { expectUsageError("", "NCCL_NVLS_ENABLE", "NCCL_NVLS_ENABLE=1"); }

TEST(BenchCli, BenchWithoutABenchmarkIsAUsageError) {
  CliResult r = runTpscope("bench");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
}

TEST(BenchCli, HelpListsTheNcclTestsFlags) {
  CliResult r = runTpscope("bench allreduce --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"-b,--minbytes", "-e,--maxbytes", "-f,--stepfactor", "-n,--iters", "-w,--warmup_iters", "-c,--check",
        "-d,--datatype", "-g,--ngpus", "--backend", "--wire", "--graph", "-J,--json", "--tune"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace tpscope::testing
