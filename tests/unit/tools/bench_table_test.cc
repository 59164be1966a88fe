// SPDX-License-Identifier: Apache-2.0
// bench_table_test - formulas, the nccl-tests table, footer, ratios and JSON of `tpscope bench allreduce`,
// pinned by golden files built from synthetic rows (tests/unit/golden/bench_allreduce_h200.{txt,json}).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>

#include "bench/table.h"
#include "fixtures.h"

namespace tpscope::cli {
namespace {

BenchContext h200Context() {
  BenchContext c;
  c.version = "0.1.0";
  c.git_sha = "0123456789ab";
  c.hostname = "h200-box";
  c.start_time = "2026-11-29T20:00:00Z";
  c.pid = 4242;
  c.argv = {"tpscope", "bench", "allreduce", "-b", "8K", "-e", "256M", "-d", "bf16"};
  c.devices = {{0, 0, "0000:18:00.0", "NVIDIA H200"}, {1, 1, "0000:2A:00.0", "NVIDIA H200"}};
  c.driver_version = "580.159.04";
  c.nccl_version = "2.28.3";
  c.cuda_driver_version = c.cuda_runtime_version = 13000;
  c.env = {{"NCCL_P2P_DISABLE", "1"}, {"NCCL_NVLS_ENABLE", "0"}};
  c.pinned_d2h_gbps = 55.25;  // H200-FACTS.md
  c.pinned_h2d_gbps = 55.45;
  c.options.devices = {0, 1};
  return c;
}

// Two sizes, host then nccl at each (the interleaved order), with the figures of H200-FACTS.md's
// NCCL_P2P_DISABLE=1 column for nccl and made-up ones for host.
std::vector<BenchRow> h200Rows() {
  auto row = [](tpsBackend_t b, const char* path, size_t count, double mean, double min, double med, double max,
                MediumBytes bytes) {
    BenchRow r;
    r.backend = b;
    r.path = path;
    r.dtype = tpsBfloat16;
    r.count = count;
    r.calls = 20;
    r.time = {mean, min, med, max};
    r.check = CheckCounts{};
    r.check->rel_rms = 1.22e-3, r.check->rel_max = 4.5e-3;  // the exact sum rounded once to bfloat16
    r.bytes_per_call = bytes;
    setBandwidths(&r, 2);
    return r;
  };
  const MediumBytes host8k{8192, 8192, 0, 0, 0, 0}, nccl8k{0, 0, 0, 0, 8192, 8192};
  const MediumBytes host256m{268435456, 268435456, 0, 0, 0, 0}, nccl256m{0, 0, 0, 0, 268435456, 268435456};
  std::vector<BenchRow> rows = {
      row(tpsBackendHost, "host-kernel", 4096, 9.5, 9.1, 9.4, 14.2, host8k),
      row(tpsBackendNccl, "nccl", 4096, 10.58, 10.1, 10.5, 22.0, nccl8k),
      row(tpsBackendHost, "host-copy", 134217728, 10012.3, 9980.0, 10010.0, 10100.0, host256m),
      row(tpsBackendNccl, "nccl", 134217728, 9287.0, 9250.0, 9280.0, 9400.5, nccl256m)};
  // The meter's view of the first host row: PCIe carries ~14 % overhead, NVLink is N/A on this GPU.
  rows[0].metered = MeteredBytes{9371.3, 9350.8, std::nullopt, std::nullopt};
  return rows;
}

std::string fullTable(const BenchContext& c, const std::vector<BenchRow>& rows) {
  std::string s = formatPreamble(c) + formatHeader();
  for (const BenchRow& r : rows) s += formatRow(r);
  const std::vector<tpsBackend_t> b = c.options.backends;
  return s + formatFooter(rows, b) + formatRatios(timeRatios(rows, b, tpsBackendNccl), b, tpsBackendNccl);
}

TEST(BenchFormulas, BusBandwidthIsAlgbwTimesTwoNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(busBandwidthGBps(100.0, 2), 100.0);
  EXPECT_DOUBLE_EQ(busBandwidthGBps(100.0, 4), 150.0);
  EXPECT_DOUBLE_EQ(busBandwidthGBps(100.0, 8), 175.0);
  // 1 GiB in 32,850 us is nccl-tests' 32.69 GB/s: GB are 1e9 bytes.
  EXPECT_NEAR(algBandwidthGBps(1ull << 30, 32850.0), 32.686, 1e-3);
  EXPECT_EQ(algBandwidthGBps(8192, 0.0), 0.0);
}

TEST(BenchFormulas, TimeSummary) {
  TimeStats s = summarizeTimes({5, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.mean_us, 2.75);
  EXPECT_DOUBLE_EQ(s.min_us, 1);
  EXPECT_DOUBLE_EQ(s.median_us, 2.5);  // mean of the two middles
  EXPECT_DOUBLE_EQ(s.max_us, 5);
  EXPECT_DOUBLE_EQ(summarizeTimes({4, 9, 1}).median_us, 4);
  EXPECT_DOUBLE_EQ(summarizeTimes({}).mean_us, 0);
}

TEST(BenchRatios, EachBackendOverTheReferenceAndTheFastest) {
  const std::vector<BenchRow> rows = h200Rows();
  const std::vector<RatioRow> r = timeRatios(rows, {tpsBackendHost, tpsBackendNccl}, tpsBackendNccl);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].bytes, 8192u);
  EXPECT_NEAR(*r[0].ratio[0], 9.5 / 10.58, 1e-12);
  EXPECT_DOUBLE_EQ(*r[0].ratio[1], 1.0);
  EXPECT_EQ(r[0].fastest, tpsBackendHost);
  EXPECT_NEAR(*r[1].ratio[0], 10012.3 / 9287.0, 1e-12);
  EXPECT_EQ(r[1].fastest, tpsBackendNccl);
}

TEST(BenchRatios, MissingReferenceGivesNoRatio) {
  std::vector<BenchRow> rows = h200Rows();
  rows.pop_back();  // no nccl row at 256 MiB
  const std::vector<RatioRow> r = timeRatios(rows, {tpsBackendHost, tpsBackendNccl}, tpsBackendNccl);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[1].ratio[0].has_value());
  EXPECT_FALSE(r[1].ratio[1].has_value());
  EXPECT_EQ(r[1].fastest, tpsBackendHost);
}

