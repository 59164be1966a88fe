// SPDX-License-Identifier: Apache-2.0
// topo_format_test - golden tests for `tpscope topo` output (table and JSON shape), and N/A handling.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "topo/topo_command.h"

namespace tpscope {
namespace {

BackendsBuilt hostAndNccl() {
  BackendsBuilt b;
  b.host = b.nccl = true;
  b.nccl_version = 22803;
  return b;
}

// What `auto` picks, as `tpscope topo` computes it, with no tune file.
AutoSummary noTuneFile(const Topology& t, const std::vector<MediumStatus>& media) {
  return autoPicks(t, media, nullptr, "no tune file at /home/user/.cache/tpscope/tune.json", 4u << 20);
}

TEST(TopoFormat, JsonGoldenForTheH200Pair) {
  Topology t = testing::h200Pair();
  auto media = evaluateMedia(t, hostAndNccl());
  auto doc = cli::topologyDocument(t, media, "2.28.3", noTuneFile(t, media));
  doc["tpscope_version"] = "X.Y.Z";  // the version changes; the shape does not
  testing::expectGolden("topo_h200.json", doc.dump(2) + "\n");
}

TEST(TopoFormat, TableGoldenForTheH200Pair) {
  Topology t = testing::h200Pair();
  auto media = evaluateMedia(t, hostAndNccl());
  testing::expectGolden("topo_h200.txt", cli::formatTopologyTable(t, media, "2.28.3", noTuneFile(t, media)));
}

TEST(TopoFormat, TableGoldenForAPcieBoxWithoutP2p) {
  Topology t = testing::pcieNoP2pPair();
  auto media = evaluateMedia(t, hostAndNccl());
  testing::expectGolden("topo_pcie_nop2p.txt", cli::formatTopologyTable(t, media, "2.28.3", noTuneFile(t, media)));
}

// Every backend built and a tune file measured on this box: the p2p algorithms and the file's crossover.
TEST(TopoFormat, TableGoldenForTheH200PairWithATuneFile) {
  Topology t = testing::h200Pair();
  BackendsBuilt built = hostAndNccl();
  built.p2p = true;
  auto media = evaluateMedia(t, built);
  detail::AutoTable table;
  table.fingerprint = "2xNVIDIA H200 NV18";
  table.measured = "2026-11-29T10:00:00Z";
  table.path = "/home/user/.cache/tpscope/tune.json";
  table.ranges = {{size_t{256} << 20, tpsBackendP2p}, {std::nullopt, tpsBackendNccl}};
  testing::expectGolden("topo_h200_tuned.txt",
                        cli::formatTopologyTable(t, media, "2.28.3", autoPicks(t, media, &table, "", 4u << 20)));
}

TEST(TopoFormat, UnknownValuesAreNullAndNA_NeverZero) {
  Topology t = testing::h200Pair();
  t.nvml_available = false;
  t.nvml_reason = "libnvidia-ml.so.1 could not be loaded";
  t.driver_version.clear();
  for (GpuInfo& g : t.gpus) {
    g.pcie_gen_current.reset();
    g.pcie_gen_max.reset();
    g.pcie_width_current.reset();
    g.pcie_width_max.reset();
    g.pcie_ceiling_mbps.reset();
    g.nvlink_links_up.reset();
    g.nvlink_link_rate_mbps.reset();
    g.nvlink_ceiling_mbps.reset();
  }
  auto media = evaluateMedia(t, hostAndNccl());
  auto doc = cli::topologyDocument(t, media, "", noTuneFile(t, media));
  EXPECT_TRUE(doc["gpus"][0]["pcie"]["ceiling_mbps_per_direction"].is_null());
  EXPECT_TRUE(doc["gpus"][0]["nvlink"]["links_up"].is_null());
  EXPECT_TRUE(doc["driver_version"].is_null());
  EXPECT_TRUE(doc["nccl_version"].is_null());
  EXPECT_EQ(doc["nvml"]["available"], false);
  std::string table = cli::formatTopologyTable(t, media, "", noTuneFile(t, media));
  EXPECT_NE(table.find("NVML unavailable: libnvidia-ml.so.1 could not be loaded"), std::string::npos);
  EXPECT_NE(table.find("N/A N/A"), std::string::npos);
  EXPECT_EQ(table.find(" 0 MB/s"), std::string::npos);
}

}  // namespace
}  // namespace tpscope
