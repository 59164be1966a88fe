// SPDX-License-Identifier: Apache-2.0
// allreduce_shared_gpu_test - the AllReduce correctness matrix and the missing-peer timeouts with 2 and
// 4 ranks sharing one GPU (tpsConfig_t.shared_devices): the N-rank code paths of the host and p2p
// backends (rank-order sums, slots, flags, two-shot slices) on a machine with a single GPU.
#include "allreduce_fixture.cuh"
#include "gpu_test_util.h"

namespace {

TEST(AllReduceSharedGpu, DuplicateGpuRefusedUnlessShared) {
  TPS_REQUIRE_GPUS(1);
  const int devs[2] = {0, 0};
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendHost;
  tpsComm_t comm = nullptr;
  EXPECT_EQ(tpsCommCreate(&comm, 2, devs, &cfg), tpsInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  cfg.shared_devices = 1;
  ASSERT_EQ(tpsCommCreate(&comm, 2, devs, &cfg), tpsSuccess);
  EXPECT_NE(comm, nullptr);
  EXPECT_EQ(tpsCommDestroy(comm), tpsSuccess);
  // NCCL takes one rank per GPU: forcing it is unavailable.
  cfg.backend = tpsBackendNccl;
  comm = nullptr;
  EXPECT_EQ(tpsCommCreate(&comm, 2, devs, &cfg), tpsUnavailable);
  EXPECT_EQ(comm, nullptr);
}

TEST(AllReduceSharedGpu, P2pTwoRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendP2p, 2, {0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, HostTwoRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendHost, 2, {0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, P2pFourRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendP2p, 4, {0, 0, 0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, HostFourRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendHost, 4, {0, 0, 0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, AutoFourRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendAuto, 4, {0, 0, 0, 0}, &cfg);
}

// A rank that never arrives, on every path that spins (host kernel; p2p LL, flag one-shot, two-shot).
TEST(AllReduceSharedGpu, MissingPeerTimesOutHost) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendHost, 4096, {0, 0}, true);
}
TEST(AllReduceSharedGpu, MissingPeerTimesOutP2pLL) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendP2p, 4096, {0, 0}, true);
}
TEST(AllReduceSharedGpu, MissingPeerTimesOutP2pOneShot) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendP2p, 256u << 10, {0, 0}, true);
}
TEST(AllReduceSharedGpu, MissingPeerTimesOutP2pTwoShot) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendP2p, 2u << 20, {0, 0}, true);
}

}  // namespace
