// SPDX-License-Identifier: Apache-2.0
// auto_table_test - the tune file's "auto" table: box fingerprints, parsing (malformed content never
// fails), the fingerprint check, and the ranges made from measured timings.
#include "allreduce/auto_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "fixtures.h"

namespace tpscope::detail {
namespace {

using nlohmann::json;

const json kTable = json::parse(R"({
  "fingerprint": "2xNVIDIA H200 NV18", "measured": "2026-11-29T10:00:00Z",
  "ranges": [{"max_bytes": 1048576, "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})");

std::function<std::string()> box(const std::string& fp) {
  return [fp] { return fp; };
}

TEST(AutoTable, FingerprintNamesTheGpusAndTheirLinks) {
  EXPECT_EQ(boxFingerprint(testing::h200Pair()), "2xNVIDIA H200 NV18");
  EXPECT_EQ(boxFingerprint(testing::pcieNoP2pPair()), "2xNVIDIA GeForce RTX 2080 Ti PHB no-P2P");
  Topology t = testing::pcieNoP2pPair();
  for (auto& row : t.pairs)
    for (PairInfo& p : row) p.p2p_access = true;
  EXPECT_EQ(boxFingerprint(t), "2xNVIDIA GeForce RTX 2080 Ti PHB");  // P2P switched on is another box
  t.gpus[1].name = "NVIDIA GeForce RTX 3090";
  t.pairs[0][1].kind = t.pairs[1][0].kind = LinkKind::kSys;
  EXPECT_EQ(boxFingerprint(t), "1xNVIDIA GeForce RTX 2080 Ti+1xNVIDIA GeForce RTX 3090 SYS");
}

TEST(AutoTable, ParsesAndWritesTheSameTable) {
  AutoTable t;
  std::string error;
  ASSERT_TRUE(parseAutoTable(kTable, &t, &error)) << error;
  EXPECT_EQ(t.fingerprint, "2xNVIDIA H200 NV18");
  EXPECT_EQ(t.measured, "2026-11-29T10:00:00Z");
  ASSERT_EQ(t.ranges.size(), 2u);
  EXPECT_EQ(t.ranges[0].max_bytes, std::optional<size_t>(1u << 20));
  EXPECT_EQ(t.ranges[0].backend, tpsBackendP2p);
  EXPECT_FALSE(t.ranges[1].max_bytes);
  EXPECT_EQ(t.ranges[1].backend, tpsBackendNccl);
  EXPECT_EQ(autoTableJson(t), kTable);
  // The boundary belongs to the lower range; sizes above the last bound go to the unbounded row.
  EXPECT_EQ(t.backendFor(1u << 20), tpsBackendP2p);
  EXPECT_EQ(t.backendFor((1u << 20) + 2), tpsBackendNccl);
  EXPECT_EQ(t.backendFor(size_t{1} << 40), tpsBackendNccl);
}

TEST(AutoTable, MalformedTablesAreRefusedWithAReason) {
  const char* bad[] = {
      R"([])",
      R"({"ranges": [{"max_bytes": null, "backend": "p2p"}]})",
      R"({"fingerprint": 7, "ranges": [{"max_bytes": null, "backend": "p2p"}]})",
      R"({"fingerprint": "x", "ranges": []})",
      R"({"fingerprint": "x", "ranges": "p2p"})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": null, "backend": "auto"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": null, "backend": "internal"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": null}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": 1024, "backend": "p2p"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": null, "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": -1, "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": 1.5, "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": "1M", "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})",
      R"({"fingerprint": "x", "ranges": [{"max_bytes": 4096, "backend": "p2p"}, {"max_bytes": 4096, "backend": "host"},
                                         {"max_bytes": null, "backend": "nccl"}]})",
      R"({"fingerprint": "x", "ranges": [7]})",
  };
  for (const char* text : bad) {
    AutoTable t;
    std::string error;
    EXPECT_FALSE(parseAutoTable(json::parse(text), &t, &error)) << text;
    EXPECT_FALSE(error.empty()) << text;
    const AutoTableLoad load =
        selectAutoTable(json{{"host_blocks", 8}, {"auto", json::parse(text)}}, "f.json", box("x"));
    EXPECT_FALSE(load.table) << text;
    EXPECT_TRUE(load.warn) << text;
    EXPECT_NE(load.why.find("f.json"), std::string::npos) << load.why;
  }
}

TEST(AutoTable, UsedOnlyOnTheBoxItWasMeasuredOn) {
  const json doc = {{"host_blocks", 32}, {"auto", kTable}};
  AutoTableLoad load = selectAutoTable(doc, "/t/tune.json", box("2xNVIDIA H200 NV18"));
  ASSERT_TRUE(load.table);
  EXPECT_TRUE(load.why.empty());
  EXPECT_EQ(load.table->path, "/t/tune.json");

  load = selectAutoTable(doc, "/t/tune.json", box("4xNVIDIA H200 NV18"));  // another device set
  EXPECT_FALSE(load.table);
  EXPECT_FALSE(load.warn);  // an INFO, not a WARN: nothing is wrong with the file
  EXPECT_NE(load.why.find("\"2xNVIDIA H200 NV18\""), std::string::npos) << load.why;
  EXPECT_NE(load.why.find("\"4xNVIDIA H200 NV18\""), std::string::npos) << load.why;
}

