// SPDX-License-Identifier: Apache-2.0
// bench_stats_test - statistics snapshots to the path column and bytes per call per GPU by medium.
#include <gtest/gtest.h>

#include "bench/stats.h"

namespace tpscope::cli {
namespace {

tpsStats_t empty(int ndev) {
  tpsStats_t s{};
  s.ndev = ndev;
  return s;
}

void add(tpsStats_t* s, tpsPath_t p, size_t bytes, unsigned long long calls, unsigned long long tx,
         unsigned long long rx) {
  tpsStatsCell_t& c = s->cells[p][tpsSizeClassOf(bytes)];
  c.calls += calls;
  c.payload_bytes += calls * bytes;
  for (int r = 0; r < s->ndev; ++r) {
    c.tx_bytes[r] += calls * tx;
    c.rx_bytes[r] += calls * rx;
  }
}

TEST(BenchStats, OnePathGivesItsNameAndPerCallBytes) {
  tpsStats_t before = empty(2);
  add(&before, tpsPathNccl, 1 << 20, 7, 1 << 20, 1 << 20);  // earlier calls: not in the delta
  tpsStats_t after = before;
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
  tpsStats_t before = empty(4), after = empty(4);
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

TEST(BenchStats, PathsMapToTheirMedium) {
  EXPECT_EQ(pathMedium(tpsPathHostKernel), Medium::kHost);
  EXPECT_EQ(pathMedium(tpsPathHostCopyEngine), Medium::kHost);
  EXPECT_EQ(pathMedium(tpsPathP2pOneShot), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathP2pTwoShot), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathP2pLL), Medium::kPeer);
  EXPECT_EQ(pathMedium(tpsPathNccl), Medium::kNccl);
}

}  // namespace
}  // namespace tpscope::cli
