// SPDX-License-Identifier: Apache-2.0
// bench_stats_test - statistics snapshots to the path column and bytes per call per GPU by medium.
#include <gtest/gtest.h>

#include "bench/stats.h"

namespace tpscope::cli {
namespace {

// A snapshot of every path with nothing counted: ndev ranks in the process.
struct Snapshot {
  int ndev;
  std::vector<PathStats> paths;
};
Snapshot empty(int ndev) {
  Snapshot s{ndev, std::vector<PathStats>(tpsGetPathCount())};
  for (size_t p = 0; p < s.paths.size(); ++p) s.paths[p].name = tpsGetPathName(static_cast<int>(p));
  return s;
}

void add(Snapshot* s, int p, size_t bytes, unsigned long long calls, unsigned long long tx, unsigned long long rx) {
  tpsStatsCell_t& c = s->paths[p].cells[tpsSizeClassOf(bytes)];
  c.calls += calls;
  c.payload_bytes += calls * bytes;
  for (int r = 0; r < s->ndev; ++r) {
    c.tx_bytes[r] += calls * tx;
    c.rx_bytes[r] += calls * rx;
  }
}

StatsDelta statsDelta(const Snapshot& before, const Snapshot& after) {
  return cli::statsDelta(before.paths, after.paths, after.ndev);
}

TEST(BenchStats, OnePathGivesItsNameAndPerCallBytes) {
  Snapshot before = empty(2);
  add(&before, tpsPathNccl, 1 << 20, 7, 1 << 20, 1 << 20);  // earlier calls: not in the delta
  Snapshot after = before;
  add(&after, tpsPathHostKernel, 8192, 20, 8192, 8192);
  const StatsDelta d = statsDelta(before, after);
  EXPECT_EQ(d.calls, 20u);
  EXPECT_EQ(d.paths, "host-kernel");
  ASSERT_TRUE(d.bytes_per_call.has_value());
  EXPECT_DOUBLE_EQ(d.bytes_per_call->host_tx, 8192);
  EXPECT_DOUBLE_EQ(d.bytes_per_call->host_rx, 8192);
  EXPECT_DOUBLE_EQ(d.bytes_per_call->nccl_tx, 0);
}

TEST(BenchStats, MixedPathsJoinAndAverage) {
  Snapshot before = empty(4), after = empty(4);
  add(&after, tpsPathHostKernel, 64 << 10, 10, 100, 300);
  add(&after, tpsPathHostCopyEngine, 64 << 20, 10, 1000, 3000);
  add(&after, tpsPathP2pOneShot, 8192, 20, 50, 150);
  const StatsDelta d = statsDelta(before, after);
  EXPECT_EQ(d.calls, 40u);
  EXPECT_EQ(d.paths, "host-kernel+host-copy+p2p-oneshot");
  EXPECT_DOUBLE_EQ(d.bytes_per_call->host_tx, (10 * 100 + 10 * 1000) / 40.0);
  EXPECT_DOUBLE_EQ(d.bytes_per_call->peer_rx, 20 * 150 / 40.0);
}

TEST(BenchStats, NoCountedCallsGiveNoBytes) {
  const StatsDelta d = statsDelta(empty(2), empty(2));
  EXPECT_EQ(d.calls, 0u);
  EXPECT_EQ(d.paths, "-");
  EXPECT_FALSE(d.bytes_per_call.has_value());
}

// A path past tpsPath_t's (an algorithm added later) counts like any other, under its own name.
TEST(BenchStats, PathsBeyondTheEnumCount) {
  Snapshot before = empty(2), after = empty(2);
  PathStats extra;
  extra.name = "host-copy-new";
  before.paths.push_back(extra);
  after.paths.push_back(extra);
  add(&after, static_cast<int>(after.paths.size()) - 1, 64 << 20, 3, 100, 100);
  const StatsDelta d = statsDelta(before, after);
  EXPECT_EQ(d.calls, 3u);
  EXPECT_EQ(d.paths, "host-copy-new");
}

TEST(BenchStats, PathsMapToTheirMedium) {
  EXPECT_EQ(pathMedium(tpsPathHostKernel), Medium::kHost);
  EXPECT_EQ(pathMedium(tpsPathHostCopyEngine), Medium::kHost);
  EXPECT_EQ(pathMedium(tpsPathP2pOneShot), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathP2pTwoShot), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathP2pLL), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathNccl), Medium::kNccl);
}

// The wire of a step's calls is its paths' (the registry's), exact when the library counted none, and no
// single wire when the paths differ in it.
TEST(BenchStats, TheWireOfTheCountedPaths) {
  const int int8_copy = tpsGetPathByName("host-copy+int8"), int8_kernel = tpsGetPathByName("host-kernel+int8");
  const int fp8_copy = tpsGetPathByName("host-copy+fp8");
  ASSERT_GE(int8_copy, 0);
  ASSERT_GE(int8_kernel, 0);
  ASSERT_GE(fp8_copy, 0);
  Snapshot before = empty(2);
  EXPECT_EQ(statsWire(before.paths, before.paths), detail::WireCode::kExact);  // nothing counted (nccl-symm)
  Snapshot after = before;
  add(&after, int8_copy, 64 << 20, 1, 100, 100);
  EXPECT_EQ(statsWire(before.paths, after.paths), detail::WireCode::kInt8);
  add(&after, int8_kernel, 8192, 1, 10, 10);
  EXPECT_EQ(statsWire(before.paths, after.paths), detail::WireCode::kInt8);  // two paths, one wire
  add(&after, fp8_copy, 64 << 20, 1, 100, 100);
  EXPECT_FALSE(statsWire(before.paths, after.paths).has_value());
  Snapshot exact = before;
  add(&exact, tpsPathHostKernel, 8192, 1, 10, 10);
  EXPECT_EQ(statsWire(before.paths, exact.paths), detail::WireCode::kExact);
  // A two-shot's wire carries the sum too; beside a host path of the same wire, no single reference.
  const int int8_twoshot = tpsGetPathByName("p2p-twoshot+int8");
  ASSERT_GE(int8_twoshot, 0);
  Snapshot p2p = before;
  add(&p2p, int8_twoshot, 64 << 20, 1, 100, 100);
  bool sum_on_wire = false;
  EXPECT_EQ(statsWire(before.paths, p2p.paths, &sum_on_wire), detail::WireCode::kInt8);
  EXPECT_TRUE(sum_on_wire);
  EXPECT_EQ(statsWire(before.paths, exact.paths, &sum_on_wire), detail::WireCode::kExact);
  EXPECT_FALSE(sum_on_wire);
  add(&p2p, int8_copy, 64 << 20, 1, 100, 100);
  EXPECT_FALSE(statsWire(before.paths, p2p.paths, &sum_on_wire).has_value());
}

}  // namespace
}  // namespace tpscope::cli
