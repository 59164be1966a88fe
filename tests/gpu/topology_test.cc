// SPDX-License-Identifier: Apache-2.0
// topology_test - `tpscope topo` and queryTopology on a real GPU.
#include "topology/topology.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "nvml/nvml_loader.h"
#include "topology/ceilings.h"

namespace tpscope {
namespace {

TEST(TopologyGpu, QueriesEveryVisibleGpu) {
  TPS_REQUIRE_GPUS(1);
  Topology t;
  std::string reason;
  ASSERT_EQ(queryTopology({}, &t, &reason), tpsSuccess) << reason;
  ASSERT_EQ(static_cast<int>(t.gpus.size()), testing::gpuCount());
  for (const GpuInfo& g : t.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.bus_id.size(), 12u) << g.bus_id;  // 0000:18:00.0
    EXPECT_GT(g.memory_bytes, 1ull << 30);
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GE(g.copy_engines, 1);
    if (t.nvml_available) {
      ASSERT_TRUE(g.pcie_gen_max && g.pcie_width_max) << "NVML should report the PCIe link of GPU " << g.index;
      EXPECT_GE(*g.pcie_gen_max, 1);
      EXPECT_LE(*g.pcie_gen_current, *g.pcie_gen_max);
      EXPECT_DOUBLE_EQ(*g.pcie_ceiling_mbps, *pcieCeilingMBps(*g.pcie_gen_max, *g.pcie_width_max));
      ASSERT_TRUE(g.nvlink_links_up.has_value());
      if (*g.nvlink_links_up > 0) {
        ASSERT_TRUE(g.nvlink_link_rate_mbps.has_value());
        EXPECT_GT(*g.nvlink_link_rate_mbps, 1000.0);
      }
    }
  }
  EXPECT_EQ(t.nvml_available, nvml::Nvml::get() != nullptr);
}

TEST(TopologyGpu, SelectingOneGpuAndRejectingMissingOnes) {
  TPS_REQUIRE_GPUS(1);
  Topology t;
  std::string reason;
  ASSERT_EQ(queryTopology({0}, &t, &reason), tpsSuccess);
  EXPECT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(queryTopology({testing::gpuCount()}, &t, &reason), tpsInvalidArgument);
  EXPECT_NE(reason.find("does not exist"), std::string::npos) << reason;
}

TEST(TopologyGpu, CliJsonMatchesTheLibrary) {
  TPS_REQUIRE_GPUS(1);
  FILE* p = popen(TPSCOPE_CLI_PATH " topo --format json", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0);
  auto doc = nlohmann::json::parse(out);
  EXPECT_EQ(static_cast<int>(doc["gpus"].size()), testing::gpuCount());
  EXPECT_EQ(doc["allreduce_paths"].size(), 4u);
  EXPECT_TRUE(doc["nvml"]["available"].is_boolean());
}

}  // namespace
}  // namespace tpscope
