// SPDX-License-Identifier: Apache-2.0
// paths_test - unit tests for src/allreduce/media.cc: which AllReduce media work, and why.
#include "allreduce/media.h"

#include <gtest/gtest.h>

#include "fixtures.h"

namespace tpscope {
namespace {

const MediumStatus& find(const std::vector<MediumStatus>& v, const std::string& id) {
  for (const MediumStatus& p : v)
    if (p.id == id) return p;
  throw std::runtime_error("no path " + id);
}

BackendsBuilt allBuilt() {
  BackendsBuilt b;
  b.host = b.p2p = b.nccl = true;
  b.nccl_version = 22803;
  return b;
}

TEST(Media, H200PairUsesNvlinkNotPcieP2p) {
  auto media = evaluateMedia(testing::h200Pair(), allBuilt());
  ASSERT_EQ(media.size(), 4u);
  EXPECT_EQ(find(media, "host").state, MediumState::kAvailable);
  EXPECT_NE(find(media, "host").reason.find("host-native atomics no"), std::string::npos);
  EXPECT_EQ(find(media, "p2p_nvlink").state, MediumState::kAvailable);
  EXPECT_NE(find(media, "p2p_nvlink").reason.find("NV18"), std::string::npos);
  EXPECT_EQ(find(media, "p2p_pcie").state, MediumState::kUnavailable);
  EXPECT_NE(find(media, "p2p_pcie").reason.find("NVLink joins every pair"), std::string::npos);
  EXPECT_EQ(find(media, "nccl").state, MediumState::kAvailable);
  EXPECT_NE(find(media, "nccl").reason.find("2.28.3"), std::string::npos);
  // Each medium names the backend that uses it.
  EXPECT_EQ(find(media, "host").backend, tpsBackendHost);
  EXPECT_EQ(find(media, "p2p_nvlink").backend, tpsBackendP2p);
  EXPECT_EQ(find(media, "p2p_pcie").backend, tpsBackendP2p);
  EXPECT_EQ(find(media, "nccl").backend, tpsBackendNccl);
  EXPECT_NE(find(media, "nccl").reason.find("NVLink"), std::string::npos);
}

TEST(Media, NoPeerAccessLeavesHostStagingAndNcclShm) {
  auto media = evaluateMedia(testing::pcieNoP2pPair(), allBuilt());
  EXPECT_EQ(find(media, "host").state, MediumState::kAvailable);
  EXPECT_EQ(find(media, "p2p_nvlink").state, MediumState::kUnavailable);
  EXPECT_NE(find(media, "p2p_nvlink").reason.find("GPU0-GPU1 has no NVLink (PHB)"), std::string::npos);
  EXPECT_EQ(find(media, "p2p_pcie").state, MediumState::kUnavailable);
  EXPECT_NE(find(media, "p2p_pcie").reason.find("no peer access"), std::string::npos);
  EXPECT_NE(find(media, "nccl").reason.find("SHM"), std::string::npos);
}

TEST(Media, PcieP2pWithoutNvlink) {
  Topology t = testing::pcieNoP2pPair();
  for (auto& row : t.pairs)
    for (PairInfo& p : row)
      if (p.from != p.to) p.p2p_access = true;
  auto media = evaluateMedia(t, allBuilt());
  EXPECT_EQ(find(media, "p2p_pcie").state, MediumState::kAvailable);
  EXPECT_EQ(find(media, "p2p_nvlink").state, MediumState::kUnavailable);
  EXPECT_NE(find(media, "nccl").reason.find("PCIe P2P"), std::string::npos);
}

TEST(Media, HardwareReadyButBackendMissingSaysNotBuilt) {
  BackendsBuilt none;
  auto media = evaluateMedia(testing::h200Pair(), none);
  EXPECT_EQ(find(media, "host").state, MediumState::kNotBuilt);
  EXPECT_NE(find(media, "host").reason.find("no backend"), std::string::npos);
  EXPECT_EQ(find(media, "nccl").state, MediumState::kUnavailable);  // the library itself did not load
  EXPECT_NE(find(media, "nccl").reason.find("could not be loaded"), std::string::npos);
}

TEST(Media, OneGpuHasNoAllReduce) {
  Topology t = testing::h200Pair();
  t.gpus.resize(1);
  t.pairs = {{t.pairs[0][0]}};
  for (const MediumStatus& p : evaluateMedia(t, allBuilt())) {
    EXPECT_EQ(p.state, MediumState::kUnavailable) << p.id;
    EXPECT_NE(p.reason.find("2 or more GPUs"), std::string::npos) << p.reason;
  }
}

TEST(Media, OldGpusCannotRunTheFlagWait) {
  Topology t = testing::pcieNoP2pPair();
  t.gpus[1].cc_major = 6;
  t.gpus[1].cc_minor = 1;
  auto media = evaluateMedia(t, allBuilt());
  EXPECT_EQ(find(media, "host").state, MediumState::kUnavailable);
  EXPECT_NE(find(media, "host").reason.find("GPU1 is compute capability 6.1"), std::string::npos);
}

std::vector<std::string> column(const AutoSummary& s, int which) {
  std::vector<std::string> out;
  for (const AutoPick& p : s.picks)
    out.push_back(which == 0 ? tpsBackendName(p.backend) : which == 1 ? p.algorithm : p.source);
  return out;
}

constexpr size_t kThreshold = 4u << 20;  // the host backend's built-in copy threshold

TEST(AutoPicks, NvlinkBoxUsesP2pWithTheBackendsOwnAlgorithmPerSize) {
  Topology t = testing::h200Pair();
  AutoSummary s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "no tune file at /x", kThreshold);
  EXPECT_EQ(s.fingerprint, "2xNVIDIA H200 NV18");
  EXPECT_EQ(s.note, "no tune file at /x");
  ASSERT_EQ(s.picks.size(), autoSizeClasses().size());
  EXPECT_EQ(s.picks.front().bytes, 8u << 10);
  EXPECT_EQ(s.picks.back().bytes, 1u << 30);
  EXPECT_EQ(column(s, 0), std::vector<std::string>(7, "p2p"));
  // 8 KiB, 64 KiB, 256 KiB: LL (up to kP2pLLMax); 1 MiB: flag one-shot; above: two-shot.
  EXPECT_EQ(column(s, 1), (std::vector<std::string>{"LL one-shot", "LL one-shot", "LL one-shot", "one-shot", "two-shot",
                                                    "two-shot", "two-shot"}));
  EXPECT_EQ(column(s, 2), std::vector<std::string>(7, "built-in default"));
}

TEST(AutoPicks, PcieP2pBoxUsesP2pAndNoP2pBoxStagesThroughTheHost) {
  Topology t = testing::pcieNoP2pPair();
  AutoSummary s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold);
  EXPECT_EQ(column(s, 0), std::vector<std::string>(7, "host"));
  EXPECT_EQ(column(s, 1), (std::vector<std::string>{"kernel", "kernel", "kernel", "kernel", "copy engines",
                                                    "copy engines", "copy engines"}));
  for (auto& row : t.pairs)
    for (PairInfo& p : row) p.p2p_access = true;
  s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold);
  EXPECT_EQ(column(s, 0), std::vector<std::string>(7, "p2p"));
}

