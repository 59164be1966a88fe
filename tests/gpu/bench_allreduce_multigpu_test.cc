// SPDX-License-Identifier: Apache-2.0
// bench_allreduce_multigpu_test - `tpscope bench allreduce -c 1` on 2 real GPUs: exit 0, every element
// right for every backend and type, eager and under CUDA-graph replay, odd counts included.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "../unit/tools/cli_runner.h"
#include "gpu_test_util.h"

namespace tpscope::testing {
namespace {

// -b 6 -f 3 gives bf16/half counts 3, 9, 27, ... (odd, never a multiple of a vector width) and float
// counts 1, 4, 13, 40, ...; -e 2M reaches the host backend's copy-engine path on most boxes.
// --no-meter: this test is about correctness over 72 rows; metering each row (~0.25 s) is not its subject.
const std::string kSweep =
    "--devices 0,1 -b 6 -e 2M -f 3 -n 3 -w 1 -c 1 -d all --backend host,nccl --format json --no-meter";

nlohmann::json runJson(const std::string& extra) {
  CliResult r = runTpscope("bench allreduce " + kSweep + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << r.out.substr(0, 2000);
  return doc;
}

void expectAllRight(const nlohmann::json& doc) {
  ASSERT_TRUE(doc.contains("results"));
  const auto& results = doc["results"];
  // 3 types x 12 sizes x 2 backends, fewer where rounding to whole elements merges sizes.
  EXPECT_GE(results.size(), 60u);
  std::set<std::string> backends, types;
  for (const auto& r : results) {
    backends.insert(r["backend"].get<std::string>());
    types.insert(r["dtype"].get<std::string>());
    EXPECT_EQ(r["n_wrong"], 0) << r.dump();
    EXPECT_GT(r["time_us"].get<double>(), 0.0) << r.dump();
    EXPECT_NE(r["path"], "-") << "the library counted no call: " << r.dump();
  }
  EXPECT_EQ(backends, (std::set<std::string>{"host", "nccl"}));
  EXPECT_EQ(types, (std::set<std::string>{"float", "half", "bfloat16"}));
}

TEST(BenchAllReduceMultiGpu, EagerSweepIsCorrect) {
  TPS_REQUIRE_GPUS(2);
  const nlohmann::json doc = runJson("");
  expectAllRight(doc);
  EXPECT_EQ(doc["context"]["graph"], false);
}

TEST(BenchAllReduceMultiGpu, GraphSweepIsCorrect) {
  TPS_REQUIRE_GPUS(2);
  const nlohmann::json doc = runJson("--graph --graph-replays 2");
  expectAllRight(doc);
  EXPECT_EQ(doc["results"][0]["mode"], "graph");
}

TEST(BenchAllReduceMultiGpu, TableAndJsonFileAgree) {
  TPS_REQUIRE_GPUS(2);
  const std::string json_path = ::testing::TempDir() + "bench_allreduce_test.json";
  CliResult r = runTpscope("bench allreduce --devices 0,1 -b 8K -e 64K -n 2 -w 1 --backend host,nccl -J " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Time ratios"), std::string::npos) << r.out;
  std::ifstream f(json_path);
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(doc.is_discarded());
  EXPECT_EQ(doc["results"].size(), 8u);  // 8K..64K is 4 sizes, 2 backends
}

}  // namespace
}  // namespace tpscope::testing
