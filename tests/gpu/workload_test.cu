// SPDX-License-Identifier: Apache-2.0
// workload_test - the synthetic transformer on one GPU: it matches a double-precision host reference
// (prefill in micro-batches and a decode step over a generated context), it is deterministic in its
// seed, and a decode step run as a CUDA graph gives bit-identical results to the eager one.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "workload/phases.h"
#include "workload_reference.h"
#include "workload_test_util.h"

namespace tpscope::testing {
namespace {

using workload::SplitMode;

std::vector<float> lastRows(const std::vector<double>& all, int rows, int width) {
  return std::vector<float>(all.end() - size_t(rows) * width, all.end());
}

TEST(Workload, TinyPrefillMatchesTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  const workload::ModelConfig c = testConfig("tiny");
  auto m = makeModel(c, SplitMode::kNone, {0});
  ASSERT_TRUE(m);
  // 40 tokens in micro-batches of 16: the last one (8 tokens) attends to the cache of the first two.
  const std::vector<float> got = prefillOutput(*m, 40, 16);
  ReferenceModel ref(c, 7);
  expectClose(lastRows(ref.forward(40, 0, false), 8, c.hidden), got, "tiny prefill vs host reference");
}

TEST(Workload, TinyDecodeMatchesTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  for (bool rope : {true, false}) {
    workload::ModelConfig c = testConfig("tiny");
    c.rope = rope;
    auto m = makeModel(c, SplitMode::kNone, {0});
    ASSERT_TRUE(m);
    // k = 3 tokens verified at context 100 (split-K attention over 2 splits of the cache).
    const std::vector<float> got = decodeOutput(*m, 100, 3);
    ReferenceModel ref(c, 7);
    const std::vector<double> want = ref.forward(3, 100, true);
    expectClose(std::vector<float>(want.begin(), want.end()), got,
                std::string("tiny decode vs host reference, rope ") + (rope ? "on" : "off"));
  }
}

TEST(Workload, SameSeedSameOutputOtherSeedOther) {
  TPS_REQUIRE_GPUS(1);
  const workload::ModelConfig c = testConfig("tiny");
  auto a = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7);
  auto b = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7);
  auto other = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 8);
  ASSERT_TRUE(a && b && other);
  const auto x = decodeOutput(*a, 50, 2), y = decodeOutput(*b, 50, 2), z = decodeOutput(*other, 50, 2);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(Workload, DecodeGraphEqualsEager) {
  TPS_REQUIRE_GPUS(1);
  auto m = makeModel(testConfig("tiny"), SplitMode::kNone, {0});
  ASSERT_TRUE(m);
  const std::vector<float> eager = decodeOutput(*m, 64, 4);
  cudaGraphExec_t exec = nullptr;
  std::string why;
  ASSERT_EQ(m->captureForward(4, 64, &exec, &why), tpsSuccess) << why;
  ASSERT_EQ(m->launch(exec), tpsSuccess);
  std::vector<float> graph;
  ASSERT_EQ(m->readOutput(4, &graph), tpsSuccess);
  (void)cudaGraphExecDestroy(exec);
  EXPECT_EQ(eager, graph);
}

TEST(Workload, PhasesReportTokensAndSteps) {
  TPS_REQUIRE_GPUS(1);
  auto m = makeModel(testConfig("tiny"), SplitMode::kNone, {0}, tpsBackendAuto, 7, 512, 64);
  ASSERT_TRUE(m);
  workload::PhaseResult p, d;
  std::string reason;
  ASSERT_EQ(workload::runPrefill(*m, {256, 64}, nullptr, &p, &reason), tpsSuccess) << reason;
  EXPECT_EQ(p.steps, 4);
  EXPECT_GT(p.tokens_per_s, 0);
  EXPECT_EQ(p.allreduce_calls, 0u);
  workload::DecodeOptions o;
  o.tokens = 30, o.ctx = 200, o.tokens_per_step = 4, o.accept = 0.5;
  ASSERT_EQ(workload::runDecode(*m, o, nullptr, &d, &reason), tpsSuccess) << reason;
  EXPECT_EQ(d.steps, 12);  // 2.5 tokens per step
  EXPECT_DOUBLE_EQ(d.tokens, 30);
  EXPECT_TRUE(d.graph) << d.graph_note;
  EXPECT_GT(d.ms_per_step, 0);
}

TEST(Workload, AModelThatDoesNotFitSaysSo) {
  TPS_REQUIRE_GPUS(1);
  workload::ModelOptions o;
  o.config = testConfig("32b", 640);  // ~580 GiB of weights
  o.devices = {0};
  o.shape = {1024, 1};
  std::unique_ptr<workload::Model> m;
  std::string reason;
  EXPECT_EQ(workload::Model::create(o, &m, &reason), tpsUnavailable);
  EXPECT_NE(reason.find("needs"), std::string::npos) << reason;
  EXPECT_NE(reason.find("GPU 0 has"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tpscope::testing
