// SPDX-License-Identifier: Apache-2.0
// workload_shared_gpu_test - the splits' code paths on one GPU (ModelOptions::shared_devices): `layer`
// and `tensor` over the p2p and host backends, with two positions (and four where the shape divides)
// on GPU 0, give the final hidden states of `none` within bf16 tolerance, in prefill (pipelined
// micro-batches, later ones attending to the earlier ones through the cache) and in a decode step,
// with each prefill attention: tpscope's kernel and cuDNN's (sharded heads in `tensor`). The same
// comparisons on separate GPUs are workload_multigpu_test's; NCCL takes one rank per GPU, so it is
// not among these.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "workload/attention_cudnn.h"
#include "workload_test_util.h"

namespace tpscope::testing {
namespace {

using workload::PrefillAttention;
using workload::SplitMode;

const std::vector<SplitCase> kTwo = {{"layer", SplitMode::kLayer, tpsBackendAuto, {0, 0}},
                                     {"tensor/p2p", SplitMode::kTensor, tpsBackendP2p, {0, 0}},
                                     {"tensor/host", SplitMode::kTensor, tpsBackendHost, {0, 0}}};

TEST(WorkloadSharedGpu, RepeatedGpuRefusedUnlessShared) {
  TPS_REQUIRE_GPUS(1);
  workload::ModelOptions o;
  o.config = testConfig("tiny"), o.split = SplitMode::kLayer, o.devices = {0, 0};
  std::unique_ptr<workload::Model> m;
  std::string reason;
  EXPECT_EQ(workload::Model::create(o, &m, &reason), tpsInvalidArgument);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(reason.find("GPU 0 is given twice"), std::string::npos) << reason;
  o.shared_devices = true;
  reason.clear();
  EXPECT_EQ(workload::Model::create(o, &m, &reason), tpsSuccess) << reason;
  EXPECT_NE(m, nullptr);
}

TEST(WorkloadSharedGpu, SplitsEqualNoneWithTheKernelAttention) {
  TPS_REQUIRE_GPUS(1);
  std::vector<SplitCase> tiny = kTwo;
  tiny.push_back({"layer", SplitMode::kLayer, tpsBackendAuto, {0, 0, 0, 0}});
  expectSplitsEqualNone(testConfig("tiny"), tiny, PrefillAttention::kKernel, /*shared=*/true, 40, 16, 100, 3);
  std::vector<SplitCase> eight = kTwo;
  eight.push_back({"tensor/p2p", SplitMode::kTensor, tpsBackendP2p, {0, 0, 0, 0}});
  eight.push_back({"tensor/host", SplitMode::kTensor, tpsBackendHost, {0, 0, 0, 0}});
  expectSplitsEqualNone(testConfig("8b", 2), eight, PrefillAttention::kKernel, /*shared=*/true, 300, 128, 1000, 2);
}

// cuDNN's flash attention over each position's share of the heads (tensor) or of the layers (layer).
TEST(WorkloadSharedGpu, SplitsEqualNoneWithCudnnAttention) {
  TPS_REQUIRE_GPUS(1);
  std::string why;
  if (!workload::CudnnAttention::available(&why)) GTEST_SKIP() << why;
  std::vector<SplitCase> eight = kTwo;
  eight.push_back({"tensor/p2p", SplitMode::kTensor, tpsBackendP2p, {0, 0, 0, 0}});
  expectSplitsEqualNone(testConfig("8b", 2), eight, PrefillAttention::kCudnn, /*shared=*/true, 1500, 512, 1000, 2);
  expectSplitsEqualNone(testConfig("tiny"), kTwo, PrefillAttention::kCudnn, /*shared=*/true, 40, 16, 100, 3);
}

// A layer split's decode step on one GPU captures as one graph and gives the eager step bit for bit.
// A tensor split's is refused: one graph may run the positions' branches one after the other on the
// shared GPU, and the first AllReduce would wait for a peer that cannot start (seen: the spin timeout).
TEST(WorkloadSharedGpu, LayerDecodeGraphEqualsEagerAndTensorIsRefused) {
  TPS_REQUIRE_GPUS(1);
  auto layer = makeModel(testConfig("tiny"), SplitMode::kLayer, {0, 0}, tpsBackendAuto, 7, 256, 64,
                         PrefillAttention::kAuto, true);
  ASSERT_TRUE(layer);
  const std::vector<float> eager = decodeOutput(*layer, 64, 2);
  expectGraphEqualsEager(*layer, 64, 2, eager, "layer on one GPU");
  auto tensor = makeModel(testConfig("tiny"), SplitMode::kTensor, {0, 0}, tpsBackendP2p, 7, 256, 64,
                          PrefillAttention::kAuto, true);
  ASSERT_TRUE(tensor);
  cudaGraphExec_t exec = nullptr;
  std::string why;
  EXPECT_EQ(tensor->captureForward(2, 64, &exec, &why), tpsUnavailable);
  EXPECT_EQ(exec, nullptr);
  EXPECT_NE(why.find("share a GPU"), std::string::npos) << why;
  // The model is still usable eagerly after the refusal.
  EXPECT_EQ(tensor->forward(2, 64), tpsSuccess);
  EXPECT_EQ(tensor->synchronize(), tpsSuccess);
}

}  // namespace
}  // namespace tpscope::testing
