// SPDX-License-Identifier: Apache-2.0
// bench/crossover.cc - the crossover sweep of `tpscope bench allreduce --tune` and the tune file's "auto" table.
#include "bench/crossover.h"

#include <fmt/format.h>

#include <exception>
#include <fstream>
#include <map>

#include "allreduce/tuning.h"
#include "bench/bench_runner.h"

namespace tpscope::cli {

nlohmann::json tuneDocumentWithCrossovers(const nlohmann::json& doc, const std::string& fingerprint,
                                          const std::string& measured, const std::vector<detail::AutoTiming>& timings) {
  detail::AutoTable t;
  t.fingerprint = fingerprint;
  t.measured = measured;
  t.ranges = detail::rangesFromTimings(timings);
  if (t.ranges.empty()) return doc;
  return detail::withAutoTable(doc, t);
}

std::string formatCrossovers(const std::vector<tpsBackend_t>& backends, const std::vector<detail::AutoTiming>& timings,
                             const std::vector<detail::AutoRange>& ranges) {
  std::map<uint64_t, std::map<int, double>> times;  // size -> backend -> us
  for (const detail::AutoTiming& t : timings)
    if (t.time_us > 0) times[t.bytes][t.backend] = t.time_us;
  std::string s = fmt::format("#{:>12}", "size(B)");
  for (tpsBackend_t b : backends) s += fmt::format(" {:>10}", fmt::format("{}(us)", tpsBackendName(b)));
  s += fmt::format("  {}\n", "fastest");
  for (const auto& [bytes, by_backend] : times) {
    s += fmt::format("#{:>12}", bytes);
    for (tpsBackend_t b : backends) {
      auto it = by_backend.find(b);
      s += fmt::format(" {:>10}", it == by_backend.end() ? "N/A" : fmt::format("{:.2f}", it->second));
    }
    // The rule of rangesFromTimings(): the fastest, the first listed on a tie.
    const char* fastest = "N/A";
    double best = 0;
    for (tpsBackend_t b : backends)
      if (auto it = by_backend.find(b); it != by_backend.end() && (best == 0 || it->second < best))
        best = it->second, fastest = tpsBackendName(b);
    s += fmt::format("  {}\n", fastest);
  }
  s += fmt::format("# tune: auto: {}\n", ranges.empty() ? "nothing measured" : detail::describeRanges(ranges));
  return s;
}

int runCrossoverTune(const std::vector<int>& devices, const std::string& fingerprint,
                     const std::vector<uint64_t>& sizes, const BenchOptions& base, const std::string& path,
                     const std::string& measured, std::FILE* out) {
  BenchOptions o = base;
  o.graph = true;
  o.check = false;
  o.meter = false;
  o.dtypes = {tpsBfloat16};
  const std::vector<size_t> counts = sweepCounts(sizes, tpsBfloat16);
  std::vector<tpsBackend_t> backends;
  std::vector<detail::AutoTiming> timings;
  try {
    AllReduceBench bench(devices, counts.back() * tpsDataTypeSize(tpsBfloat16), o);
    for (tpsBackend_t b : {tpsBackendHost, tpsBackendP2p, tpsBackendNccl})
      if (bench.available(b)) backends.push_back(b);
    std::string names;
    for (tpsBackend_t b : backends) names += fmt::format("{}{}", names.empty() ? "" : ", ", tpsBackendName(b));
    std::fprintf(out,
                 "# tune: auto crossovers on \"%s\": %s; bfloat16, CUDA-graph replays (%d calls per graph, %d "
                 "replays), median time per call\n",
                 fingerprint.c_str(), names.c_str(), o.iters, o.graph_replays);
    std::fflush(out);
    for (size_t count : counts)
      for (tpsBackend_t b : backends) {
        const BenchRow row = bench.measure(b, tpsBfloat16, count);
        timings.push_back({row.bytes(), b, row.time.median_us});
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "tpscope: error: the crossover sweep stopped (%s); %s keeps the host keys, auto its defaults\n",
                 e.what(), path.c_str());
    return 1;
  }
  const std::vector<detail::AutoRange> ranges = detail::rangesFromTimings(timings);
  std::fputs(formatCrossovers(backends, timings, ranges).c_str(), out);
  if (ranges.empty()) {
    std::fprintf(stderr, "tpscope: error: no backend could be timed; %s has no auto table\n", path.c_str());
    return 1;
  }
  std::string why;  // a file that cannot be read keeps nothing of it: the new document has the table
  const nlohmann::json doc = detail::readTuneFile(path, &why).value_or(nlohmann::json::object());
  std::ofstream f(path);
  if (!(f << tuneDocumentWithCrossovers(doc, fingerprint, measured, timings).dump(2) << "\n")) {
    std::fprintf(stderr, "tpscope: error: cannot write the tuning file %s\n", path.c_str());
    return 1;
  }
  std::fprintf(out, "# tune: wrote the auto table to %s\n", path.c_str());
  return 0;
}

}  // namespace tpscope::cli
