// SPDX-License-Identifier: Apache-2.0
// allreduce_shared_gpu_test - the AllReduce correctness matrix and the missing-peer timeouts with 2 and
// 4 ranks sharing one GPU (tpsConfig_t.shared_devices): the N-rank code paths of the host and p2p
// backends (rank-order sums, slots, flags, two-shot slices) on a machine with a single GPU.
#include <cstdlib>

#include "allreduce/backend.h"
#include "allreduce/selfcheck.h"
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

// Three ranks (3-GPU boxes exist): slices, two-shot's N whole vectors and the grids cut by three.
TEST(AllReduceSharedGpu, P2pThreeRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendP2p, 3, {0, 0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, HostThreeRanksOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendHost, 3, {0, 0, 0}, &cfg);
}
TEST(AllReduceSharedGpu, GraphReplayThreeRanks) {
  TPS_REQUIRE_GPUS(1);
  tpsConfig_t cfg = sharedConfig();
  cfg.spin_timeout_ms = 2000;
  for (size_t count : {size_t{4096}, size_t{65536} + 3, (size_t{1} << 20) + 1})
    graphReplay({0, 0, 0}, &cfg, tpsBackendP2p, count);
  graphReplay({0, 0, 0}, &cfg, tpsBackendHost, 4096);
  graphReplay({0, 0, 0}, &cfg, tpsBackendHost, (8u << 20) + 3);
}

// A rank that never arrives, on every path (host kernel and copy engines; p2p LL, flag one-shot,
// two-shot): the copy-engine path at one round and at three (96 MiB, whose later rounds wait for the
// peers' earlier reads), and with four ranks.
TEST(AllReduceSharedGpu, MissingPeerTimesOutHost) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendHost, 4096, {0, 0}, true);
}
TEST(AllReduceSharedGpu, MissingPeerTimesOutHostCopyEngine) {
  TPS_REQUIRE_GPUS(1);
  missingPeerTimesOut(tpsBackendHost, size_t{4} << 20, {0, 0}, true);
  missingPeerTimesOut(tpsBackendHost, size_t{48} << 20, {0, 0}, true);
  missingPeerTimesOut(tpsBackendHost, size_t{4} << 20, {0, 0, 0, 0}, true);
  missingPeerTimesOut(tpsBackendHost, size_t{80} << 20, {0, 0, 0}, true);  // three rounds, three ranks
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

// The copy-engine path captured in one graph over both ranks' streams and replayed: a captured call starts
// its side streams from events (the gate's call number would be a constant in the graph).
TEST(AllReduceSharedGpu, GraphReplayHostCopyPath) {
  TPS_REQUIRE_GPUS(1);
  tpsConfig_t cfg = sharedConfig();
  cfg.spin_timeout_ms = 2000;
  graphReplay({0, 0}, &cfg, tpsBackendHost, (8u << 20) + 3);
}

// The p2p self-check (selfcheck.h) on 2 and 4 ranks of GPU 0: it passes, and what it costs.
TEST(AllReduceSharedGpu, P2pSelfCheckPasses) {
  TPS_REQUIRE_GPUS(1);
  for (int n : {2, 4}) {
    const std::vector<int> devs(n, 0);
    tpscope::detail::HostTuning tuning;
    tpsConfig_t cfg = sharedConfig();
    TPS_OK(tpscope::detail::resolveHostTuning(cfg, &tuning));
    std::unique_ptr<tpscope::detail::Backend> p2p;
    TPS_OK(tpscope::detail::createBackend(tpsBackendP2p, devs, nullptr, tuning, &p2p));
    for (int rep = 0; rep < 3; ++rep) {
      std::string why;
      double ms = -1;
      EXPECT_EQ(tpscope::detail::selfCheckP2p(*p2p, devs, 0, n, &why, &ms), tpsSuccess) << why;
      std::printf("[ selfchk  ] p2p self-check, %d ranks on GPU 0: %.3f ms (run %d)\n", n, ms, rep + 1);
    }
  }
}

// The same check with one rank's result corrupted (TPSCOPE_TEST_P2P_CHECK_FAULT=1, set by the ctest
// entry P2pSelfCheckFault, which alone runs this suite): forced p2p is refused at creation; auto goes on
// without p2p and sums right.
TEST(P2pSelfCheckInjectedFault, Refused) {
  TPS_REQUIRE_GPUS(1);
  if (std::getenv("TPSCOPE_TEST_P2P_CHECK_FAULT") == nullptr)
    GTEST_SKIP() << "runs under the ctest entry P2pSelfCheckFault (needs its environment)";
  const int devs[2] = {0, 0};
  tpsConfig_t cfg = sharedConfig();
  cfg.backend = tpsBackendP2p;
  tpsComm_t comm = nullptr;
  EXPECT_EQ(tpsCommCreate(&comm, 2, devs, &cfg), tpsUnavailable);
  EXPECT_EQ(comm, nullptr);
  cfg.backend = tpsBackendAuto;
  Fixture f;
  f.setUp({0, 0}, &cfg);
  ASSERT_NE(f.comm, nullptr);
  f.fill(tpsFloat32, 4096, 0, 21);
  EXPECT_EQ(tpsAllReduceWith(f.comm, tpsBackendP2p, f.bufs.data(), 4096, tpsFloat32,
                             reinterpret_cast<tpsStream_t*>(f.streams.data())),
            tpsUnavailable);
  TPS_OK(tpsAllReduce(f.comm, f.bufs.data(), 4096, tpsFloat32, reinterpret_cast<tpsStream_t*>(f.streams.data())));
  f.sync();
  f.check(tpsFloat32, 4096, "auto after a refused p2p self-check");
  f.tearDown();
}

}  // namespace
