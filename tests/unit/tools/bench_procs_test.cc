// SPDX-License-Identifier: Apache-2.0
// bench_procs_test - `tpscope bench allreduce --procs N` without a GPU: which GPU each rank takes, the plan
// the workers read, how the ranks' results become one row, and how procs rows sit beside threads rows.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "bench/procs.h"
#include "bench/table.h"
#include "cli.h"

namespace tpscope::cli {
namespace {

TEST(BenchProcs, RanksTakeTheGpusInTurnAndShareWhereThereAreFewer) {
  EXPECT_EQ(procsDevices(2, {}, 1), (std::vector<int>{0, 0}));  // one H200: both ranks on it
  EXPECT_EQ(procsDevices(2, {}, 4), (std::vector<int>{0, 1}));  // the first N GPUs
  EXPECT_EQ(procsDevices(4, {}, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(procsDevices(3, {2}, 8), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(procsDevices(2, {3, 1}, 8), (std::vector<int>{3, 1}));
  EXPECT_FALSE(ranksShareGpus({0, 1, 2}));
  EXPECT_TRUE(ranksShareGpus({0, 1, 0}));
}

TEST(BenchProcs, BadRankCountsAreUsageErrorsAndNoGpuIsNot) {
  EXPECT_THROW(procsDevices(1, {}, 8), UsageError);
  EXPECT_THROW(procsDevices(TPS_MAX_DEVICES + 1, {}, 16), UsageError);
  EXPECT_THROW(procsDevices(2, {0, 1, 2}, 8), UsageError);  // more GPUs given than ranks
  try {
    procsDevices(2, {}, 0);
    ADD_FAILURE() << "no GPU was accepted";
  } catch (const UsageError&) {
    ADD_FAILURE() << "no GPU is the machine's fault, not the command line's";
  } catch (const std::runtime_error&) {
  }
}

ProcsPlan samplePlan() {
  ProcsPlan p;
  p.id_hex = std::string(2 * sizeof(tpsUniqueId), 'a');
  p.devices = {0, 0};
  p.shared_devices = true;
  p.iters = 7, p.warmup_iters = 2, p.graph_replays = 3;
  p.graph = true, p.check = false;
  p.items = {{tpsBackendP2p, tpsBfloat16, 4096}, {tpsBackendHost, tpsFloat32, 5}};
  return p;
}

TEST(BenchProcs, ThePlanSurvivesItsTripToTheWorkers) {
  const ProcsPlan p = samplePlan();
  const ProcsPlan q = parsePlan(nlohmann::json::parse(planJson(p).dump()));
  EXPECT_EQ(q.id_hex, p.id_hex);
  EXPECT_EQ(q.devices, p.devices);
  EXPECT_TRUE(q.shared_devices);
  EXPECT_EQ(q.iters, 7);
  EXPECT_EQ(q.warmup_iters, 2);
  EXPECT_EQ(q.graph_replays, 3);
  EXPECT_TRUE(q.graph);
  EXPECT_FALSE(q.check);
  ASSERT_EQ(q.items.size(), 2u);
  EXPECT_EQ(q.items[1].backend, tpsBackendHost);
  EXPECT_EQ(q.items[1].dtype, tpsFloat32);
  EXPECT_EQ(q.items[1].count, 5u);
}

TEST(BenchProcs, APlanTpscopeDidNotWriteIsRefused) {
  nlohmann::json j = planJson(samplePlan());
  j.erase("items");
  EXPECT_THROW(parsePlan(j), std::runtime_error);
  j = planJson(samplePlan());
  j["items"][0]["backend"] = "shm";
  EXPECT_THROW(parsePlan(j), std::runtime_error);
  j = planJson(samplePlan());
  j["devices"] = {0};
  EXPECT_THROW(parsePlan(j), std::runtime_error);
  j = planJson(samplePlan());
  j["id"] = "abc";
  EXPECT_THROW(parsePlan(j), std::runtime_error);
}

TEST(BenchProcs, ItemsFollowTheSingleProcessOrder) {
  BenchOptions o;
  o.dtypes = {tpsFloat32, tpsBfloat16};
  o.backends = {tpsBackendP2p, tpsBackendHost};
  const auto items = sweepItems(o, {8, 16});
  ASSERT_EQ(items.size(), 8u);  // 2 types x 2 sizes x 2 backends
  EXPECT_EQ(items[0].dtype, tpsFloat32);
  EXPECT_EQ(items[0].count, 2u);
  EXPECT_EQ(items[0].backend, tpsBackendP2p);
  EXPECT_EQ(items[1].backend, tpsBackendHost);
  EXPECT_EQ(items[2].count, 4u);
  EXPECT_EQ(items[4].dtype, tpsBfloat16);
  EXPECT_EQ(items[4].count, 4u);
}

RankResult rankResult(double mean, std::vector<double> samples, uint64_t bad, uint64_t hash) {
  RankResult r;
  r.mean_us = mean;
  r.samples_us = std::move(samples);
  r.path = "p2p-ll";
  r.bytes_per_call = MediumBytes{0, 0, 8192, 8192, 0, 0};
  r.out_of_tolerance = bad;
  r.hash = hash;
  return r;
}

TEST(BenchProcs, OneRowFromEveryRanksResult) {
  const ProcsItem item{tpsBackendP2p, tpsBfloat16, 4096};
  std::vector<RankResult> ranks = {rankResult(10, {9, 11}, 0, 42), rankResult(20, {19, 23}, 1, 42)};
  ranks[1].bytes_per_call = MediumBytes{0, 0, 4096, 4096, 0, 0};
  // Through JSON, as the workers' lines travel.
  for (RankResult& r : ranks) r = parseRankResult(nlohmann::json::parse(rankResultJson(r).dump()));
  const std::optional<BenchRow> row = procsRow(item, ranks, false, 20);
  ASSERT_TRUE(row.has_value());
  EXPECT_TRUE(row->procs);
  EXPECT_EQ(row->calls, 20);
  EXPECT_DOUBLE_EQ(row->time.mean_us, 15);  // the mean over ranks of each rank's mean
  EXPECT_DOUBLE_EQ(row->time.min_us, 9);    // over every rank's calls
  EXPECT_DOUBLE_EQ(row->time.max_us, 23);
  EXPECT_DOUBLE_EQ(row->time.median_us, 15);
  EXPECT_EQ(row->path, "p2p-ll");
  ASSERT_TRUE(row->bytes_per_call.has_value());
  EXPECT_DOUBLE_EQ(row->bytes_per_call->peer_tx, 6144);  // mean over the ranks' GPUs
  ASSERT_TRUE(row->check.has_value());
  EXPECT_EQ(row->check->out_of_tolerance, 1u);
  EXPECT_EQ(row->check->not_identical, 0u);
  EXPECT_EQ(row->check->wrong, 1u);
  EXPECT_NEAR(row->algbw_gbps, 8192 / 15.0 / 1e3, 1e-12);
}

TEST(BenchProcs, ARankWhoseBitsDifferCountsAllItsElements) {
  const ProcsItem item{tpsBackendHost, tpsFloat32, 100};
  const auto row = procsRow(item, {rankResult(1, {1}, 0, 1), rankResult(1, {1}, 0, 2)}, false, 1);
  ASSERT_TRUE(row && row->check);
  EXPECT_EQ(row->check->not_identical, 100u);
  EXPECT_EQ(row->check->wrong, 100u);
}

TEST(BenchProcs, AnUnavailableBackendMakesNoRow) {
  RankResult none;
  none.available = false;
  EXPECT_FALSE(procsRow({tpsBackendNccl, tpsBfloat16, 8}, {none, none}, false, 1).has_value());
}

TEST(BenchProcs, ProcsRowsStandBesideThreadsRows) {
  BenchRow t;
  t.backend = tpsBackendP2p;
  t.count = 4096;
  t.time.mean_us = 10;
  BenchRow p = t;
  p.procs = true;
  p.time.mean_us = 25;
  EXPECT_NE(formatRow(t).find(" threads "), std::string::npos) << formatRow(t);
  EXPECT_NE(formatRow(p).find(" procs "), std::string::npos) << formatRow(p);
  EXPECT_EQ(rowJson(p)["ranks"], "procs");
  EXPECT_EQ(rowJson(t)["ranks"], "threads");
  const std::string ratios = formatProcsRatios({t, p});
  EXPECT_NE(ratios.find("2.500"), std::string::npos) << ratios;
  EXPECT_EQ(formatProcsRatios({t}), "");
  // The backend ratios compare within one process: the procs row leaves them alone.
  const auto r = timeRatios({t, p}, {tpsBackendP2p}, tpsBackendP2p);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_DOUBLE_EQ(*r[0].ratio[0], 1.0);
}

// A stand-in for `tpscope bench allreduce-rank`: a shell script that gets the same arguments
// (bench allreduce-rank --plan P --rank R --out O, so $6 is the rank and $8 the result file).
class RankScript {
 public:
  explicit RankScript(const std::string& body) {
    char tmpl[] = "/tmp/tpscope-procs-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    path_ = dir_ + "/rank.sh";
    std::ofstream(path_) << "#!/bin/sh\n" << body << "\n";
    chmod(path_.c_str(), 0755);
  }
  ~RankScript() {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

TEST(BenchProcs, EachRankRunsAsAProcessAndItsLinesComeBack) {
  RankResult r;
  r.samples_us = {12, 13};
  r.path = "p2p-one-shot";
  // One line per item; rank R reports a mean of 1R.5 us, so the results show which rank wrote which line.
  std::string line = rankResultJson(r).dump();
  const std::string mean = "\"mean_us\":0.0";
  ASSERT_NE(line.find(mean), std::string::npos) << line;
  line.replace(line.find(mean), mean.size(), "\"mean_us\":1'\"$6\"'.5");
  RankScript script("for item in 1 2; do echo '" + line + "'; done > \"$8\"");
  const auto results = runProcsPlan(samplePlan(), script.path(), 30);
  ASSERT_EQ(results.size(), 2u);  // per item
  for (const auto& item : results) {
    ASSERT_EQ(item.size(), 2u);  // per rank
    EXPECT_DOUBLE_EQ(item[0].mean_us, 10.5);
    EXPECT_DOUBLE_EQ(item[1].mean_us, 11.5);
    EXPECT_EQ(item[1].path, "p2p-one-shot");
  }
}

TEST(BenchProcs, AFailedRankIsNamedWithHowItEnded) {
  RankScript script("[ \"$6\" = 1 ] && exit 3; printf '' > \"$8\"");
  try {
    runProcsPlan(samplePlan(), script.path(), 30);
    ADD_FAILURE() << "a rank that failed went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exited with status 3"), std::string::npos) << e.what();
  }
}

TEST(BenchProcs, RanksStillRunningPastTheLimitAreStopped) {
  RankScript script("exec sleep 30");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(runProcsPlan(samplePlan(), script.path(), 0.3), std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(BenchProcs, AProgramThatCannotStartIsAnError) {
  EXPECT_THROW(runProcsPlan(samplePlan(), "/nonexistent/tpscope", 30), std::runtime_error);
}

}  // namespace
}  // namespace tpscope::cli