TEST(BenchTable, GoldenH200) {
  testing::expectGolden("bench_allreduce_h200.txt", fullTable(h200Context(), h200Rows()));
}

TEST(BenchTable, GraphPreambleSaysWhatIsTimed) {
  BenchContext c = h200Context();
  c.options.graph = true;
  c.options.graph_replays = 7;
  c.env.clear();
  const std::string p = formatPreamble(c);
  EXPECT_NE(p.find("graph: 1"), std::string::npos) << p;
  EXPECT_NE(p.find("a graph of 20 calls on all GPUs; 7 timed launches"), std::string::npos) << p;
  EXPECT_NE(p.find("time = launch time / 20"), std::string::npos) << p;
  EXPECT_NE(p.find("# env: (no NCCL_ or TPSCOPE_"), std::string::npos) << p;
  EXPECT_EQ(benchDocument(c, {})["context"]["graph_replays"], 7);
}

// The JSON context carries the communicator's resolved configuration (null where none was made).
TEST(BenchTable, JsonCarriesTheCommunicatorSettings) {
  BenchContext c = h200Context();
  EXPECT_TRUE(benchDocument(c, {})["context"]["communicator"].is_null());
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendP2p;
  cfg.host_copy_threshold = 4u << 20, cfg.host_chunk_bytes = 1u << 20, cfg.host_blocks = 16;
  cfg.spin_timeout_ms = 10000;
  c.communicator = cfg;
  const nlohmann::json j = benchDocument(c, {})["context"]["communicator"];
  EXPECT_EQ(j["backend"], "p2p");
  EXPECT_EQ(j["host_copy_threshold"], 4u << 20);
  EXPECT_EQ(j["host_chunk_bytes"], 1u << 20);
  EXPECT_EQ(j["host_blocks"], 16);
  EXPECT_EQ(j["spin_timeout_ms"], 10000);
  EXPECT_EQ(j["shared_devices"], false);
  EXPECT_EQ(j["p2p_ll_max_bytes"], 262144);
  EXPECT_EQ(j["fused_max_rows"], 64);
  EXPECT_EQ(j["wire"], "exact");
}

