// SPDX-License-Identifier: Apache-2.0
// record.cc - JSON and CSV records of meter data.
#include "meter/record.h"

#include <fmt/format.h>

#include <algorithm>

namespace tpscope {

namespace {

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Integers as they are; byte counts (doubles after proration) to the byte; rates to 6 digits.
template <typename T>
std::string csv(const std::optional<T>& v, bool bytes = false) {
  if (!v) return "N/A";
  if constexpr (std::is_floating_point_v<T>) return bytes ? fmt::format("{:.0f}", *v) : fmt::format("{:.6g}", *v);
  return fmt::format("{}", *v);
}

std::string csvName(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

bool runs(const MeterOptions& o, const char* source) {
  return std::find(o.sources.begin(), o.sources.end(), source) != o.sources.end();
}

// The record's "method" (the counters, the dmon method, or both), as records had it before sources.
const char* methodName(const MeterOptions& o) {
  return runs(o, "dmon") ? (runs(o, "nvml") ? "both" : "dmon") : "counters";
}

// The counters a GPU supports, by name; null where a value is missing.
nlohmann::json countersJson(const std::array<std::optional<double>, kMeterCounters>& v, const MeterGpu& g) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMeterCounters; ++c)
    if (g.supported[c]) j[meterCounterName(static_cast<MeterCounter>(c))] = opt(v[c]);
  return j;
}

}  // namespace

std::string sourceLines(const std::vector<MeterSourceStatus>& status, const std::vector<MeterGpu>& gpus) {
  std::string out;
  for (const MeterSourceStatus& st : status) {
    out += fmt::format("# {}; {} records kept, {} dropped, {} gaps\n", st.how, st.records, st.dropped, st.gaps);
    const int tx = static_cast<int>(MeterCounter::kPcieTx), rx = static_cast<int>(MeterCounter::kPcieRx);
    for (size_t k = 0; k < st.own_mbps.size() && k < gpus.size(); ++k) {
      const auto& own = st.own_mbps[k];
      if (own[tx] && own[rx])
        out += fmt::format(
            "# GPU {} {} source's own traffic (measured at start, subtracted): tx {:.2f} MB/s, rx {:.2f} MB/s\n",
            gpus[k].index, st.source, *own[tx], *own[rx]);
      else
        out += fmt::format("# GPU {} {} source's own traffic not measured: its figures include it\n", gpus[k].index,
                           st.source);
    }
    if (!st.ended.empty())
      out += "# warning: " + st.source + " ended early (" + st.ended + "): later windows are incomplete\n";
  }
  return out;
}

std::vector<nlohmann::json> timelineJson(const std::vector<MeterWindow>& windows,
                                         const std::vector<MeterRecord>& records, const std::vector<MeterGpu>& gpus,
                                         const detail::PmBurstRule& rule) {
  std::vector<nlohmann::json> out;
  out.push_back({{"type", "timeline_rule"},
                 {"direction", detail::pmDirectionName(rule.direction)},
                 {"threshold_mbps", rule.threshold_mbps},
                 {"min_gap_us", rule.min_gap_us}});
  const bool marked =
      std::any_of(windows.begin(), windows.end(), [](const MeterWindow& w) { return w.name != "command"; });
  for (const MeterWindow& w : windows) {
    if (marked && w.name == "command") continue;
    for (size_t k = 0; k < gpus.size(); ++k) {
      // Records are GPU by GPU, each GPU's in time order.
      std::vector<MeterRecord> mine;
      for (const MeterRecord& r : records)
        if (r.gpu == static_cast<int>(k) && r.t_end_ns > w.start_ns && r.t_start_ns < w.end_ns) mine.push_back(r);
      const std::vector<int> burst = detail::burstLabels(mine, rule);
      for (size_t i = 0; i < mine.size(); ++i) {
        nlohmann::json j = toJson(mine[i], gpus);
        j["type"] = "timeline";
        j["window"] = w.name;
        j["repetition"] = w.repetition;
        j["t_us"] = (mine[i].t_start_ns - w.start_ns) * 1e-3;
        j["dur_us"] = (mine[i].t_end_ns - mine[i].t_start_ns) * 1e-3;
        j["burst"] = burst[i] >= 0 ? nlohmann::json(burst[i]) : nlohmann::json(nullptr);
        out.push_back(std::move(j));
      }
    }
  }
  return out;
}