TEST(AutoPicks, WithoutAP2pBuildNcclTakesThePeerPaths) {
  Topology t = testing::h200Pair();
  BackendsBuilt b = allBuilt();
  b.p2p = false;
  AutoSummary s = autoPicks(t, evaluateMedia(t, b), nullptr, "", kThreshold);
  EXPECT_EQ(column(s, 0), std::vector<std::string>(7, "nccl"));
}

TEST(AutoPicks, AMatchingTableIsShownWithItsFileAndDate) {
  Topology t = testing::h200Pair();
  detail::AutoTable table;
  table.fingerprint = "2xNVIDIA H200 NV18";
  table.measured = "2026-11-29T10:00:00Z";
  table.path = "/home/u/.cache/tpscope/tune.json";
  table.ranges = {{size_t{1} << 20, tpsBackendP2p}, {std::nullopt, tpsBackendNccl}};
  AutoSummary s = autoPicks(t, evaluateMedia(t, allBuilt()), &table, "ignored", kThreshold);
  EXPECT_TRUE(s.note.empty());
  EXPECT_EQ(s.tune_file, "tune file /home/u/.cache/tpscope/tune.json, measured 2026-11-29T10:00:00Z");
  EXPECT_EQ(column(s, 0), (std::vector<std::string>{"p2p", "p2p", "p2p", "p2p", "nccl", "nccl", "nccl"}));
  EXPECT_EQ(s.picks[4].source, "tune file /home/u/.cache/tpscope/tune.json, measured 2026-11-29T10:00:00Z");
  EXPECT_EQ(s.picks[4].algorithm, "NCCL's choice");
  // A table naming a backend this box cannot run: the built-in default for those sizes.
  table.ranges = {{size_t{1} << 20, tpsBackendHost}, {std::nullopt, tpsBackendP2p}};
  Topology no_p2p = testing::pcieNoP2pPair();
  s = autoPicks(no_p2p, evaluateMedia(no_p2p, allBuilt()), &table, "", kThreshold);
  EXPECT_EQ(column(s, 0), std::vector<std::string>(7, "host"));
  EXPECT_NE(s.picks[0].source.find("tune file"), std::string::npos);
  EXPECT_EQ(s.picks[6].source, "built-in default");
  auto j = toJson(s);
  EXPECT_EQ(j["picks"][0]["size_bytes"], 8192);
  EXPECT_EQ(j["picks"][0]["backend"], "host");
  EXPECT_TRUE(j["note"].is_null());
  EXPECT_EQ(j["tune_file"], s.tune_file);
}