TEST(BenchTable, HeaderHasTheNcclTestsColumnsInOrder) {
  const std::string h = formatHeader();
  EXPECT_EQ(h.front(), '#');
  const std::regex nccl(
      R"(#\s+size\(B\)\s+count\(elements\)\s+type\s+redop \|\s+time\(us\)\s+algbw\(GB/s\)\s+)"
      R"(busbw\(GB/s\)\s+#wrong \|\s+backend\s+wire\s+ranks\s+path\s+min\(us\)\s+median\(us\)\s+max\(us\)\s+)"
      R"(rel_rms\s+rel_max\s+host_tx\(B\)\s+host_rx\(B\)\s+peer_tx\(B\)\s+peer_rx\(B\)\s+nccl_tx\(B\)\s+nccl_rx\(B\) \|\s+)"
      R"(pcie_tx\(B\)\s+pcie_rx\(B\)\s+nvl_tx\(B\)\s+nvl_rx\(B\)\n)");
  EXPECT_TRUE(std::regex_match(h, nccl)) << h;
}

TEST(BenchTable, EveryNonDataLineStartsWithHash) {
  // Data rows are the only lines awk should see: 27 fields, the first two numbers.
  std::istringstream in(fullTable(h200Context(), h200Rows()));
  int data = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    ++data;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    ASSERT_EQ(f.size(), 27u) << line;
    EXPECT_NE(f[0].find_first_of("0123456789"), std::string::npos) << line;
  }
  EXPECT_EQ(data, 4);
}

TEST(BenchTable, UncheckedAndUncountedPrintNA) {
  BenchRow r = h200Rows()[0];
  r.check.reset();
  r.bytes_per_call.reset();
  r.metered.reset();
  const std::string line = formatRow(r);
  size_t n = 0;
  for (size_t p = line.find("N/A"); p != std::string::npos; p = line.find("N/A", p + 1)) ++n;
  EXPECT_EQ(n, 13u) << line;  // #wrong, two error columns, six library byte columns, four metered ones
  EXPECT_NE(formatFooter({r}, {tpsBackendHost}).find("N/A"), std::string::npos);
}

TEST(BenchTable, FooterFailsOnWrongElements) {
  std::vector<BenchRow> rows = h200Rows();
  rows[1].check->wrong = 3;
  const std::string f = formatFooter(rows, {tpsBackendHost, tpsBackendNccl});
  EXPECT_NE(f.find("# Out of bounds values : 3 FAILED"), std::string::npos) << f;
}

// `--procs 2` on one H200: both ranks share GPU 0; p2p rows with every rank in one process, then with a
// process per rank (made-up times).
TEST(BenchTable, GoldenProcsOnOneGpu) {
  BenchContext c = h200Context();
  c.argv = {"tpscope", "bench", "allreduce", "--procs", "2", "--backend", "p2p", "-b", "8K", "-e", "8K"};
  c.devices = {{0, 0, "0000:18:00.0", "NVIDIA H200"}, {1, 0, "0000:18:00.0", "NVIDIA H200"}};
  c.env.clear();
  c.options.devices = {0, 0};
  c.options.backends = {tpsBackendP2p};
  c.options.meter = false;
  c.options.procs = 2;
  c.procs_devices = {0, 0};
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendAuto;
  cfg.shared_devices = 1;
  c.communicator = cfg;
  BenchRow t;
  t.backend = tpsBackendP2p;
  t.path = "p2p-ll";
  t.count = 4096;
  t.calls = 20;
  t.time = {6.2, 5.9, 6.1, 9.8};
  t.check = CheckCounts{};
  t.bytes_per_call = MediumBytes{0, 0, 8192, 8192, 0, 0};
  setBandwidths(&t, 2);
  BenchRow p = t;
  p.procs = true;
  p.time = {2410.0, 35.1, 2402.5, 4800.0};
  setBandwidths(&p, 2);
  const std::vector<BenchRow> rows = {t, p};
  std::string s = formatPreamble(c) + formatHeader() + formatRow(t) + formatRow(p);
  s += formatFooter(rows, c.options.backends) + formatProcsRatios(rows);
  testing::expectGolden("bench_allreduce_procs.txt", s);
  const nlohmann::json j = benchDocument(c, rows);
  EXPECT_EQ(j["context"]["procs"], 2);
  EXPECT_EQ(j["context"]["procs_devices"], nlohmann::json({0, 0}));
  EXPECT_EQ(j["results"][1]["ranks"], "procs");
  EXPECT_TRUE(benchDocument(h200Context(), h200Rows())["context"]["procs"].is_null());
}

