// SPDX-License-Identifier: Apache-2.0
// paths_test - unit tests for src/allreduce/paths.cc: which AllReduce paths work, and why.
#include "allreduce/paths.h"

#include <gtest/gtest.h>

#include "fixtures.h"

namespace tpscope {
namespace {

const PathStatus& find(const std::vector<PathStatus>& v, const std::string& id) {
  for (const PathStatus& p : v)
    if (p.id == id) return p;
  throw std::runtime_error("no path " + id);
}

BackendsBuilt allBuilt() {
  BackendsBuilt b;
  b.host = b.p2p = b.nccl = true;
  b.nccl_version = 22803;
  return b;
}

TEST(Paths, H200PairUsesNvlinkNotPcieP2p) {
  auto paths = evaluatePaths(testing::h200Pair(), allBuilt());
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(find(paths, "host").state, PathState::kAvailable);
  EXPECT_NE(find(paths, "host").reason.find("host-native atomics no"), std::string::npos);
  EXPECT_EQ(find(paths, "p2p_nvlink").state, PathState::kAvailable);
  EXPECT_NE(find(paths, "p2p_nvlink").reason.find("NV18"), std::string::npos);
  EXPECT_EQ(find(paths, "p2p_pcie").state, PathState::kUnavailable);
  EXPECT_NE(find(paths, "p2p_pcie").reason.find("NVLink joins every pair"), std::string::npos);
  EXPECT_EQ(find(paths, "nccl").state, PathState::kAvailable);
  EXPECT_NE(find(paths, "nccl").reason.find("2.28.3"), std::string::npos);
  EXPECT_NE(find(paths, "nccl").reason.find("NVLink"), std::string::npos);
}

TEST(Paths, NoPeerAccessLeavesHostStagingAndNcclShm) {
  auto paths = evaluatePaths(testing::pcieNoP2pPair(), allBuilt());
  EXPECT_EQ(find(paths, "host").state, PathState::kAvailable);
  EXPECT_EQ(find(paths, "p2p_nvlink").state, PathState::kUnavailable);
  EXPECT_NE(find(paths, "p2p_nvlink").reason.find("GPU0-GPU1 has no NVLink (PHB)"), std::string::npos);
  EXPECT_EQ(find(paths, "p2p_pcie").state, PathState::kUnavailable);
  EXPECT_NE(find(paths, "p2p_pcie").reason.find("no peer access"), std::string::npos);
  EXPECT_NE(find(paths, "nccl").reason.find("SHM"), std::string::npos);
}

TEST(Paths, PcieP2pWithoutNvlink) {
  Topology t = testing::pcieNoP2pPair();
  for (auto& row : t.pairs)
    for (PairInfo& p : row)
      if (p.from != p.to) p.p2p_access = true;
  auto paths = evaluatePaths(t, allBuilt());
  EXPECT_EQ(find(paths, "p2p_pcie").state, PathState::kAvailable);
  EXPECT_EQ(find(paths, "p2p_nvlink").state, PathState::kUnavailable);
  EXPECT_NE(find(paths, "nccl").reason.find("PCIe P2P"), std::string::npos);
}

TEST(Paths, HardwareReadyButBackendMissingSaysNotBuilt) {
  BackendsBuilt none;
  auto paths = evaluatePaths(testing::h200Pair(), none);
  EXPECT_EQ(find(paths, "host").state, PathState::kNotBuilt);
  EXPECT_NE(find(paths, "host").reason.find("no backend"), std::string::npos);
  EXPECT_EQ(find(paths, "nccl").state, PathState::kUnavailable);  // the library itself did not load
  EXPECT_NE(find(paths, "nccl").reason.find("could not be loaded"), std::string::npos);
}

TEST(Paths, OneGpuHasNoAllReduce) {
  Topology t = testing::h200Pair();
  t.gpus.resize(1);
  t.pairs = {{t.pairs[0][0]}};
  for (const PathStatus& p : evaluatePaths(t, allBuilt())) {
    EXPECT_EQ(p.state, PathState::kUnavailable) << p.id;
    EXPECT_NE(p.reason.find("2 or more GPUs"), std::string::npos) << p.reason;
  }
}

TEST(Paths, OldGpusCannotRunTheFlagWait) {
  Topology t = testing::pcieNoP2pPair();
  t.gpus[1].cc_major = 6;
  t.gpus[1].cc_minor = 1;
  auto paths = evaluatePaths(t, allBuilt());
  EXPECT_EQ(find(paths, "host").state, PathState::kUnavailable);
  EXPECT_NE(find(paths, "host").reason.find("GPU1 is compute capability 6.1"), std::string::npos);
}

TEST(Paths, NcclVersionString) {
  EXPECT_EQ(ncclVersionString(22803), "2.28.3");
  EXPECT_EQ(ncclVersionString(21913), "2.19.13");
}

}  // namespace
}  // namespace tpscope
