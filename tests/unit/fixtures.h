// SPDX-License-Identifier: Apache-2.0
// fixtures.h - synthetic topologies and golden-file helpers for the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "topology/ceilings.h"
#include "topology/topology.h"

namespace tpscope::testing {

// Two H200 SXM as measured on our machine (docs/results/h200x2-topo/topo.txt): NV18, Gen5 x16, P2P OK.
inline Topology h200Pair() {
  Topology t;
  t.driver_version = "580.159.04";
  t.cuda_driver_version = 13000;
  t.cuda_runtime_version = 13000;
  t.nvml_available = true;
  for (int i = 0; i < 2; ++i) {
    GpuInfo g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.bus_id = i == 0 ? "0000:18:00.0" : "0000:2A:00.0";
    g.memory_bytes = 143771ull << 20;
    g.cc_major = 9;
    g.sm_count = 132;
    g.pcie_gen_current = g.pcie_gen_max = 5;
    g.pcie_width_current = g.pcie_width_max = 16;
    g.pcie_ceiling_mbps = pcieCeilingMBps(5, 16);
    g.nvlink_links_up = 18;
    g.nvlink_link_rate_mbps = 26562;
    g.nvlink_ceiling_mbps = nvlinkCeilingMBps(18, 26562);
    g.copy_engines = 3;
    g.host_native_atomics = false;
    g.can_map_host_memory = true;
    t.gpus.push_back(g);
  }
  t.pairs.assign(2, std::vector<PairInfo>(2));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      PairInfo& p = t.pairs[a][b];
      p.from = a;
      p.to = b;
      if (a == b) {
        p.kind = LinkKind::kSelf;
        continue;
      }
      p.kind = LinkKind::kNvlink;
      p.nvlink_links = 18;
      p.p2p_access = p.p2p_atomics = true;
      p.performance_rank = 0;
    }
  return t;
}

// Two GeForce cards on PCIe Gen3 x16 with no peer access and no NVLink counters (the seed study's box
// with the bridge ignored): NVML answers, but P2P is off.
inline Topology pcieNoP2pPair() {
  Topology t = h200Pair();
  for (GpuInfo& g : t.gpus) {
    g.name = "NVIDIA GeForce RTX 2080 Ti";
    g.memory_bytes = 22528ull << 20;  // the study's modded 22 GB cards
    g.cc_major = 7;
    g.cc_minor = 5;
    g.pcie_gen_current = 1;  // idle links drop their generation
    g.pcie_gen_max = 3;
    g.pcie_ceiling_mbps = pcieCeilingMBps(3, 16);
    g.nvlink_links_up = 0;
    g.nvlink_link_rate_mbps.reset();
    g.nvlink_ceiling_mbps.reset();
  }
  for (auto& row : t.pairs)
    for (PairInfo& p : row)
      if (p.from != p.to) {
        p.kind = LinkKind::kPhb;
        p.nvlink_links = 0;
        p.p2p_access = p.p2p_atomics = false;
      }
  return t;
}

inline std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Compares `actual` with tests/unit/golden/NAME; TPSCOPE_UPDATE_GOLDEN=1 rewrites the file instead.
inline void expectGolden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(TPSCOPE_SOURCE_DIR) + "/tests/unit/golden/" + name;
  if (const char* u = std::getenv("TPSCOPE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << actual;
    GTEST_SKIP() << "rewrote " << path;
  }
  const std::string expected = readFile(path);
  ASSERT_FALSE(expected.empty()) << "missing golden file " << path << " (TPSCOPE_UPDATE_GOLDEN=1 writes it)";
  EXPECT_EQ(expected, actual) << "output differs from " << path;
}

}  // namespace tpscope::testing