// `--wire exact,int8,fp8 --backend host` on two positions of one GPU: the exact wire and two compressed
// ones at 16 MiB on the copy engines, one size on the kernel path where int8 is carried and bf16 (for a
// bfloat16 call) is not, so its row ran exact and says so by its path (made-up times, the wires' bytes).
std::vector<BenchRow> wireRows() {
  auto row = [](const char* wire, const char* path, size_t count, double mean, double host, double rms, double max) {
    BenchRow r;
    r.backend = tpsBackendHost;
    r.wire = wire;
    r.path = path;
    r.dtype = tpsBfloat16;
    r.count = count;
    r.calls = 20;
    r.time = {mean, mean * 0.97, mean, mean * 1.1};
    r.check = CheckCounts{};
    r.check->rel_rms = rms, r.check->rel_max = max;
    r.bytes_per_call = MediumBytes{host, host, 0, 0, 0, 0};
    setBandwidths(&r, 2);
    return r;
  };
  return {row("exact", "host-kernel", 32768, 31.5, 65536, 1.22e-3, 4.5e-3),
          row("int8", "host-kernel+int8", 32768, 30.1, 34816, 3.61e-3, 1.41e-2),
          row("bf16", "host-kernel", 32768, 31.6, 65536, 1.22e-3, 4.5e-3),
          row("exact", "host-copy", 8388608, 1500.0, 16777216, 1.22e-3, 4.5e-3),
          row("int8", "host-copy+int8", 8388608, 820.0, 8912896, 3.6e-3, 1.4e-2),
          row("fp8", "host-copy+fp8", 8388608, 815.0, 8912896, 1.73e-2, 6.2e-2)};
}

TEST(BenchTable, GoldenWiresSideBySide) {
  BenchContext c = h200Context();
  c.argv = {"tpscope", "bench", "allreduce", "--wire", "exact,int8,bf16,fp8", "--backend", "host", "--devices", "0,0"};
  c.devices = {{0, 0, "0000:18:00.0", "NVIDIA H200"}, {1, 0, "0000:18:00.0", "NVIDIA H200"}};
  c.env.clear();
  c.options.devices = {0, 0};
  c.options.backends = {tpsBackendHost};
  c.options.wires = {tpsWireExact, tpsWireInt8, tpsWireBf16, tpsWireFp8};
  c.options.wires_given = true;
  c.options.meter = false;
  const std::vector<BenchRow> rows = wireRows();
  std::string s = formatPreamble(c) + formatHeader();
  for (const BenchRow& r : rows) s += formatRow(r);
  s += formatFooter(rows, c.options.backends) + formatWireRatios(rows);
  testing::expectGolden("bench_allreduce_wires.txt", s);

  const nlohmann::json j = benchDocument(c, rows);
  EXPECT_EQ(j["context"]["wires"], nlohmann::json({"exact", "int8", "bf16", "fp8"}));
  EXPECT_EQ(j["results"][4]["wire"], "int8");
  EXPECT_EQ(j["results"][4]["path"], "host-copy+int8");
  EXPECT_DOUBLE_EQ(j["results"][4]["rel_rms_error"].get<double>(), 3.6e-3);
  EXPECT_DOUBLE_EQ(j["results"][4]["rel_max_abs_error"].get<double>(), 1.4e-2);
  // algbw on the payload (the dtype's bytes), whatever the wire moved.
  EXPECT_DOUBLE_EQ(j["results"][4]["algbw_gbps"].get<double>(), 16777216 / 1e3 / 820.0);
}

