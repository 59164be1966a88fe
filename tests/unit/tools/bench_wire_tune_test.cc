// SPDX-License-Identifier: Apache-2.0
// bench_wire_tune_test - `bench allreduce --tune`'s wire sweep with a made-up measurement: the tune file's
// "wires" table beside what the file held, read back as a communicator under TPSCOPE_WIRE=auto reads it,
// the wires measured, the printed table, and a sweep that stops leaving the file as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bench/wire_tune.h"

namespace tpscope::cli {
namespace {

using detail::WireCode;
using nlohmann::json;

// A PCIe pair's shape: below 1 MiB the codec costs more than the bytes it saves; from 16 MiB int8 and fp8
// take about half the exact wire's time and int4 less. The errors are the codec's on uniform inputs.
std::optional<detail::WireTiming> pcieBox(uint64_t bytes, WireCode w) {
  const double exact = bytes <= (1u << 20) ? 20.0 + bytes / 20e3 : bytes / 12e3;
  double t = exact, rms = 0;
  switch (w) {
    case WireCode::kExact: break;
    case WireCode::kBf16: return std::nullopt;  // a bfloat16 call does not travel as bf16
    case WireCode::kInt8: t = bytes <= (1u << 20) ? exact + 6 : exact * 0.55, rms = 3.6e-3; break;
    case WireCode::kFp8: t = bytes <= (1u << 20) ? exact + 6 : exact * 0.54, rms = 1.7e-2; break;
    case WireCode::kInt4: t = bytes <= (1u << 20) ? exact + 8 : exact * 0.32, rms = 6.5e-2; break;
  }
  return detail::WireTiming{bytes, w, t, rms};
}

std::string tempPath(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(::getpid()))).string();
}

json readJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

TEST(BenchWireTune, TheWiresMeasuredAreTheListedOnesWithExactFirst) {
  BenchOptions o;
  EXPECT_EQ(tuneWires(o), detail::allWires());  // --tune without --wire: every wire
  o.wires = {tpsWireFp8, tpsWireInt8};
  o.wires_given = true;
  EXPECT_EQ(tuneWires(o), (std::vector<WireCode>{WireCode::kExact, WireCode::kFp8, WireCode::kInt8}));
  o.wires = {tpsWireInt4, tpsWireExact};
  EXPECT_EQ(tuneWires(o), (std::vector<WireCode>{WireCode::kExact, WireCode::kInt4}));
}

TEST(BenchWireTune, WritesTheTableBesideTheOtherKeysAndAutoChoosesFromIt) {
  const std::string path = tempPath("tpscope-wire-tune-");
  {
    std::ofstream f(path);
    f << R"({"host_blocks": 16, "auto": {"fingerprint": "2xNVIDIA H100", "ranges": []}})";
  }
  const std::vector<uint64_t> sizes = {64u << 10, 1u << 20, 16u << 20, 256u << 20};
  int calls = 0;
  const WireMeasure measure = [&](uint64_t bytes, WireCode w) {
    ++calls;
    return pcieBox(bytes, w);
  };
  std::FILE* out = std::tmpfile();
  ASSERT_EQ(runWireTune(measure, sizes, detail::allWires(), "2xNVIDIA H100", "2026-12-06T10:00:00Z", path, out), 0);
  std::fclose(out);
  EXPECT_EQ(calls, 4 * 5);  // every size, every wire, sizes outermost

  const json doc = readJson(path);
  EXPECT_EQ(doc["host_blocks"], 16);  // what the file held stays
  EXPECT_EQ(doc["auto"]["fingerprint"], "2xNVIDIA H100");
  ASSERT_TRUE(doc.contains("wires"));
  EXPECT_EQ(doc["wires"]["fingerprint"], "2xNVIDIA H100");
  EXPECT_EQ(doc["wires"]["measured"], "2026-12-06T10:00:00Z");
  EXPECT_EQ(doc["wires"]["dtype"], "bfloat16");
  EXPECT_EQ(doc["wires"]["rows"].size(), 4u * 4u);  // bf16 was not carried: no rows

  // A communicator on this box reads it back (its path set) and chooses by size and budget.
  const detail::WireTableLoad load = detail::selectWireTable(doc, path, [] { return "2xNVIDIA H100"; });
  ASSERT_TRUE(load.table) << load.why;
  EXPECT_EQ(load.table->path, path);
  EXPECT_EQ(load.table->choose(64u << 10, 0.01), WireCode::kExact);  // small calls: the codec does not pay
  EXPECT_EQ(load.table->choose(16u << 20, 0.01), WireCode::kInt8);   // fp8 is faster but over the budget
  EXPECT_EQ(load.table->choose(16u << 20, 0.02), WireCode::kFp8);
  EXPECT_EQ(load.table->choose(256u << 20, 0.1), WireCode::kInt4);
  EXPECT_EQ(load.table->choose(256u << 20, 0.001), WireCode::kExact);
  // Another box does not use it.
  const detail::WireTableLoad other = detail::selectWireTable(doc, path, [] { return "2xNVIDIA H100 PIX"; });
  EXPECT_FALSE(other.table);
  EXPECT_NE(other.why.find("\"2xNVIDIA H100\""), std::string::npos) << other.why;
  std::filesystem::remove(path);
}

