// SPDX-License-Identifier: Apache-2.0
// bench_wire_test - `tpscope bench allreduce --wire` and `--tune` on two ranks sharing GPU 0: every wire's
// calls checked against what it promises (-c 1), its path and bytes, its error beside the exact wire's; the
// tune file's wires table written for the box the ranks make, a communicator under TPSCOPE_WIRE=auto
// taking the wire it names, and the meter's PCIe bytes per call and rank beside the library's count.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "../unit/tools/cli_runner.h"
#include "allreduce/wire.h"
#include "gpu_test_util.h"

namespace tpscope::testing {
namespace {

nlohmann::json runJson(const std::string& args, const std::string& env = "") {
  CliResult r = runTpscope("bench allreduce " + args + " --format json", env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(doc.is_discarded()) << r.out.substr(0, 2000) << r.err;
  return doc;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// -b 6 -f 4: odd counts from 3 elements (a block's tail) to 6 MiB, past the copy threshold (4 MiB built in),
// so both host paths carry every wire.
TEST(BenchWire, EveryWireSideBySideOnOneGpu) {
  TPS_REQUIRE_GPUS(1);
  const nlohmann::json doc = runJson(
      "--devices 0,0 --backend host --wire exact,int8,fp8,int4,bf16 -b 6 -e 8M -f 4 -n 2 -w 1 -c 1 -d all "
      "--no-meter");
  ASSERT_TRUE(doc.contains("results"));
  EXPECT_EQ(doc["context"]["wires"], nlohmann::json({"exact", "int8", "fp8", "int4", "bf16"}));
  std::map<std::string, int> rows;
  std::map<std::tuple<std::string, std::string, uint64_t>, nlohmann::json> by;  // (dtype, wire, size)
  std::map<std::pair<std::string, std::string>, double> lossy_max;              // (dtype, wire): largest rel_rms
  for (const nlohmann::json& r : doc["results"]) {
    const std::string wire = r["wire"], path = r["path"], dtype = r["dtype"];
    ++rows[wire];
    by[{dtype, wire, r["size_bytes"].get<uint64_t>()}] = r;
    EXPECT_EQ(r["n_wrong"], 0) << r.dump();
    ASSERT_TRUE(r["rel_rms_error"].is_number()) << r.dump();
    // A compressed wire's path names it, except bf16 on a 16-bit type (not carried: exact).
    const bool carried = wire != "exact" && !(wire == "bf16" && dtype != "float");
    EXPECT_EQ(endsWith(path, "+" + wire), carried) << r.dump();
    if (!carried) EXPECT_EQ(path.find('+'), std::string::npos) << r.dump();
    if (wire == "exact" && dtype == "float") EXPECT_EQ(r["rel_rms_error"], 0.0) << r.dump();
    if (carried) lossy_max[{dtype, wire}] = std::max(lossy_max[{dtype, wire}], r["rel_rms_error"].get<double>());
    EXPECT_LT(r["rel_rms_error"].get<double>(), 0.2) << r.dump();
  }
  EXPECT_EQ(rows.size(), 5u);
  // A scaled wire is lossy on the bench's data at some size of every dtype (a block of one value, or of
  // values its scale represents exactly, comes through exact); bf16 carries them exactly (the bench's
  // values and their sums are bfloat16 numbers), so its error is 0, as the exact wire's.
  for (const auto& [key, worst] : lossy_max) {
    const auto& [dtype, wire] = key;
    if (wire == "bf16")
      EXPECT_EQ(worst, 0.0) << dtype;
    else
      EXPECT_GT(worst, 1e-4) << dtype << " " << wire;
  }
  EXPECT_EQ(lossy_max.size(), 3u * 3u + 1u);  // int8, fp8, int4 on three dtypes; bf16 on float
  // From 96 KiB on, int8 and fp8 move about 1.0625 of 2 bytes a value, int4 0.5625.
  for (const auto& [key, r] : by) {
    const auto& [dtype, wire, bytes] = key;
    if (dtype != "bfloat16" || bytes < (96u << 10) || wire == "exact" || wire == "bf16") continue;
    const double moved = r["bytes_per_call"]["host_tx"].get<double>();
    const double exact = by.at({dtype, "exact", bytes})["bytes_per_call"]["host_tx"].get<double>();
    const double want = wire == "int4" ? 0.5625 / 2 : 1.0625 / 2;
    EXPECT_NEAR(moved / exact, want, 0.01) << wire << " at " << bytes;
    // algbw is on the payload: bytes over time, whatever the wire moved.
    EXPECT_NEAR(r["algbw_gbps"].get<double>(), bytes / 1e3 / r["time_us"].get<double>(), 1e-9);
  }
}

// The meter reads GPU 0 once for both ranks and gives its bytes per call and rank: the exact wire's PCIe
// bytes are the library's count plus the link's protocol (docs/METHOD.md: 1.08-1.19 x on the copy path),
// and int8's are about its payload's share (1.0625 of 2 bytes a value) of the exact wire's. Ten timed calls, as
// the recorded run's (0.53-0.54 there); a run of three calls once came to 0.600.
TEST(BenchWire, MeteredPcieBytesFollowTheWire) {
  TPS_REQUIRE_GPUS(1);
  const nlohmann::json doc =
      runJson("--devices 0,0 --backend host --wire exact,int8 -d bfloat16 -b 64M -e 64M -n 10 -w 3 -c 0");
  ASSERT_EQ(doc["results"].size(), 2u) << doc.dump();
  std::map<std::string, nlohmann::json> by;
  for (const nlohmann::json& r : doc["results"]) by[r["wire"]] = r;
  ASSERT_TRUE(by.count("exact") && by.count("int8"));
  for (const auto& [wire, r] : by)
    for (const char* dir : {"pcie_tx", "pcie_rx"})
      ASSERT_TRUE(r["metered_bytes_per_call"][dir].is_number()) << wire << " " << dir << ": " << r.dump();
  const auto metered = [&](const char* wire, const char* dir) {
    return by[wire]["metered_bytes_per_call"][dir].get<double>();
  };
  const double library = by["exact"]["bytes_per_call"]["host_tx"].get<double>();
  EXPECT_GT(metered("exact", "pcie_tx") / library, 0.98) << by["exact"].dump();
  EXPECT_LT(metered("exact", "pcie_tx") / library, 1.30) << by["exact"].dump();
  for (const char* dir : {"pcie_tx", "pcie_rx"}) {
    const double share = metered("int8", dir) / metered("exact", dir);
    EXPECT_GT(share, 0.45) << dir;
    EXPECT_LT(share, 0.60) << dir;
  }
}

TEST(BenchWire, TuneOnOneGpuWritesTheWiresTableAndAutoUsesIt) {
  TPS_REQUIRE_GPUS(1);
  const std::string tune = ::testing::TempDir() + "bench_wire_tune_" + std::to_string(getpid()) + ".json";
  std::remove(tune.c_str());
  const std::string env = "TPSCOPE_TUNE_FILE=" + tune;
  CliResult r = runTpscope("bench allreduce --tune --devices 0,0 -b 64K -e 16M -f 16 -n 2 -w 1", env);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("measuring the wires only"), std::string::npos) << r.out;
  std::ifstream f(tune);
  std::stringstream text;
  text << f.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc.contains("wires")) << text.str();
  tpscope::detail::WireTable table;
  std::string error;
  ASSERT_TRUE(tpscope::detail::parseWireTable(doc["wires"], &table, &error)) << error;
  EXPECT_EQ(table.fingerprint.rfind("2x", 0), 0u) << table.fingerprint;  // the GPU once per rank
  std::set<std::string> wires;
  for (const tpscope::detail::WireTiming& t : table.rows) {
    wires.insert(tpscope::detail::wireName(t.wire));
    EXPECT_GT(t.time_us, 0) << t.bytes;
    if (t.wire == tpscope::detail::WireCode::kExact) EXPECT_EQ(t.rel_rms, 0);
    if (t.wire == tpscope::detail::WireCode::kInt8) EXPECT_LT(t.rel_rms, 0.02);
  }
  EXPECT_EQ(wires, (std::set<std::string>{"exact", "int8", "fp8", "int4"}));  // bf16: not for bfloat16 calls
  EXPECT_EQ(table.rows.size(), 3u * 4u);                                      // 64K, 1M, 16M

  // A communicator on the same ranks under TPSCOPE_WIRE=auto takes the wire the table names at 16 MiB.
  const tpscope::detail::WireCode want = table.choose(16u << 20, 0.5);
  const nlohmann::json run =
      runJson("--devices 0,0 --backend host -b 16M -e 16M -n 2 -w 1 -c 1", env + " TPSCOPE_WIRE=auto:0.5");
  ASSERT_EQ(run["results"].size(), 1u);
  const nlohmann::json& row = run["results"][0];
  EXPECT_EQ(row["wire"], "auto:0.5");
  EXPECT_EQ(row["n_wrong"], 0) << row.dump();
  const std::string path = row["path"];
  if (want == tpscope::detail::WireCode::kExact)
    EXPECT_EQ(path, "host-copy");
  else
    EXPECT_EQ(path, std::string("host-copy+") + tpscope::detail::wireName(want)) << row.dump();
  std::remove(tune.c_str());
}

}  // namespace
}  // namespace tpscope::testing