TEST(BenchTable, WireRatiosSetEachWireAgainstTheExactOne) {
  const std::string s = formatWireRatios(wireRows());
  // int8 at 16 MiB: 820 / 1500 of the time, 1500 / 820 of the algbw, 8912896 / 16777216 of the bytes.
  EXPECT_NE(s.find("#    16777216 bfloat16    host   int8   host-copy+int8     0.547     1.829     0.531  3.60e-03\n"),
            std::string::npos)
      << s;
  // Rows without an exact row of the same size, backend and type, and exact rows, have no line.
  std::vector<BenchRow> rows = wireRows();
  rows.erase(rows.begin() + 3);  // no exact row at 16 MiB
  const std::string t = formatWireRatios(rows);
  EXPECT_EQ(t.find("16777216"), std::string::npos) << t;
  EXPECT_NE(t.find("       65536 bfloat16"), std::string::npos) << t;
  EXPECT_EQ(formatWireRatios(h200Rows()), "");
  // The backend ratios compare one wire's rows.
  EXPECT_EQ(timeRatios(wireRows(), {tpsBackendHost}, tpsBackendHost, "int8").size(), 2u);
}

TEST(BenchTable, TheDefaultWireIsTheCommunicatorsAndTheEnvIsShown) {
  BenchContext c = h200Context();
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.wire = tpsWireAuto;
  cfg.wire_error_budget = 0.01f;
  c.communicator = cfg;
  c.env = {{"TPSCOPE_WIRE", "auto:0.01"}};
  const std::string p = formatPreamble(c);
  EXPECT_NE(p.find("wires: auto:0.01"), std::string::npos) << p;
  EXPECT_NE(p.find("# env: TPSCOPE_WIRE=auto:0.01"), std::string::npos) << p;
  const nlohmann::json j = benchDocument(c, {});
  EXPECT_EQ(j["context"]["wires"], nlohmann::json({"auto:0.01"}));
  EXPECT_EQ(j["context"]["communicator"]["wire"], "auto:0.01");
  EXPECT_EQ(std::count(benchEnvNames().begin(), benchEnvNames().end(), "TPSCOPE_WIRE"), 1);
}

TEST(BenchJson, GoldenH200) {
  testing::expectGolden("bench_allreduce_h200.json", benchDocument(h200Context(), h200Rows()).dump(2) + "\n");
}

TEST(BenchJson, NumbersAreNumbersAndUnknownsNull) {
  std::vector<BenchRow> rows = h200Rows();
  rows[0].check.reset();
  rows[0].bytes_per_call.reset();
  const nlohmann::json doc = benchDocument(h200Context(), rows);
  const nlohmann::json& r0 = doc["results"][0];
  for (const char* k : {"size_bytes", "count", "time_us", "min_us", "median_us", "max_us", "algbw_gbps", "busbw_gbps"})
    EXPECT_TRUE(r0[k].is_number()) << k;
  EXPECT_TRUE(r0["n_wrong"].is_null());
  EXPECT_TRUE(r0["bytes_per_call"].is_null());
  EXPECT_DOUBLE_EQ(r0["metered_bytes_per_call"]["pcie_tx"].get<double>(), 9371.3);
  EXPECT_TRUE(r0["metered_bytes_per_call"]["nvlink_tx"].is_null());
  EXPECT_TRUE(doc["results"][1]["metered_bytes_per_call"].is_null());
  EXPECT_TRUE(doc["results"][1]["bytes_per_call"]["nccl_rx"].is_number());
  EXPECT_EQ(doc["context"]["timer"], "cuda events");
  EXPECT_EQ(doc["context"]["devices"].size(), 2u);
}

TEST(BenchJson, StoppedEarlyKeepsRowsAndSaysWhy) {
  std::vector<BenchRow> rows = h200Rows();
  rows.resize(3);
  const nlohmann::json doc = benchDocument(h200Context(), rows, "backend nccl failed: timeout");
  EXPECT_EQ(doc["results"].size(), 3u);
  EXPECT_EQ(doc["error"], "backend nccl failed: timeout");
  EXPECT_TRUE(benchDocument(h200Context(), rows)["error"].is_null());
}

}  // namespace
}  // namespace tpscope::cli
