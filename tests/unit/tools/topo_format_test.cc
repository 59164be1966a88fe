// SPDX-License-Identifier: Apache-2.0
// topo_format_test - golden tests for `tpscope topo` output (table and JSON shape), and N/A handling.
#include <gtest/gtest.h>

#include <tuple>

#include "allreduce/wire.h"
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

// TPSCOPE_WIRE in the auto table: auto:0.01 on a PCIe box without P2P whose tune file has a wires table
// for it (int8 from 16 MiB within the budget, fp8 beyond it), as text (golden) and JSON.
TEST(TopoFormat, TheWireEachSizeUsesUnderTpscopeWire) {
  Topology t = testing::pcieNoP2pPair();
  auto media = evaluateMedia(t, hostAndNccl());
  const std::string path = "/home/user/.cache/tpscope/tune.json";
  const detail::AutoTableLoad none{std::nullopt, "no \"auto\" table in tune file " + path, false};
  nlohmann::json rows = nlohmann::json::array();
  for (uint64_t bytes : {1u << 20, 16u << 20})
    for (const auto& [wire, us, rms] :
         {std::tuple{"exact", bytes / 12e3, 0.0}, std::tuple{"int8", bytes / 21e3, 0.0036},
          std::tuple{"fp8", bytes / 22e3, 0.017}})
      rows.push_back(
          {{"bytes", bytes}, {"wire", wire}, {"time_us", bytes < (16u << 20) ? us + 40 : us}, {"rel_rms", rms}});
  rows[1]["time_us"] = 200.0;  // 1 MiB: int8 slower than exact there
  rows[2]["time_us"] = 200.0;
  const nlohmann::json tune = {{"wires",
                                {{"fingerprint", detail::boxFingerprint(t)},
                                 {"measured", "2026-12-06T10:00:00Z"},
                                 {"dtype", "bfloat16"},
                                 {"rows", rows}}}};
  const AutoSummary s = cli::autoSummaryWith(t, media, none, 4u << 20, "auto:0.01", tune, path);
  testing::expectGolden("topo_pcie_wire_auto.txt", cli::formatTopologyTable(t, media, "2.28.3", s));
  const nlohmann::json j = toJson(s);
  EXPECT_EQ(j["wire_policy"], "auto:0.01");
  EXPECT_EQ(j["picks"][3]["wire"], "exact");  // 1 MiB
  EXPECT_EQ(j["picks"][4]["wire"], "int8");   // 16 MiB
  EXPECT_EQ(j["picks"][6]["wire"], "int8");   // 1 GiB: the largest size measured
  EXPECT_EQ(j["picks"][6]["algorithm"], "copy engines, int8");

  // Another box's table: every call exact, and the note says why.
  nlohmann::json elsewhere = tune;
  elsewhere["wires"]["fingerprint"] = "2xNVIDIA H200 NV18";
  AutoSummary o = cli::autoSummaryWith(t, media, none, 4u << 20, "auto:0.01", elsewhere, path);
  for (const AutoPick& p : o.picks) EXPECT_EQ(p.wire, "exact");
  EXPECT_NE(o.wire_note.find("measured its wires on \"2xNVIDIA H200 NV18\""), std::string::npos) << o.wire_note;
  // A named wire at every size the host backend carries; unset: exact, said as the default.
  o = cli::autoSummaryWith(t, media, none, 4u << 20, "fp8", tune, path);
  for (const AutoPick& p : o.picks) EXPECT_EQ(p.wire, "fp8");
  EXPECT_EQ(o.wire_policy, "fp8");
  o = cli::autoSummaryWith(t, media, none, 4u << 20, nullptr, tune, path);
  for (const AutoPick& p : o.picks) EXPECT_EQ(p.wire, "exact");
  EXPECT_NE(cli::formatTopologyTable(t, media, "2.28.3", o).find("# wire: exact, the default"), std::string::npos);
  // A value a communicator refuses: the picks exact, the note says so.
  o = cli::autoSummaryWith(t, media, none, 4u << 20, "int9", tune, path);
  for (const AutoPick& p : o.picks) EXPECT_EQ(p.wire, "exact");
  EXPECT_NE(o.wire_note.find("TPSCOPE_WIRE: wire 'int9'"), std::string::npos) << o.wire_note;
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
