// SPDX-License-Identifier: Apache-2.0
// workload_multigpu_test - the splits compute the same model: for the same seed, `layer` and `tensor`
// (every AllReduce backend) give the final hidden states of `none` within bf16 tolerance, on `tiny`
// and on 8b dimensions with 2 layers, in prefill (pipelined micro-batches) and in a decode step; and a
// tensor-split decode step as a CUDA graph equals the eager one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gpu_test_util.h"
#include "workload/phases.h"
#include "workload_test_util.h"

namespace tpscope::testing {
namespace {

using workload::SplitMode;

// Every split over GPUs 0 and 1: layer, and tensor over each AllReduce backend.
const std::vector<SplitCase> kCases = {{"layer", SplitMode::kLayer, tpsBackendAuto, {0, 1}},
                                       {"tensor/p2p", SplitMode::kTensor, tpsBackendP2p, {0, 1}},
                                       {"tensor/nccl", SplitMode::kTensor, tpsBackendNccl, {0, 1}},
                                       {"tensor/host", SplitMode::kTensor, tpsBackendHost, {0, 1}}};

TEST(WorkloadSplits, TinyLayerAndTensorEqualNone) {
  TPS_REQUIRE_GPUS(2);
  expectSplitsEqualNone(testConfig("tiny"), kCases, workload::PrefillAttention::kAuto, /*shared=*/false, 40, 16, 100,
                        3);
}

TEST(WorkloadSplits, EightBDimensionsWithTwoLayersEqualNone) {
  TPS_REQUIRE_GPUS(2);
  expectSplitsEqualNone(testConfig("8b", 2), kCases, workload::PrefillAttention::kAuto, /*shared=*/false, 300, 128,
                        1000, 2);
}

TEST(WorkloadSplits, TensorDecodeGraphEqualsEager) {
  TPS_REQUIRE_GPUS(2);
  for (tpsBackend_t b : {tpsBackendP2p, tpsBackendNccl, tpsBackendHost}) {
    auto m = makeModel(testConfig("tiny"), SplitMode::kTensor, {0, 1}, b);
    ASSERT_TRUE(m);
    const std::vector<float> eager = decodeOutput(*m, 64, 2);
    expectGraphEqualsEager(*m, 64, 2, eager, tpsBackendName(b));
  }
}

// A layer split's decode step captures as one graph (the hand-off is a memcpy node) and gives the
// eager result bit for bit.
TEST(WorkloadSplits, LayerDecodeGraphEqualsEager) {
  TPS_REQUIRE_GPUS(2);
  auto m = makeModel(testConfig("tiny"), SplitMode::kLayer, {0, 1});
  ASSERT_TRUE(m);
  const std::vector<float> eager = decodeOutput(*m, 64, 2);
  expectGraphEqualsEager(*m, 64, 2, eager, "layer");
}

// The profile of a tensor-split forward shows the AllReduces on every GPU, two per layer.
TEST(WorkloadSplits, TensorProfileShowsTheAllReduces) {
  TPS_REQUIRE_GPUS(2);
  const workload::ModelConfig c = testConfig("tiny");
  auto m = makeModel(c, SplitMode::kTensor, {0, 1}, tpsBackendP2p);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->fillContext(32), tpsSuccess);
  std::vector<std::vector<workload::OpTime>> ops;
  ASSERT_EQ(m->profileForward(1, 32, &ops), tpsSuccess);
  ASSERT_EQ(ops.size(), 2u);
  // By default p2p decode pushes the partials from the projections (allReducePushedAddRmsNorm);
  // reduction=plain reduces the ordinary way, and reduction=fused fuses the reduction with the residual
  // add and norm (tpsAllReduceAddRmsNorm).
  const bool pushing = testKernels().reduction == workload::Reduction::kPushed;
  for (const auto& gpu : ops) {
    int calls = 0, pushed = 0;
    for (const auto& t : gpu) {
      if (t.op == "allreduce" || t.op == "allreduce + residual + rmsnorm") calls += t.calls;
      if (t.op == "allreduce (pushed) + residual + rmsnorm") calls += t.calls, pushed += t.calls;
    }
    EXPECT_EQ(calls, 2 * c.layers);
    EXPECT_EQ(pushed, pushing ? 2 * c.layers : 0);
  }
}

TEST(WorkloadSplits, TensorCountsTwoAllReducesPerLayer) {
  TPS_REQUIRE_GPUS(2);
  auto m = makeModel(testConfig("tiny"), SplitMode::kTensor, {0, 1}, tpsBackendNccl);
  ASSERT_TRUE(m);
  ASSERT_EQ(tpsCommResetStats(m->comm()), tpsSuccess);
  ASSERT_EQ(m->forward(5, 0), tpsSuccess);
  ASSERT_EQ(m->synchronize(), tpsSuccess);
  tpsStats_t s;
  ASSERT_EQ(tpsCommGetStats(m->comm(), &s), tpsSuccess);
  unsigned long long calls = 0, bytes = 0;
  for (const auto& path : s.cells)
    for (const auto& cell : path) calls += cell.calls, bytes += cell.payload_bytes;
  EXPECT_EQ(calls, 2u * 4);
  EXPECT_EQ(bytes, 2ull * 4 * 5 * 256 * 2);
  EXPECT_EQ(m->allReducesPerForward(), 8);
}

TEST(WorkloadSplits, TensorDecodePhaseCountsAllReducesAndTheirShare) {
  TPS_REQUIRE_GPUS(2);
  auto m = makeModel(testConfig("tiny"), SplitMode::kTensor, {0, 1}, tpsBackendHost);
  ASSERT_TRUE(m);
  workload::DecodeOptions o;
  o.tokens = 20, o.ctx = 100, o.tokens_per_step = 2, o.accept = 1;
  workload::PhaseResult r;
  std::string reason;
  ASSERT_EQ(workload::runDecode(*m, o, nullptr, &r, &reason), tpsSuccess) << reason;
  EXPECT_EQ(r.steps, 10);
  EXPECT_EQ(r.allreduce_calls, 10u * 2 * 4);
  EXPECT_EQ(r.allreduce_bytes, 10ull * 2 * 4 * 2 * 256 * 2);
  // The per-path statistics of the window: a graph's step, scaled by the steps, gives the same calls.
  unsigned long long window_calls = 0;
  for (const auto& path : r.allreduce_stats)
    for (const auto& cell : path.cells) window_calls += cell.calls;
  EXPECT_EQ(window_calls * r.stats_scale, r.allreduce_calls) << "graph " << r.graph;
  EXPECT_GT(r.ms_per_step_without_allreduce, 0);
  EXPECT_GT(r.allreduce_share, 0);  // host round trips on a 4-layer model: most of the step
  EXPECT_LT(r.allreduce_share, 1);
  // The skip is off again: the next forward reduces.
  ASSERT_EQ(tpsCommResetStats(m->comm()), tpsSuccess);
  ASSERT_EQ(m->forward(1, 0), tpsSuccess);
  ASSERT_EQ(m->synchronize(), tpsSuccess);
  tpsStats_t s;
  ASSERT_EQ(tpsCommGetStats(m->comm(), &s), tpsSuccess);
  unsigned long long calls = 0;
  for (const auto& path : s.cells)
    for (const auto& cell : path) calls += cell.calls;
  EXPECT_EQ(calls, 8u);
}

}  // namespace
}  // namespace tpscope::testing
