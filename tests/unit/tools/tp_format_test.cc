// SPDX-License-Identifier: Apache-2.0
// tp_format_test - the `tpscope tp` table and JSON shapes are a contract: golden files pin them
// (the version line and the JSON context, which change with every build and run, are left out).
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tp/tp_command.h"

namespace tpscope::testing {
namespace {

using cli::TpOptions;

TpOptions tensorOptions() {
  TpOptions o;
  o.config = *workload::presetConfig("8b");
  o.split = workload::SplitMode::kTensor;
  o.devices = {0, 1};
  o.backend = "host";
  o.phase = "both";
  o.prefill = {2048, 512};
  o.decode.tokens = 128, o.decode.ctx = 4096, o.decode.tokens_per_step = 4, o.decode.accept = 0.5;
  return o;
}

std::vector<workload::PhaseResult> results() {
  workload::PhaseResult p;
  p.phase = "prefill", p.seconds = 0.25, p.steps = 4, p.tokens_per_forward = 512, p.tokens = 2048;
  p.tokens_per_s = 8192, p.ms_per_step = 62.5, p.allreduce_calls = 288, p.allreduce_bytes = 288ull * 512 * 4096 * 2;
  workload::PhaseResult d;
  d.phase = "decode", d.seconds = 0.2, d.steps = 52, d.tokens_per_forward = 4, d.tokens = 130;
  d.tokens_per_s = 650, d.ms_per_step = 0.2 / 52 * 1e3, d.graph = true;
  d.allreduce_calls = 52 * 72, d.allreduce_bytes = 52ull * 72 * 4 * 4096 * 2;
  d.ms_per_step_without_allreduce = 2.5, d.allreduce_share = 1 - 2.5 / d.ms_per_step;
  d.copy_gbps = 4000, d.roofline_ms_per_step = 1.75;
  return {p, d};
}

TEST(TpFormat, RunShapeCoversBothPhases) {
  TpOptions o = tensorOptions();
  workload::RunShape s = cli::runShape(o);
  EXPECT_EQ(s.ctx_capacity, 4100);
  EXPECT_EQ(s.max_tokens, 512);
  o.phase = "decode";
  s = cli::runShape(o);
  EXPECT_EQ(s.ctx_capacity, 4100);
  EXPECT_EQ(s.max_tokens, 4);
  o.phase = "prefill", o.prefill = {100, 512};
  s = cli::runShape(o);
  EXPECT_EQ(s.ctx_capacity, 100);
  EXPECT_EQ(s.max_tokens, 100);
}

TEST(TpFormat, TableMatchesGolden) {
  const TpOptions o = tensorOptions();
  const auto need = workload::estimateMemory(o.config, o.split, 2, cli::runShape(o));
  std::string table = cli::formatTpTable(o, need, results());
  ASSERT_EQ(table.rfind("# tpscope tp ", 0), 0u);
  table = table.substr(table.find('\n') + 1);  // the version line
  expectGolden("tp_tensor.txt", table);
}

TEST(TpFormat, JsonMatchesGolden) {
  const TpOptions o = tensorOptions();
  const auto need = workload::estimateMemory(o.config, o.split, 2, cli::runShape(o));
  nlohmann::json doc = cli::tpDocument(o, need, results(), {"tpscope", "tp"});
  ASSERT_TRUE(doc["context"].contains("git_sha"));
  ASSERT_TRUE(doc["context"].contains("start_time"));
  doc["context"] = "(varies)";
  expectGolden("tp_tensor.json", doc.dump(2) + "\n");
}

// --profile: a column group per GPU, ops in first-seen order (an op only a later GPU has comes last),
// weight GB/s for the projections, "-" where a GPU lacks an op, totals; the JSON carries the same.
TEST(TpFormat, ProfileTableAndJson) {
  TpOptions o = tensorOptions();
  o.split = workload::SplitMode::kLayer, o.phase = "decode";
  std::vector<workload::PhaseResult> r = {results()[1]};
  r[0].profile = {{{"proj qkv", 18, 100.0, 18ull * 6144 * 4096 * 2}, {"attention", 18, 50.0, 0, 1.5e10}},
                  {{"wait for previous stage", 1, 150.0, 0}, {"proj qkv", 18, 102.0, 18ull * 6144 * 4096 * 2}}};
  const std::string table = cli::formatTpTable(o, {}, r);
  const size_t at = table.find("# decode profile: one forward of 4 token(s) at position 0");
  ASSERT_NE(at, std::string::npos) << table;
  const std::string prof = table.substr(at);
  EXPECT_NE(prof.find("GPU0 us"), std::string::npos) << prof;
  EXPECT_NE(prof.find("GPU1 us"), std::string::npos) << prof;
  // 18 x 6144 x 4096 x 2 bytes in 100 us = 9,060 GB/s; in 102 us = 8,882 GB/s. Attention: 1.5e10 FLOP
  // in 50 us = 300 TFLOP/s.
  EXPECT_NE(
      prof.find("proj qkv                     18       100.0  66.7%   9060     -       102.0  40.5%   8882     -"),
      std::string::npos)
      << prof;
  EXPECT_NE(
      prof.find("attention                    18        50.0  33.3%      -   300           -      -      -     -"),
      std::string::npos)
      << prof;
  EXPECT_LT(prof.find("attention"), prof.find("wait for previous stage"));  // GPU 0's ops first
  EXPECT_NE(prof.find("total                                 150.0                           252.0"), std::string::npos)
      << prof;
  const nlohmann::json doc = cli::tpDocument(o, {}, r, {"tpscope", "tp"});
  const nlohmann::json& p = doc["results"][0]["profile"];
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1]["device"], 1);
  EXPECT_DOUBLE_EQ(p[0]["total_us"].get<double>(), 150.0);
  EXPECT_EQ(p[0]["ops"][0]["op"], "proj qkv");
  EXPECT_NEAR(p[0]["ops"][0]["gbps"].get<double>(), 9059.7, 0.1);
  EXPECT_TRUE(p[0]["ops"][1]["gbps"].is_null());
  EXPECT_NEAR(p[0]["ops"][1]["tflops"].get<double>(), 300.0, 1e-9);
  EXPECT_TRUE(p[0]["ops"][0]["tflops"].is_null());
  EXPECT_TRUE(doc["results"][0].contains("profile"));
  EXPECT_TRUE(cli::tpDocument(o, {}, results(), {})["results"][0]["profile"].is_null());
}

}  // namespace
}  // namespace tpscope::testing
