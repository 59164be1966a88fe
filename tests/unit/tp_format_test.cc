// SPDX-License-Identifier: Apache-2.0
// tp_format_test - the `tpscope tp` table and JSON shapes are a contract: golden files pin them
// (the version line and the JSON context, which change with every build and run, are left out).
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tp.h"

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

}  // namespace
}  // namespace tpscope::testing
