// SPDX-License-Identifier: Apache-2.0
// bench/procs.cc - the plan, the rank-to-GPU mapping and the rows of `tpscope bench allreduce --procs N`,
// and the parent's start of its workers. No GPU call here: the workers' measuring is bench/procs_rank.cc.
#include "bench/procs.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "cli.h"
#include "engine/process.h"

namespace tpscope::cli {

namespace {

tpsBackend_t backendNamed(const std::string& name) {
  for (int b = 0; b < tpsNumBackends; ++b)
    if (name == tpsBackendName(static_cast<tpsBackend_t>(b))) return static_cast<tpsBackend_t>(b);
  throw std::runtime_error("the plan names an unknown backend '" + name + "'");
}

tpsDataType_t dtypeNamed(const std::string& name) {
  for (int t = 0; t < tpsNumDataTypes; ++t)
    if (name == tpsDataTypeName(static_cast<tpsDataType_t>(t))) return static_cast<tpsDataType_t>(t);
  throw std::runtime_error("the plan names an unknown dtype '" + name + "'");
}

}  // namespace

nlohmann::json planJson(const ProcsPlan& p) {
  nlohmann::json items = nlohmann::json::array();
  for (const ProcsItem& i : p.items)
    items.push_back({{"backend", tpsBackendName(i.backend)}, {"dtype", tpsDataTypeName(i.dtype)}, {"count", i.count}});
  return {{"id", p.id_hex},
          {"devices", p.devices},
          {"shared_devices", p.shared_devices},
          {"iters", p.iters},
          {"warmup_iters", p.warmup_iters},
          {"graph", p.graph},
          {"graph_replays", p.graph_replays},
          {"check", p.check},
          {"items", items}};
}

ProcsPlan parsePlan(const nlohmann::json& j) {
  ProcsPlan p;
  try {
    p.id_hex = j.at("id").get<std::string>();
    p.devices = j.at("devices").get<std::vector<int>>();
    p.shared_devices = j.at("shared_devices").get<bool>();
    p.iters = j.at("iters").get<int>();
    p.warmup_iters = j.at("warmup_iters").get<int>();
    p.graph = j.at("graph").get<bool>();
    p.graph_replays = j.at("graph_replays").get<int>();
    p.check = j.at("check").get<bool>();
    for (const auto& i : j.at("items"))
      p.items.push_back({backendNamed(i.at("backend").get<std::string>()), dtypeNamed(i.at("dtype").get<std::string>()),
                         i.at("count").get<size_t>()});
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("the plan is not one tpscope wrote: ") + e.what());
  }
  const int n = static_cast<int>(p.devices.size());
  if (n < 2 || n > TPS_MAX_DEVICES || p.id_hex.size() != 2 * sizeof(tpsUniqueId) || p.iters < 1 || p.warmup_iters < 0 ||
      p.graph_replays < 1)
    throw std::runtime_error("the plan's ranks, id or iterations are out of range");
  return p;
}

std::vector<int> procsDevices(int nprocs, const std::vector<int>& given, int visible) {
  if (nprocs < 2 || nprocs > TPS_MAX_DEVICES)
    throw UsageError(fmt::format("--procs {}: an AllReduce spans 2 to {} ranks", nprocs, TPS_MAX_DEVICES));
  if (static_cast<int>(given.size()) > nprocs)
    throw UsageError(fmt::format("--procs {} with {} GPUs given: give at most one GPU per rank (-g or --devices)",
                                 nprocs, given.size()));
  std::vector<int> gpus = given;
  if (gpus.empty()) {
    if (visible < 1) throw std::runtime_error("--procs needs a GPU; this machine shows none");
    for (int g = 0; g < std::min(nprocs, visible); ++g) gpus.push_back(g);
  }
  std::vector<int> ranks;
  for (int r = 0; r < nprocs; ++r) ranks.push_back(gpus[r % gpus.size()]);
  return ranks;
}

bool ranksShareGpus(const std::vector<int>& devices) {
  for (size_t a = 0; a < devices.size(); ++a)
    for (size_t b = a + 1; b < devices.size(); ++b)
      if (devices[a] == devices[b]) return true;
  return false;
}

std::vector<ProcsItem> sweepItems(const BenchOptions& o, const std::vector<uint64_t>& sizes) {
  std::vector<ProcsItem> items;
  for (tpsDataType_t t : o.dtypes)
    for (size_t count : sweepCounts(sizes, t))
      for (tpsBackend_t b : o.backends) items.push_back({b, t, count});
  return items;
}

nlohmann::json rankResultJson(const RankResult& r) {
  using nlohmann::json;
  json j = {{"available", r.available}, {"mean_us", r.mean_us},      {"samples_us", r.samples_us},
            {"path", r.path},           {"bytes_per_call", nullptr}, {"out_of_tolerance", nullptr},
            {"hash", nullptr}};
  if (r.bytes_per_call) {
    const MediumBytes& b = *r.bytes_per_call;
    j["bytes_per_call"] = {b.host_tx, b.host_rx, b.peer_tx, b.peer_rx, b.nccl_tx, b.nccl_rx};
  }
  if (r.out_of_tolerance) j["out_of_tolerance"] = *r.out_of_tolerance;
  if (r.hash) j["hash"] = *r.hash;
  return j;
}

