// SPDX-License-Identifier: Apache-2.0
// tp_cli_test - `tpscope tp` refuses bad command lines with one line on stderr and exit 2, before
// touching a GPU; --estimate works without one; the GPU checks exit 1 with one line on a machine
// without a GPU (and are exercised for real by the GPU tests and benchmarks/round).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "topology/topology.h"

namespace tpscope::testing {
namespace {

void expectUsageError(const std::string& args, const std::string& mention) {
  CliResult r = runTpscope("tp " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << args << " should mention " << mention << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
}

bool haveGpu() {
  int n = 0;
  std::string why;
  return cudaDeviceCount(&n, &why) == tpsSuccess && n > 0;
}

TEST(TpCli, BadModelIsAUsageError) {
  expectUsageError("--preset 70b", "unknown preset '70b'");
  expectUsageError("--preset tiny --dims depth=2", "unknown dimension");
  expectUsageError("--preset tiny --dims layers", "name=value");
  expectUsageError("--preset tiny --dims kv_heads=3", "multiple of kv_heads");
  expectUsageError("--preset tiny --dims head_dim=512", "head_dim");
}

TEST(TpCli, BadDecodeAndPrefillOptionsAreUsageErrors) {
  expectUsageError("--preset tiny --tokens-per-step 0", "--tokens-per-step");
  expectUsageError("--preset tiny --tokens-per-step -2", "--tokens-per-step");
  expectUsageError("--preset tiny --accept 1.5", "--accept");
  expectUsageError("--preset tiny --accept -0.1", "--accept");
  expectUsageError("--preset tiny --accept nan", "--accept");
  expectUsageError("--preset tiny --prompt 0", "--prompt");
  expectUsageError("--preset tiny --ubatch 0", "--ubatch");
  expectUsageError("--preset tiny --tokens 0", "--tokens");
  expectUsageError("--preset tiny --ctx -1", "--ctx");
  expectUsageError("--preset tiny --phase train", "--phase");
  expectUsageError("--preset tiny --format csv", "--format");
}

TEST(TpCli, TokenDecodeOptionsAreChecked) {
  expectUsageError("--preset tiny --force-tokens run.json", "go with --logits-out");
  expectUsageError("--preset tiny --capture-allreduce dir", "go with --logits-out");
  expectUsageError("--preset tiny --logits-out a.npy --capture-allreduce dir", "needs --split tensor");
  expectUsageError("--preset tiny --split tensor --logits-out a.npy --capture-allreduce d --capture-rows -1",
                   "--capture-rows");
  expectUsageError("--preset tiny --logits-out a.npy --force-tokens /nonexistent/run.json", "cannot open");
  expectUsageError("--preset tiny --logits-out /nonexistent/a.npy", "cannot write");
}

TEST(TpCli, BadSplitsAndDevicesAreUsageErrors) {
  expectUsageError("--split row", "--split");
  expectUsageError("--split none --devices 0,1", "one GPU");
  expectUsageError("--split layer --devices 0", "at least 2 devices");
  expectUsageError("--preset tiny --split tensor --devices 0,1,2", "divisible by 3");
  expectUsageError("--split layer --devices 0,0", "appears twice");  // only tensor positions may share a GPU
  expectUsageError("--split tensor --devices 0,x", "bad GPU index");
  expectUsageError("--split layer --backend nccl", "--split tensor only");
  expectUsageError("--split tensor --backend shm", "--backend");
  expectUsageError("--preset tiny --split layer --devices 0,1,2,3,4", "at least 5 layers");
}

TEST(TpCli, TensorPositionsMayShareAGpu) {
  CliResult r = runTpscope("tp --preset tiny --split tensor --devices 0,0 --estimate --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["config"]["devices"], nlohmann::json({0, 0}));
}

TEST(TpCli, EstimateNeedsNoGpu) {
  CliResult r = runTpscope("tp --preset 32b --split tensor --phase decode --ctx 4096 --estimate --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["memory_estimate"].size(), 2u);
  EXPECT_EQ(doc["config"]["split"], "tensor");
  EXPECT_EQ(doc["config"]["devices"], nlohmann::json({0, 1}));
  EXPECT_GT(doc["memory_estimate"][0]["weights_bytes"].get<double>(), 28e9);
  EXPECT_TRUE(doc["results"].empty());
  CliResult t = runTpscope("tp --preset 8b --estimate");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("# GPU 0: weights 12.94 GiB"), std::string::npos) << t.out;
}

TEST(TpCli, WithoutAGpuTheRunIsARuntimeErrorOfOneLine) {
  if (haveGpu()) GTEST_SKIP() << "this machine has a GPU: the GPU tests cover the run";
  for (const std::string args : {"--preset tiny", "--preset tiny --split tensor --devices 0,7", "--preset 32b"}) {
    CliResult r = runTpscope("tp " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("needs a GPU"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

}  // namespace
}  // namespace tpscope::testing