std::vector<MeterCounter> reportedCounters(const MeterOptions& o) {
  std::vector<MeterCounter> out{MeterCounter::kPcieTx, MeterCounter::kPcieRx};
  if (!runs(o, "nvml")) return out;  // the other sources count PCIe only
  if (o.nvlink) {
    out.push_back(MeterCounter::kNvlinkTx);
    out.push_back(MeterCounter::kNvlinkRx);
  }
  if (o.nvlink_raw) {
    out.push_back(MeterCounter::kNvlinkRawTx);
    out.push_back(MeterCounter::kNvlinkRawRx);
  }
  return out;
}

nlohmann::json toJson(const MeterGpu& g) {
  nlohmann::json supported = nlohmann::json::object();
  for (int c = 0; c < kMeterCounters; ++c) supported[meterCounterName(static_cast<MeterCounter>(c))] = g.supported[c];
  return {{"index", g.index},
          {"name", g.name},
          {"bus_id", g.bus_id},
          {"counters_supported", supported},
          {"nvlink_links", g.nvlink_links},
          {"pcie_ceiling_mbps", opt(g.pcie_ceiling_mbps)},
          {"nvlink_ceiling_mbps", opt(g.nvlink_ceiling_mbps)}};
}

nlohmann::json toJson(const MeterOptions& o) {
  nlohmann::json j = {{"period_us", o.period_us},
                      {"idle_period_us", o.idle_period_us},
                      {"busy_mbps", o.busy_mbps},
                      {"calibrate", o.calibrate},
                      {"method", methodName(o)},
                      {"nvlink", o.nvlink},
                      {"nvlink_raw", o.nvlink_raw},
                      {"nvlink_links_per_call", o.nvlink_links_per_call},
                      {"dmon_period_ms", o.dmon_period_ms},
                      {"peak_span_ms", o.peak_span_ms}};
  // The sources besides NVML and dmon ("method" says those two), so that NVML-only records keep their shape.
  std::vector<std::string> others;
  for (const std::string& s : o.sources)
    if (s != "dmon") others.push_back(s);
  if (others != std::vector<std::string>{"nvml"}) j["source"] = meterSourcesText(others);
  if (runs(o, "pm")) {
    j["pm_interval_us"] = o.pm_interval_us;
    j["pm_decode_ms"] = o.pm_decode_ms;
    j["pm_calibrate_ms"] = o.pm_calibrate_ms;
  }
  return j;
}

nlohmann::json toJson(const MeterRecord& p, const std::vector<MeterGpu>& gpus) {
  return {{"type", "pm_sample"},    {"gpu", gpus[p.gpu].index},    {"t_start_ns", p.t_start_ns},
          {"t_end_ns", p.t_end_ns}, {"pcie_tx_bytes", p.bytes[0]}, {"pcie_rx_bytes", p.bytes[1]}};
}

nlohmann::json toJson(const MeterSample& s, const std::vector<MeterGpu>& gpus) {
  nlohmann::json j = {
      {"type", "sample"},
      {"gpu", gpus[s.gpu].index},
      {"group", meterGroupName(s.group)},
      {"t_before_ns", s.t_before_ns},
      {"t_after_ns", s.t_after_ns},
      {"nvml_timestamp_us", s.nvml_timestamp_us ? nlohmann::json(s.nvml_timestamp_us) : nlohmann::json()}};
  for (int c = 0; c < kMeterCounters; ++c) {
    if (!gpus[s.gpu].supported[c]) continue;                         // not read on this GPU: the gpu record says so
    if (groupOf(static_cast<MeterCounter>(c)) != s.group) continue;  // read by the other group's thread
    const std::string n = meterCounterName(static_cast<MeterCounter>(c));
    j[n + "_bytes"] = opt(s.bytes[c]);
    j[n + "_t_ns"] = s.t_ns[c];
  }
  return j;
}

nlohmann::json toJson(const MeterDmonSample& d, const std::vector<MeterGpu>& gpus) {
  return {{"type", "dmon"},
          {"gpu", gpus[d.gpu].index},
          {"counter", meterCounterName(d.counter)},
          {"t_before_ns", d.t_before_ns},
          {"t_after_ns", d.t_after_ns},
          {"mbps", opt(d.mbps)}};
}

