// SPDX-License-Identifier: Apache-2.0
// bench/procs.h - `tpscope bench allreduce --procs N`: the same sweep with every rank a process of its
// own (tpsCommInitRank), as engines that run a process per GPU use the library.
//
// The command the user ran (the parent) writes a plan: the communicator's id, each rank's GPU, the
// timing options and the (backend, dtype, count) items in the single-process sweep's order. It starts N
// copies of its own binary as hidden workers (`tpscope bench allreduce-rank --plan FILE --rank R --out
// FILE`), which join with tpsCommInitRank and measure every item as the single-process sweep does:
// -w warm-ups, a barrier (one 4-byte call, synchronised), -n timed calls between CUDA events on the
// rank's stream (the mean from an unmarked run, min/median/max from a run with an event after each
// call), or --graph-replays launches of a captured graph of -n calls; the library's statistics around
// the timed run give the path and bytes columns; -c 1 checks the rank's result against the double
// reference and hashes it. Each writes one JSON line per item. The parent makes one row per item:
// time(us) is the mean over ranks of each rank's mean (as nccl-tests averages over ranks), min / median
// / max span every rank's calls, #wrong counts every rank's elements outside the tolerance plus, for a
// rank whose result's hash differs from rank 0's, all its elements.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/args.h"
#include "bench/table.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

// One measurement of the sweep.
struct ProcsItem {
  tpsBackend_t backend = tpsBackendAuto;
  tpsDataType_t dtype = tpsBfloat16;
  size_t count = 0;
};

// What every worker is told.
struct ProcsPlan {
  std::string id_hex;        // the tpsUniqueId, two hex digits per byte
  std::vector<int> devices;  // rank r's CUDA ordinal (as the parent sees them; the workers inherit its environment)
  bool shared_devices = false;
  int iters = 20, warmup_iters = 5, graph_replays = 10;
  bool graph = false, check = true;
  std::vector<ProcsItem> items;
};

nlohmann::json planJson(const ProcsPlan& plan);
// The plan a worker reads; std::runtime_error naming the field that is missing or wrong.
ProcsPlan parsePlan(const nlohmann::json& j);

// The GPU of each of `nprocs` ranks (2 to TPS_MAX_DEVICES, else UsageError naming --procs): rank r on
// gpus[r % gpus.size()], where gpus is `given` (--devices or -g; UsageError when it names more GPUs than
// ranks) or else the first min(nprocs, visible) GPUs. Fewer GPUs than ranks: ranks share them. A machine
// without a GPU is a runtime error (std::runtime_error), not a usage error.
std::vector<int> procsDevices(int nprocs, const std::vector<int>& given, int visible);

// Whether any GPU carries two ranks (the communicators then need tpsConfig_t.shared_devices).
bool ranksShareGpus(const std::vector<int>& devices);

// The sweep's items in the single-process order: type, then size, then backend.
std::vector<ProcsItem> sweepItems(const BenchOptions& o, const std::vector<uint64_t>& sizes);

// One rank's result for one item: a line of a worker's output.
struct RankResult {
  bool available = true;           // false: the backend cannot run across these processes (nothing measured)
  double mean_us = 0;              // the unmarked run's time per call (eager), or the launches' mean (graph)
  std::vector<double> samples_us;  // per call (eager) or per launch / -n (graph)
  std::string path = "-";
  std::optional<MediumBytes> bytes_per_call;  // this rank's GPU's bytes per call
  std::optional<uint64_t> out_of_tolerance;   // -c 1 only
  std::optional<uint64_t> hash;               // -c 1 only: FNV-1a of the result's bytes
};
nlohmann::json rankResultJson(const RankResult& r);
RankResult parseRankResult(const nlohmann::json& j);

// The row of one item from every rank's result (ranks.size() = N); nullopt when the backend was not
// available. `calls`: timed calls (eager) or -n x launches (graph).
std::optional<BenchRow> procsRow(const ProcsItem& item, const std::vector<RankResult>& ranks, bool graph, int calls);

// Runs the plan with `exe` as the workers' binary: writes the plan, starts the ranks, waits for all
// (killing them after `limit_s`), and returns one result list per item (ranks in order). Throws
// std::runtime_error when a rank fails (its reason is on stderr).
std::vector<std::vector<RankResult>> runProcsPlan(const ProcsPlan& plan, const std::string& exe, double limit_s);

// The hidden worker's body (`tpscope bench allreduce-rank`); an exit status.
int runProcsRank(const std::string& plan_path, int rank, const std::string& out_path);

}  // namespace tpscope::cli
