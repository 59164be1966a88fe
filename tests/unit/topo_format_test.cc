// SPDX-License-Identifier: Apache-2.0
// topo_format_test - golden tests for `tpscope topo` output (table and JSON shape), and N/A handling.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "topo.h"

namespace tpscope {
namespace {

BackendsBuilt hostAndNccl() {
  BackendsBuilt b;
  b.host = b.nccl = true;
  b.nccl_version = 22803;
  return b;
}

TEST(TopoFormat, JsonGoldenForTheH200Pair) {
  Topology t = testing::h200Pair();
  auto doc = cli::topologyDocument(t, evaluatePaths(t, hostAndNccl()), "2.28.3");
  doc["tpscope_version"] = "X.Y.Z";  // the version changes; the shape does not
  testing::expectGolden("topo_h200.json", doc.dump(2) + "\n");
}

TEST(TopoFormat, TableGoldenForTheH200Pair) {
  Topology t = testing::h200Pair();
  testing::expectGolden("topo_h200.txt", cli::formatTopologyTable(t, evaluatePaths(t, hostAndNccl()), "2.28.3"));
}

TEST(TopoFormat, TableGoldenForAPcieBoxWithoutP2p) {
  Topology t = testing::pcieNoP2pPair();
  testing::expectGolden("topo_pcie_nop2p.txt", cli::formatTopologyTable(t, evaluatePaths(t, hostAndNccl()), "2.28.3"));
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
  auto doc = cli::topologyDocument(t, evaluatePaths(t, hostAndNccl()), "");
  EXPECT_TRUE(doc["gpus"][0]["pcie"]["ceiling_mbps_per_direction"].is_null());
  EXPECT_TRUE(doc["gpus"][0]["nvlink"]["links_up"].is_null());
  EXPECT_TRUE(doc["driver_version"].is_null());
  EXPECT_TRUE(doc["nccl_version"].is_null());
  EXPECT_EQ(doc["nvml"]["available"], false);
  std::string table = cli::formatTopologyTable(t, evaluatePaths(t, hostAndNccl()), "");
  EXPECT_NE(table.find("NVML unavailable: libnvidia-ml.so.1 could not be loaded"), std::string::npos);
  EXPECT_NE(table.find("N/A N/A"), std::string::npos);
  EXPECT_EQ(table.find(" 0 MB/s"), std::string::npos);
}

}  // namespace
}  // namespace tpscope