// The wire a call asks for: carried by the backend's algorithm of that wire (its label says so); where the
// backend has none at that size (p2p below the two-shot's sizes), or the dtype does not take it (bf16 for
// bfloat16), exact.
TEST(AutoPicks, TheWireEachSizeTravelsAs) {
  Topology t = testing::pcieNoP2pPair();
  AutoSummary s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold);
  for (const AutoPick& p : s.picks) EXPECT_EQ(p.wire, "exact");  // the default
  s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold, [](uint64_t bytes, tpsBackend_t) {
    return bytes >= (16u << 20) ? detail::WireCode::kInt8 : detail::WireCode::kExact;
  });
  std::vector<std::string> wires;
  for (const AutoPick& p : s.picks) wires.push_back(p.wire);
  EXPECT_EQ(wires, (std::vector<std::string>{"exact", "exact", "exact", "exact", "int8", "int8", "int8"}));
  EXPECT_EQ(s.picks[4].algorithm, "copy engines, int8");
  EXPECT_EQ(s.picks[0].algorithm, "kernel");
  EXPECT_EQ(toJson(s)["picks"][4]["wire"], "int8");
  EXPECT_EQ(toJson(s)["wire_policy"], "exact");
  s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold,
                [](uint64_t, tpsBackend_t) { return detail::WireCode::kBf16; });
  for (const AutoPick& p : s.picks) EXPECT_EQ(p.wire, "exact") << "bf16 is for float32 calls";
  Topology nv = testing::h200Pair();
  s = autoPicks(nv, evaluateMedia(nv, allBuilt()), nullptr, "", kThreshold,
                [](uint64_t, tpsBackend_t) { return detail::WireCode::kFp8; });
  wires.clear();
  for (const AutoPick& p : s.picks) wires.push_back(p.wire);
  EXPECT_EQ(wires, (std::vector<std::string>{"exact", "exact", "exact", "exact", "fp8", "fp8", "fp8"}))
      << "p2p carries a wire from the two-shot's sizes up";
  EXPECT_EQ(s.picks[4].algorithm, "two-shot, fp8");
  EXPECT_EQ(s.picks[3].algorithm, "one-shot");
}

TEST(AutoPicks, OneGpuPicksNothing) {
  Topology t = testing::h200Pair();
  t.gpus.resize(1);
  t.pairs = {{t.pairs[0][0]}};
  AutoSummary s = autoPicks(t, evaluateMedia(t, allBuilt()), nullptr, "", kThreshold);
  for (const AutoPick& p : s.picks) {
    EXPECT_EQ(p.backend, tpsBackendAuto);
    EXPECT_EQ(p.algorithm, "-");
    EXPECT_EQ(p.wire, "-");
  }
  EXPECT_TRUE(toJson(s)["picks"][0]["backend"].is_null());
}

TEST(Media, NcclVersionString) {
  EXPECT_EQ(ncclVersionString(22803), "2.28.3");
  EXPECT_EQ(ncclVersionString(21913), "2.19.13");
}

}  // namespace
}  // namespace tpscope