RankResult parseRankResult(const nlohmann::json& j) {
  RankResult r;
  try {
    r.available = j.at("available").get<bool>();
    r.mean_us = j.at("mean_us").get<double>();
    r.samples_us = j.at("samples_us").get<std::vector<double>>();
    r.path = j.at("path").get<std::string>();
    if (const auto& b = j.at("bytes_per_call"); !b.is_null()) {
      const auto v = b.get<std::vector<double>>();
      if (v.size() != 6)
        throw std::runtime_error("a rank's bytes_per_call has " + std::to_string(v.size()) + " fields");
      r.bytes_per_call = MediumBytes{v[0], v[1], v[2], v[3], v[4], v[5]};
    }
    if (const auto& x = j.at("out_of_tolerance"); !x.is_null()) r.out_of_tolerance = x.get<uint64_t>();
    if (const auto& x = j.at("hash"); !x.is_null()) r.hash = x.get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("a rank's result line is not one tpscope wrote: ") + e.what());
  }
  return r;
}

std::optional<BenchRow> procsRow(const ProcsItem& item, const std::vector<RankResult>& ranks, bool graph, int calls) {
  if (ranks.empty() || std::any_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return !r.available; }))
    return std::nullopt;
  BenchRow row;
  row.backend = item.backend;
  row.dtype = item.dtype;
  row.count = item.count;
  row.graph = graph;
  row.procs = true;
  row.calls = calls;
  std::vector<double> all;
  double mean = 0;
  for (const RankResult& r : ranks) {
    all.insert(all.end(), r.samples_us.begin(), r.samples_us.end());
    mean += r.mean_us / ranks.size();
  }
  row.time = summarizeTimes(all);
  row.time.mean_us = mean;
  row.path = ranks[0].path;
  if (std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.bytes_per_call.has_value(); })) {
    MediumBytes m;
    for (const RankResult& r : ranks)
      for (double MediumBytes::*f : {&MediumBytes::host_tx, &MediumBytes::host_rx, &MediumBytes::peer_tx,
                                     &MediumBytes::peer_rx, &MediumBytes::nccl_tx, &MediumBytes::nccl_rx})
        m.*f += (*r.bytes_per_call).*f / ranks.size();
    row.bytes_per_call = m;
  }
  if (std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.out_of_tolerance && r.hash; })) {
    CheckCounts c;
    for (const RankResult& r : ranks) {
      const bool differs = *r.hash != *ranks[0].hash;
      c.out_of_tolerance += *r.out_of_tolerance;
      c.not_identical += differs ? item.count : 0;
      c.wrong += differs ? item.count : *r.out_of_tolerance;
    }
    row.check = c;
  }
  setBandwidths(&row, static_cast<int>(ranks.size()));
  return row;
}

std::vector<std::vector<RankResult>> runProcsPlan(const ProcsPlan& plan, const std::string& exe, double limit_s) {
  char dir_tmpl[] = "/tmp/tpscope-bench-procs-XXXXXX";
  if (mkdtemp(dir_tmpl) == nullptr) throw std::runtime_error("cannot make a folder in /tmp for the ranks' files");
  const std::string dir = dir_tmpl, plan_path = dir + "/plan.json";
  {
    std::ofstream f(plan_path);
    f << planJson(plan).dump() << "\n";
    if (!f) throw std::runtime_error("cannot write " + plan_path);
  }
  const int n = static_cast<int>(plan.devices.size());
  // Each rank through the one launcher: on tpscope's stderr (a failing rank says why there), and killed
  // with tpscope. A rank left running when this function throws is stopped by its ChildProcess.
  std::vector<std::unique_ptr<engine::ChildProcess>> ranks(n);
  for (int r = 0; r < n; ++r) {
    engine::SpawnOptions sp;
    sp.argv = {exe,
               "bench",
               "allreduce-rank",
               "--plan",
               plan_path,
               "--rank",
               std::to_string(r),
               "--out",
               dir + "/rank" + std::to_string(r)};
    sp.inherit_stdio = true;
    std::string error;
    if (!engine::ChildProcess::spawn(sp, &ranks[r], &error))
      throw std::runtime_error("cannot start rank " + std::to_string(r) + ": " + error);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::any_of(ranks.begin(), ranks.end(), [](const auto& c) { return c->running(); })) {
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& c : ranks) c->stop(0);
      throw std::runtime_error(fmt::format("the ranks were still running after {:.0f} s and were stopped", limit_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < n; ++r)
    if (ranks[r]->exitCode() != 0)
      throw std::runtime_error(
          fmt::format("rank {} (a process of its own) {}; its reason is above", r, ranks[r]->exitDescription()));
  std::vector<std::vector<RankResult>> out(plan.items.size(), std::vector<RankResult>(n));
  for (int r = 0; r < n; ++r) {
    std::ifstream f(dir + "/rank" + std::to_string(r));
    size_t i = 0;
    for (std::string line; std::getline(f, line) && i < out.size(); ++i)
      out[i][r] = parseRankResult(nlohmann::json::parse(line));
    if (i != out.size())
      throw std::runtime_error(fmt::format("rank {} reported {} of {} measurements", r, i, out.size()));
    std::remove((dir + "/rank" + std::to_string(r)).c_str());
  }
  std::remove(plan_path.c_str());
  rmdir(dir.c_str());
  return out;
}

}  // namespace tpscope::cli