TEST(BenchWireTune, PrintsEveryTimeErrorAndTheChoicePerBudget) {
  detail::WireTable t;
  for (uint64_t bytes : {1u << 20, 16u << 20})
    for (WireCode w : {WireCode::kExact, WireCode::kInt8})
      if (auto m = pcieBox(bytes, w)) t.rows.push_back(*m);
  const std::string s = formatWireTune({WireCode::kExact, WireCode::kInt8, WireCode::kFp8}, t, {0.001, 0.01});
  EXPECT_NE(s.find("exact(us)"), std::string::npos) << s;
  EXPECT_NE(s.find("int8_rms"), std::string::npos) << s;
  EXPECT_NE(s.find("auto:0.01"), std::string::npos) << s;
  // 16 MiB: int8 within 0.01 and faster; fp8 not measured.
  EXPECT_NE(
      s.find("#    16777216    1398.10  0.00e+00     768.96  3.60e-03        N/A       N/A       exact        int8"),
      std::string::npos)
      << s;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) EXPECT_EQ(line.front(), '#') << line;
}

TEST(BenchWireTune, NothingMeasuredOrAStoppedSweepWritesNoTable) {
  const std::string path = tempPath("tpscope-wire-tune-stop-");
  {
    std::ofstream f(path);
    f << R"({"host_blocks": 8})";
  }
  std::FILE* out = std::tmpfile();
  const WireMeasure none = [](uint64_t, WireCode) { return std::optional<detail::WireTiming>(); };
  EXPECT_EQ(runWireTune(none, {1u << 20}, detail::allWires(), "box", "t", path, out), 1);
  const WireMeasure fails = [](uint64_t bytes, WireCode w) -> std::optional<detail::WireTiming> {
    if (w == WireCode::kFp8) throw std::runtime_error("3 elements of the fp8 wire's call were wrong");
    return pcieBox(bytes, w);
  };
  EXPECT_EQ(runWireTune(fails, {1u << 20}, detail::allWires(), "box", "t", path, out), 1);
  std::fclose(out);
  EXPECT_EQ(readJson(path), json::parse(R"({"host_blocks": 8})"));
  // A document that is not an object starts afresh; an empty table leaves the document as it was.
  detail::WireTable t;
  EXPECT_EQ(tuneDocumentWithWires(json::parse(R"({"a": 1})"), t), json::parse(R"({"a": 1})"));
  t.fingerprint = "box";
  t.rows.push_back({8192, WireCode::kExact, 5, 0});
  const json fresh = tuneDocumentWithWires(json::parse("[1, 2]"), t);
  EXPECT_TRUE(fresh.is_object());
  EXPECT_EQ(fresh["wires"]["rows"].size(), 1u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tpscope::cli