TEST(AutoTable, NoTableAndNoFileAreNotWarnings) {
  bool asked = false;
  auto fp = [&] {
    asked = true;
    return std::string("x");
  };
  AutoTableLoad load = selectAutoTable(json{{"host_blocks", 32}}, "/t/tune.json", fp);
  EXPECT_FALSE(load.table);
  EXPECT_FALSE(load.warn);
  EXPECT_NE(load.why.find("no \"auto\" table"), std::string::npos) << load.why;
  EXPECT_FALSE(asked) << "the topology is queried only for a file with a table";

  load = selectAutoTable(json::parse("not json", nullptr, false), "/t/tune.json", fp);
  EXPECT_FALSE(load.table);
  EXPECT_TRUE(load.warn);

  load = loadAutoTable("/nonexistent/tpscope/tune.json", fp);
  EXPECT_FALSE(load.table);
  EXPECT_FALSE(load.warn);
  EXPECT_EQ(load.why, "no tune file at /nonexistent/tpscope/tune.json");
}

TEST(AutoTable, LoadsFromAFile) {
  const std::string path = "/tmp/tpscope_auto_table_test.json";
  std::ofstream(path) << json{{"auto", kTable}}.dump();
  AutoTableLoad load = loadAutoTable(path, box("2xNVIDIA H200 NV18"));
  ASSERT_TRUE(load.table);
  EXPECT_EQ(load.table->backendFor(8192), tpsBackendP2p);
  std::ofstream(path) << R"({"auto": {"fingerprint": )";  // truncated
  load = loadAutoTable(path, box("2xNVIDIA H200 NV18"));
  EXPECT_FALSE(load.table);
  EXPECT_TRUE(load.warn);
  std::remove(path.c_str());
}

TEST(AutoTable, RangesPutTheCrossoverAtTheMeasuredBoundary) {
  // p2p wins to 1 MiB, nccl from 4 MiB (sizes x4): the crossover sits at 1 MiB, the last size p2p won.
  std::vector<AutoTiming> t = {
      {8192, tpsBackendHost, 7.5},    {8192, tpsBackendP2p, 3.8},     {8192, tpsBackendNccl, 6.9},
      {1u << 20, tpsBackendP2p, 12},  {1u << 20, tpsBackendNccl, 14}, {4u << 20, tpsBackendP2p, 40},
      {4u << 20, tpsBackendNccl, 35}, {16u << 20, tpsBackendP2p, 90}, {16u << 20, tpsBackendNccl, 80},
  };
  std::vector<AutoRange> r = rangesFromTimings(t);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].max_bytes, std::optional<size_t>(1u << 20));
  EXPECT_EQ(r[0].backend, tpsBackendP2p);
  EXPECT_FALSE(r[1].max_bytes);
  EXPECT_EQ(r[1].backend, tpsBackendNccl);
  EXPECT_EQ(describeRanges(r), "p2p up to 1 MiB, nccl above");
}

TEST(AutoTable, RangesMergeEqualNeighboursAndSkipMissingTimes) {
  // Input order does not matter for sizes; unmeasured (<= 0) timings never win.
  std::vector<AutoTiming> t = {
      {65536, tpsBackendP2p, 4.2}, {8192, tpsBackendP2p, 3.8},      {8192, tpsBackendNccl, 0},
      {65536, tpsBackendNccl, -1}, {1u << 30, tpsBackendP2p, 3137}, {1u << 30, tpsBackendNccl, 3269},
  };
  std::vector<AutoRange> r = rangesFromTimings(t);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].max_bytes);
  EXPECT_EQ(r[0].backend, tpsBackendP2p);
  EXPECT_EQ(describeRanges(r), "p2p at every size");
  EXPECT_TRUE(rangesFromTimings({}).empty());
  EXPECT_TRUE(rangesFromTimings({{8192, tpsBackendHost, 0}}).empty());
}

TEST(AutoTable, ATieKeepsTheBackendListedFirstAndBackAndForthIsKept) {
  std::vector<AutoTiming> t = {
      {8192, tpsBackendHost, 5},  {8192, tpsBackendNccl, 5},  // tie: host, listed first
      {16384, tpsBackendHost, 6}, {16384, tpsBackendNccl, 5}, {32768, tpsBackendHost, 6}, {32768, tpsBackendNccl, 7},
  };
  std::vector<AutoRange> r = rangesFromTimings(t);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].backend, tpsBackendHost);
  EXPECT_EQ(r[0].max_bytes, std::optional<size_t>(8192));
  EXPECT_EQ(r[1].backend, tpsBackendNccl);
  EXPECT_EQ(r[1].max_bytes, std::optional<size_t>(16384));
  EXPECT_EQ(r[2].backend, tpsBackendHost);
  EXPECT_FALSE(r[2].max_bytes);
  EXPECT_EQ(describeRanges(r), "host up to 8 KiB, nccl up to 16 KiB, host above");
}

TEST(AutoTable, BytesLabels) {
  EXPECT_EQ(bytesLabel(8192), "8 KiB");
  EXPECT_EQ(bytesLabel(1u << 20), "1 MiB");
  EXPECT_EQ(bytesLabel(1u << 30), "1 GiB");
  EXPECT_EQ(bytesLabel(1536), "1536 B");
  EXPECT_EQ(bytesLabel(0), "0 B");
}

}  // namespace
}  // namespace tpscope::detail
