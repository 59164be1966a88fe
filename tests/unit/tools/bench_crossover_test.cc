// SPDX-License-Identifier: Apache-2.0
// bench_crossover_test - `bench allreduce --tune`'s pure half: measured timings -> the tune file's
// "auto" table beside the host keys, read back as a communicator reads it; and the printed table.
#include <gtest/gtest.h>

#include "bench/crossover.h"

namespace tpscope::cli {
namespace {

using detail::AutoTiming;
using nlohmann::json;

// Graph-sweep timings of the shape 2xH200 gives (us per call), with a made-up NCCL win at 1 GiB so
// that there is a crossover to place.
std::vector<AutoTiming> h200Timings() {
  return {
      {8192, tpsBackendHost, 7.49},       {8192, tpsBackendP2p, 3.84},      {8192, tpsBackendNccl, 6.92},
      {1u << 20, tpsBackendHost, 47.4},   {1u << 20, tpsBackendP2p, 12.1},  {1u << 20, tpsBackendNccl, 14.0},
      {256u << 20, tpsBackendHost, 7606}, {256u << 20, tpsBackendP2p, 779}, {256u << 20, tpsBackendNccl, 891},
      {1u << 30, tpsBackendHost, 30297},  {1u << 30, tpsBackendP2p, 3137},  {1u << 30, tpsBackendNccl, 3100},
  };
}

TEST(BenchCrossover, WritesTheRangesBesideTheHostKeys) {
  const json host = {{"host_copy_threshold", 4194304}, {"host_chunk_bytes", 4194304}, {"host_blocks", 32}};
  const json doc = tuneDocumentWithCrossovers(host, "2xNVIDIA H200 NV18", "2026-11-29T10:00:00Z", h200Timings());
  EXPECT_EQ(doc["host_blocks"], 32);
  EXPECT_EQ(doc["host_copy_threshold"], 4194304);
  const json want = json::parse(R"({
    "fingerprint": "2xNVIDIA H200 NV18", "measured": "2026-11-29T10:00:00Z",
    "ranges": [{"max_bytes": 268435456, "backend": "p2p"}, {"max_bytes": null, "backend": "nccl"}]})");
  EXPECT_EQ(doc["auto"], want) << doc.dump(2);

  // A communicator on the same box reads back what was written.
  detail::AutoTableLoad load = detail::selectAutoTable(doc, "tune.json", [] { return "2xNVIDIA H200 NV18"; });
  ASSERT_TRUE(load.table) << load.why;
  EXPECT_EQ(load.table->backendFor(8192), tpsBackendP2p);
  EXPECT_EQ(load.table->backendFor(256u << 20), tpsBackendP2p);
  EXPECT_EQ(load.table->backendFor((256u << 20) + 2), tpsBackendNccl);
}

TEST(BenchCrossover, ReplacesAnOldTableAndStartsAnUnreadableFileAfresh) {
  json old = {{"host_blocks", 16}, {"auto", {{"fingerprint", "old"}, {"ranges", json::array()}}}};
  json doc = tuneDocumentWithCrossovers(old, "box", "t", {{8192, tpsBackendHost, 5}});
  EXPECT_EQ(doc["host_blocks"], 16);
  EXPECT_EQ(doc["auto"]["fingerprint"], "box");
  EXPECT_EQ(doc["auto"]["ranges"], json::parse(R"([{"max_bytes": null, "backend": "host"}])"));
  doc = tuneDocumentWithCrossovers(json::parse("{oops", nullptr, false), "box", "t", {{8192, tpsBackendHost, 5}});
  EXPECT_TRUE(doc.is_object());
  EXPECT_EQ(doc.size(), 1u);
  // Nothing measured: the document is left as it was (the communicator keeps its defaults).
  EXPECT_EQ(tuneDocumentWithCrossovers(old, "box", "t", {{8192, tpsBackendHost, -1}}), old);
}

TEST(BenchCrossover, PrintsEveryTimeTheFastestAndTheChoice) {
  const std::vector<tpsBackend_t> backends{tpsBackendHost, tpsBackendP2p, tpsBackendNccl};
  std::vector<AutoTiming> t = h200Timings();
  t.pop_back();  // NCCL at 1 GiB not measured
  const std::string s = formatCrossovers(backends, t, detail::rangesFromTimings(t));
  EXPECT_EQ(s,
            "#     size(B)   host(us)    p2p(us)   nccl(us)  fastest\n"
            "#        8192       7.49       3.84       6.92  p2p\n"
            "#     1048576      47.40      12.10      14.00  p2p\n"
            "#   268435456    7606.00     779.00     891.00  p2p\n"
            "#  1073741824   30297.00    3137.00        N/A  p2p\n"
            "# tune: auto: p2p at every size\n");
  EXPECT_NE(formatCrossovers(backends, {}, {}).find("nothing measured"), std::string::npos);
}

}  // namespace
}  // namespace tpscope::cli