nlohmann::json toJson(const MeterWindow& w, const std::vector<MeterGpu>& gpus,
                      const std::vector<MeterCounter>& counters) {
  nlohmann::json per_gpu = nlohmann::json::array();
  for (size_t k = 0; k < w.cells.size(); ++k) {
    nlohmann::json cells = nlohmann::json::object();
    for (MeterCounter c : counters) {
      const MeterCell& x = w.cells[k][static_cast<int>(c)];
      nlohmann::json j = {{"bytes", opt(x.bytes)},
                          {"counted_bytes", opt(x.counted_bytes)},
                          {"own_bytes", opt(x.own_bytes)},
                          {"bytes_low", opt(x.bytes_low)},
                          {"bytes_high", opt(x.bytes_high)},
                          {"mean_mbps", opt(x.mean_mbps)},
                          {"peak_mbps", opt(x.peak_mbps)},
                          {"share_of_ceiling", opt(x.share_of_ceiling)},
                          {"samples", x.samples},
                          // Every cell has carried the dmon figure since the first records.
                          {"dmon_mbps", nullptr},
                          {"dmon_samples", 0}};
      // The other sources' figures, keyed by source: a source of rates gives its mean, a source of
      // bytes its net and counted bytes, own traffic, edge bound and ratio to the first source.
      for (const MeterCell::Beside& b : x.beside) {
        const MeterFigure& f = b.figure;
        if (!f.counted_bytes) {
          j[b.source + "_mbps"] = opt(f.mean_mbps);
        } else {
          std::optional<double> edge;
          if (f.bytes && f.bytes_low && f.bytes_high)
            edge = std::max(*f.bytes - *f.bytes_low, *f.bytes_high - *f.bytes);
          j[b.source + "_bytes"] = opt(f.bytes);
          j[b.source + "_counted_bytes"] = opt(f.counted_bytes);
          j[b.source + "_own_bytes"] = opt(f.own_bytes);
          j[b.source + "_edge_bytes"] = opt(edge);
          j[b.source + "_ratio"] = opt(b.ratio);
        }
        j[b.source + "_samples"] = f.samples;
      }
      cells[meterCounterName(c)] = j;
    }
    per_gpu.push_back({{"gpu", gpus[k].index}, {"counters", cells}});
  }
  nlohmann::json j = {{"type", "window"},       {"name", w.name},     {"repetition", w.repetition},
                      {"start_ns", w.start_ns}, {"end_ns", w.end_ns}, {"duration_ms", (w.end_ns - w.start_ns) * 1e-6},
                      {"complete", w.complete}, {"gpus", per_gpu}};
  // Each source's verdict where there is more than one source, or one has something to say.
  bool say = w.verdicts.size() > 1;
  for (const MeterVerdict& v : w.verdicts) say = say || !v.why.empty() || v.gaps > 0;
  if (say) {
    nlohmann::json verdicts = nlohmann::json::array();
    for (const MeterVerdict& v : w.verdicts)
      verdicts.push_back({{"source", v.source}, {"complete", v.complete}, {"why", v.why}, {"gaps", v.gaps}});
    j["sources"] = verdicts;
  }
  return j;
}

nlohmann::json toJson(const QuiesceRecord& q, const std::vector<MeterGpu>& gpus) {
  nlohmann::json idle = nlohmann::json::array();
  for (size_t k = 0; k < q.idle_mbps.size(); ++k) {
    nlohmann::json rates = nlohmann::json::object();
    for (int c = 0; c < kMeterCounters; ++c)
      if (gpus[k].supported[c]) rates[meterCounterName(static_cast<MeterCounter>(c))] = opt(q.idle_mbps[k][c]);
    idle.push_back({{"gpu", gpus[k].index}, {"mean_mbps", rates}});
  }
  return {{"type", "quiesce"},
          {"passed", q.passed},
          {"start_ns", q.start_ns},
          {"end_ns", q.end_ns},
          {"idle_ms", (q.end_ns - q.start_ns) * 1e-6},
          {"threshold_mbps", q.threshold_mbps},
          {"idle", idle},
          {"processes_checked", q.processes_checked},
          {"other_pids", q.other_pids},
          {"reason", q.reason}};
}

