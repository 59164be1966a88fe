// SPDX-License-Identifier: Apache-2.0
// bench/wire_tune.cc - the wire sweep of `tpscope bench allreduce --tune` and the tune file's "wires" table.
#include "bench/wire_tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>

#include "allreduce/auto_table.h"
#include "allreduce/registry.h"
#include "bench/bench_runner.h"
#include "bench/procs.h"

namespace tpscope::cli {

using detail::WireCode;

std::vector<WireCode> tuneWires(const BenchOptions& o) {
  if (!o.wires_given) return detail::allWires();
  std::vector<WireCode> out{WireCode::kExact};
  for (tpsWire_t w : o.wires)
    if (w != tpsWireExact) out.push_back(static_cast<WireCode>(w));
  return out;
}

nlohmann::json tuneDocumentWithWires(const nlohmann::json& doc, const detail::WireTable& t) {
  if (t.rows.empty()) return doc;
  nlohmann::json out = doc.is_object() ? doc : nlohmann::json::object();
  out["wires"] = detail::wireTableJson(t);
  return out;
}

std::string formatWireTune(const std::vector<WireCode>& wires, const detail::WireTable& t,
                           const std::vector<double>& budgets) {
  std::map<uint64_t, std::map<WireCode, const detail::WireTiming*>> by_size;
  for (const detail::WireTiming& r : t.rows) by_size[r.bytes][r.wire] = &r;
  std::string s = fmt::format("#{:>12}", "size(B)");
  for (WireCode w : wires)
    s += fmt::format(" {:>10} {:>9}", fmt::format("{}(us)", detail::wireName(w)),
                     fmt::format("{}_rms", detail::wireName(w)));
  for (double b : budgets) s += fmt::format(" {:>11}", fmt::format("auto:{}", b));
  s += "\n";
  for (const auto& [bytes, row] : by_size) {
    s += fmt::format("#{:>12}", bytes);
    for (WireCode w : wires) {
      auto it = row.find(w);
      if (it == row.end())
        s += fmt::format(" {:>10} {:>9}", "N/A", "N/A");
      else
        s += fmt::format(" {:>10.2f} {:>9.2e}", it->second->time_us, it->second->rel_rms);
    }
    for (double b : budgets) s += fmt::format(" {:>11}", detail::wireName(t.choose(bytes, b)));
    s += "\n";
  }
  return s;
}

int runWireTune(const WireMeasure& measure, const std::vector<uint64_t>& sizes, const std::vector<WireCode>& wires,
                const std::string& fingerprint, const std::string& measured, const std::string& path, std::FILE* out) {
  detail::WireTable t;
  t.fingerprint = fingerprint;
  t.measured = measured;
  t.dtype = tpsDataTypeName(tpsBfloat16);
  try {
    for (uint64_t bytes : sizes)
      for (WireCode w : wires)
        if (std::optional<detail::WireTiming> m = measure(bytes, w)) t.rows.push_back(*m);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpscope: error: the wire sweep stopped (%s); %s has no new wires table\n", e.what(),
                 path.c_str());
    return 1;
  }
  std::fputs(formatWireTune(wires, t, {0.001, 0.01, 0.1}).c_str(), out);
  if (t.rows.empty()) {
    std::fprintf(stderr, "tpscope: error: no wire could be timed; %s has no wires table\n", path.c_str());
    return 1;
  }
  nlohmann::json doc = nlohmann::json::object();
  if (std::ifstream in(path); in) doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);  // a first tune on shared GPUs
  std::ofstream f(path);
  if (!(f << tuneDocumentWithWires(doc, t).dump(2) << "\n")) {
    std::fprintf(stderr, "tpscope: error: cannot write the tuning file %s\n", path.c_str());
    return 1;
  }
  std::fprintf(out, "# tune: wrote the wires table for \"%s\" to %s (TPSCOPE_WIRE=auto:BUDGET reads it)\n",
               fingerprint.c_str(), path.c_str());
  return 0;
}

int runWireTuneOnGpus(const std::vector<int>& devices, const std::string& fingerprint,
                      const std::vector<uint64_t>& sizes, const BenchOptions& base, const std::string& path,
                      const std::string& measured, std::FILE* out) {
  const bool shared = ranksShareGpus(devices);
  BenchOptions o = base;
  o.graph = !shared;  // ranks that share a GPU run eagerly: one graph need not run their calls at once
  o.check = true;     // the error column
  o.meter = false;
  o.dtypes = {tpsBfloat16};
  o.backends = {tpsBackendHost};
  o.wires.clear();
  const std::vector<WireCode> wires = tuneWires(base);
  for (WireCode w : wires) o.wires.push_back(static_cast<tpsWire_t>(w));
  o.wires_given = true;
  const std::vector<size_t> counts = sweepCounts(sizes, tpsBfloat16);
  std::unique_ptr<AllReduceBench> bench;
  try {
    tpsConfig_t cfg;
    tpsConfigInit(&cfg);
    cfg.backend = tpsBackendHost;
    cfg.shared_devices = shared ? 1 : 0;
    bench = std::make_unique<AllReduceBench>(devices, counts.back() * tpsDataTypeSize(tpsBfloat16), o, &cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tpscope: error: cannot measure the wires (%s); %s has no new wires table\n", e.what(),
                 path.c_str());
    return 1;
  }
  std::fprintf(
      out,
      "# tune: wires on \"%s\": host backend, bfloat16, %s, median time per call; error: relative RMS "
      "against the exact sum (-c 1 inputs)\n",
      fingerprint.c_str(),
      shared ? fmt::format("eager calls ({} per size; ranks share a GPU)", o.iters).c_str()
             : fmt::format("CUDA-graph replays ({} calls per graph, {} replays)", o.iters, o.graph_replays).c_str());
  std::fflush(out);
  const WireMeasure measure = [&](uint64_t bytes, WireCode w) -> std::optional<detail::WireTiming> {
    const size_t count = bytes / tpsDataTypeSize(tpsBfloat16);
    if (count == 0) return std::nullopt;
    const BenchRow row = bench->measure(tpsBackendHost, tpsBfloat16, count, static_cast<tpsWire_t>(w));
    const detail::AlgorithmInfo* a = detail::algorithmOf(detail::pathByName(row.path));
    if (a == nullptr || a->wire != w || !row.check || !row.check->rel_rms || row.time.median_us <= 0)
      return std::nullopt;  // not carried on this wire (or not measured): no row
    if (row.check->wrong)
      throw std::runtime_error(fmt::format("{} elements of the {} wire's {}-byte call were wrong", row.check->wrong,
                                           detail::wireName(w), row.bytes()));
    return detail::WireTiming{row.bytes(), w, row.time.median_us, w == WireCode::kExact ? 0.0 : *row.check->rel_rms};
  };
  return runWireTune(measure, sizes, wires, fingerprint, measured, path, out);
}

}  // namespace tpscope::cli
