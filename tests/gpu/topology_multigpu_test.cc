// SPDX-License-Identifier: Apache-2.0
// topology_multigpu_test - the P2P matrix and NVLink pairing on two or more real GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "allreduce/media.h"
#include "gpu_test_util.h"
#include "topology/topology.h"

namespace tpscope {
namespace {

TEST(TopologyMultiGpu, PairMatrixAgreesWithCuda) {
  TPS_REQUIRE_GPUS(2);
  Topology t;
  std::string reason;
  ASSERT_EQ(queryTopology({}, &t, &reason), tpsSuccess) << reason;
  const size_t n = t.gpus.size();
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      const PairInfo& p = t.pairs[a][b];
      if (a == b) {
        EXPECT_EQ(linkLabel(p), "X");
        continue;
      }
      int access = 0;
      ASSERT_EQ(cudaDeviceCanAccessPeer(&access, p.from, p.to), cudaSuccess);
      EXPECT_EQ(p.p2p_access, access != 0);
      // Links are symmetric: the same kind and count seen from either end.
      EXPECT_EQ(linkLabel(p), linkLabel(t.pairs[b][a]));
      if (p.kind == LinkKind::kNvlink) {
        EXPECT_GT(p.nvlink_links, 0);
        EXPECT_LE(p.nvlink_links, *t.gpus[a].nvlink_links_up);
      }
    }
  }
}

TEST(TopologyMultiGpu, PeerCopyWorksWhereAccessIsReported) {
  TPS_REQUIRE_GPUS(2);
  int access = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&access, 0, 1), cudaSuccess);
  if (!access) GTEST_SKIP() << "GPU0 has no peer access to GPU1 on this machine";
  const size_t bytes = 1 << 20;
  std::vector<unsigned char> host(bytes), back(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 131 + 7);
  void *d0 = nullptr, *d1 = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d0, bytes), cudaSuccess);
  cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
  ASSERT_TRUE(e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d1, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d0, host.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeer(d1, 1, d0, 0, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d1, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, back);
  cudaFree(d1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaFree(d0);
}

TEST(TopologyMultiGpu, PathsOnThisBoxAreConsistentWithThePairs) {
  TPS_REQUIRE_GPUS(2);
  Topology t;
  std::string reason;
  ASSERT_EQ(queryTopology({}, &t, &reason), tpsSuccess) << reason;
  auto media = evaluateMedia(t, backendsBuilt());
  ASSERT_EQ(media.size(), 4u);
  bool all_nvlink = true;
  for (const auto& row : t.pairs)
    for (const PairInfo& p : row)
      if (p.from != p.to) all_nvlink = all_nvlink && p.kind == LinkKind::kNvlink && p.p2p_access;
  EXPECT_EQ(media[1].state != MediumState::kUnavailable, all_nvlink) << media[1].reason;
  EXPECT_NE(media[3].state, MediumState::kUnavailable) << "NCCL should load on a GPU machine: " << media[3].reason;
}

}  // namespace
}  // namespace tpscope