nlohmann::json toJson(const MeterCadence& c, const std::vector<MeterGpu>& gpus) {
  return {{"type", "cadence"},
          {"gpu", gpus[c.gpu].index},
          {"group", meterGroupName(c.group)},
          {"reads", c.reads},
          {"period_target_ms", c.period_target_ms},
          {"idle_period_ms", c.idle_period_ms},
          {"edge_reads", c.edge_reads},
          {"period_mean_ms", c.period_mean_ms},
          {"period_p50_ms", c.period_p50_ms},
          {"period_p99_ms", c.period_p99_ms},
          {"period_max_ms", c.period_max_ms},
          {"read_cost_mean_ms", c.read_cost_mean_ms},
          {"read_cost_p99_ms", c.read_cost_p99_ms},
          {"dropped", c.dropped},
          {"wrap_gaps", c.wrap_gaps},
          {"failed_reads", c.failed_reads},
          {"last_error", c.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.last_error)},
          {"own_mbps", countersJson(c.own_mbps, gpus[c.gpu])}};
}

nlohmann::json toJson(const MeterCalibration& c, const std::vector<MeterGpu>& gpus) {
  nlohmann::json per_gpu = nlohmann::json::array();
  for (size_t k = 0; k < c.gpus.size() && k < gpus.size(); ++k) {
    const MeterGpuCalibration& g = c.gpus[k];
    nlohmann::json kinds = nlohmann::json::object();
    for (int r = 0; r < kMeterReadKinds; ++r) {
      const MeterReadCost& cost = g.cost[r];
      if (cost.reads == 0) continue;
      kinds[meterReadKindName(static_cast<MeterReadKind>(r))] = {{"reads", cost.reads},
                                                                 {"bytes_per_read", countersJson(cost.bytes, gpus[k])},
                                                                 {"low", countersJson(cost.low, gpus[k])},
                                                                 {"high", countersJson(cost.high, gpus[k])}};
    }
    per_gpu.push_back({{"gpu", gpus[k].index},
                       {"rounds", g.rounds},
                       {"quiet_mbps", countersJson(g.quiet_mbps, gpus[k])},
                       {"cost", kinds}});
  }
  return {{"calibrated", c.calibrated},
          {"note", c.note},
          {"duration_ms", (c.end_ns - c.start_ns) * 1e-6},
          {"gpus", per_gpu}};
}

MeterCalibration calibrationFromJson(const nlohmann::json& j, const std::vector<MeterGpu>& gpus) {
  MeterCalibration c;
  if (!j.is_object()) return c;
  c.calibrated = j.value("calibrated", false);
  c.note = j.value("note", std::string());
  const auto fill = [](const nlohmann::json& from, std::array<std::optional<double>, kMeterCounters>* to) {
    if (!from.is_object()) return;
    for (int k = 0; k < kMeterCounters; ++k) {
      const char* n = meterCounterName(static_cast<MeterCounter>(k));
      if (from.contains(n) && from[n].is_number()) (*to)[k] = from[n].get<double>();
    }
  };
  for (const nlohmann::json& g : j.value("gpus", nlohmann::json::array())) {
    MeterGpuCalibration gc;
    gc.rounds = g.value("rounds", 0);
    fill(g.value("quiet_mbps", nlohmann::json()), &gc.quiet_mbps);
    const nlohmann::json kinds = g.value("cost", nlohmann::json::object());
    for (int r = 0; r < kMeterReadKinds; ++r) {
      const char* n = meterReadKindName(static_cast<MeterReadKind>(r));
      if (!kinds.contains(n)) continue;
      gc.cost[r].reads = kinds[n].value("reads", 0);
      fill(kinds[n].value("bytes_per_read", nlohmann::json()), &gc.cost[r].bytes);
      fill(kinds[n].value("low", nlohmann::json()), &gc.cost[r].low);
      fill(kinds[n].value("high", nlohmann::json()), &gc.cost[r].high);
    }
    c.gpus.push_back(gc);
  }
  if (c.gpus.size() != gpus.size()) c.calibrated = false;
  return c;
}

std::string samplesCsvHeader() {
  std::string h = "gpu,group,t_before_ns,t_after_ns,nvml_timestamp_us";
  for (int c = 0; c < kMeterCounters; ++c) {
    const std::string n = meterCounterName(static_cast<MeterCounter>(c));
    h += "," + n + "_bytes," + n + "_t_ns";
  }
  return h + "\n";
}

std::string toCsv(const MeterSample& s, const std::vector<MeterGpu>& gpus) {
  std::string line = fmt::format("{},{},{},{},{}", gpus[s.gpu].index, meterGroupName(s.group), s.t_before_ns,
                                 s.t_after_ns, s.nvml_timestamp_us);
  // The other group's counters are empty (not read in this row); N/A is a value this read lacks.
  for (int c = 0; c < kMeterCounters; ++c) {
    if (groupOf(static_cast<MeterCounter>(c)) != s.group)
      line += ",,";
    else
      line += fmt::format(",{},{}", csv(s.bytes[c]), s.t_ns[c]);
  }
  return line + "\n";
}

std::string windowsCsvHeader() {
  return "window,repetition,start_ns,end_ns,duration_ms,gpu,counter,bytes,counted_bytes,own_bytes,bytes_low,bytes_high,"
         "mean_mbps,peak_mbps,share_of_ceiling,samples,dmon_mbps,dmon_samples\n";
}

std::string toCsv(const MeterWindow& w, const std::vector<MeterGpu>& gpus, const std::vector<MeterCounter>& counters) {
  std::string out;
  for (size_t k = 0; k < w.cells.size(); ++k) {
    for (MeterCounter c : counters) {
      const MeterCell& x = w.cells[k][static_cast<int>(c)];
      const MeterCell::Beside* dmon = x.from("dmon");
      out += fmt::format("{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csvName(w.name), w.repetition,
                         w.start_ns, w.end_ns, (w.end_ns - w.start_ns) * 1e-6, gpus[k].index, meterCounterName(c),
                         csv(x.bytes, true), csv(x.counted_bytes, true), csv(x.own_bytes, true), csv(x.bytes_low, true),
                         csv(x.bytes_high, true), csv(x.mean_mbps), csv(x.peak_mbps), csv(x.share_of_ceiling),
                         x.samples, csv(dmon ? dmon->figure.mean_mbps : std::nullopt), dmon ? dmon->figure.samples : 0);
    }
  }
  return out;
}

std::string ownTrafficLines(const MeterCalibration& c,
                            const std::vector<std::array<std::optional<double>, kMeterCounters>>& own_mbps,
                            const std::vector<MeterGpu>& gpus) {
  if (!c.calibrated) return "# the meter's own reads are included in the figures above: " + c.note + "\n";
  std::string out;
  auto f = [](const std::optional<double>& v, double scale, const char* spec) {
    return v ? fmt::format(fmt::runtime(spec), *v * scale) : std::string("N/A");
  };
  const int rx = static_cast<int>(MeterCounter::kPcieRx), tx = static_cast<int>(MeterCounter::kPcieTx);
  for (size_t k = 0; k < gpus.size() && k < c.gpus.size(); ++k) {
    const std::array<std::optional<double>, kMeterCounters> none{};
    const auto& mbps = k < own_mbps.size() ? own_mbps[k] : none;
    const MeterReadCost& pcie = c.gpus[k].cost[static_cast<int>(MeterReadKind::kPcie)];
    out += fmt::format(
        "# the meter's own reads: {} MB/s rx, {} MB/s tx on GPU {}; subtracted above (a PCIe read adds {} KB rx "
        "[{} - {}], {} KB tx [{} - {}])",
        f(mbps[rx], 1, "{:.2f}"), f(mbps[tx], 1, "{:.2f}"), gpus[k].index, f(pcie.bytes[rx], 1e-3, "{:.1f}"),
        f(pcie.low[rx], 1e-3, "{:.1f}"), f(pcie.high[rx], 1e-3, "{:.1f}"), f(pcie.bytes[tx], 1e-3, "{:.1f}"),
        f(pcie.low[tx], 1e-3, "{:.1f}"), f(pcie.high[tx], 1e-3, "{:.1f}"));
    const MeterReadCost& nvl = c.gpus[k].cost[static_cast<int>(MeterReadKind::kNvlink)];
    if (nvl.reads > 0)
      out += fmt::format("; an NVLink read adds {} KB rx, {} KB tx", f(nvl.bytes[rx], 1e-3, "{:.1f}"),
                         f(nvl.bytes[tx], 1e-3, "{:.1f}"));
    out += "\n";
  }
  return out;
}

}  // namespace tpscope
