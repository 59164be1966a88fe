// SPDX-License-Identifier: Apache-2.0
// meter/meter_format.cc - the text shapes of `tpscope meter`: live rows and the per-window summary.
// Pinned by golden files (tests/unit/golden/meter_*), so they are a contract.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "meter/meter_command.h"
#include "meter/record.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

namespace {

std::string num(const std::optional<double>& v, const char* spec = "{:.0f}") {
  return v ? fmt::format(fmt::runtime(spec), *v) : "N/A";
}
nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

struct Column {
  const char* name;
  std::optional<double> LiveRow::*value;
};

std::vector<Column> liveColumns(const LiveLayout& l) {
  std::vector<Column> cols{{"rxpci", &LiveRow::rxpci}, {"txpci", &LiveRow::txpci}};
  if (l.counters && l.nvlink) {
    cols.push_back({"nvlrx", &LiveRow::nvlrx});
    cols.push_back({"nvltx", &LiveRow::nvltx});
  }
  if (l.dmon_beside) {
    cols.push_back({"rxdmn", &LiveRow::rxdmn});
    cols.push_back({"txdmn", &LiveRow::txdmn});
  }
  return cols;
}

// The header's words for what was read: the byte counters, the dmon method, other sources by name.
std::string methodText(const MeterOptions& o) {
  std::string out;
  for (const std::string& s : o.sources) {
    const std::string name = s == "nvml" ? "byte counters" : s == "dmon" ? "dmon method" : s + " source";
    out += (out.empty() ? "" : " + ") + name;
  }
  return out;
}

// The dmon method's mean beside the first source's figures (nullopt without it).
std::optional<double> dmonMBps(const MeterCell& c) {
  const MeterCell::Beside* d = c.from("dmon");
  return d ? d->figure.mean_mbps : std::nullopt;
}

// The most the true bytes can differ from the prorated figure.
std::optional<double> edgeBytes(const MeterFigure& c) {
  if (!c.bytes || !c.bytes_low || !c.bytes_high) return std::nullopt;
  return std::max(*c.bytes - *c.bytes_low, *c.bytes_high - *c.bytes);
}

// The most the true bytes can differ from the prorated figure, as a share of it.
std::optional<double> edgePercent(const MeterCell& c) {
  if (!c.bytes || !c.bytes_low || !c.bytes_high || *c.bytes < 1) return std::nullopt;  // no bytes: no share
  return 100.0 * std::max(*c.bytes - *c.bytes_low, *c.bytes_high - *c.bytes) / *c.bytes;
}

}  // namespace

std::string liveHeader(const LiveLayout& l, const std::string& format) {
  const std::vector<Column> cols = liveColumns(l);
  if (format == "json") return "";
  if (format == "csv") {
    std::string h;
    if (l.date) h += "date,";
    if (l.time) h += "time,";
    h += "gpu";
    for (const Column& c : cols) h += fmt::format(",{}_mbps", c.name);
    return h + "\n";
  }
  // nvidia-smi dmon's shape: '#' lines with names, then units; values right-aligned.
  std::string names = "#", units = "#";
  if (l.date) names += "Date     ", units += "YYYYMMDD ";
  if (l.time) names += "Time     ", units += "HH:MM:SS ";
  names += fmt::format("{:>4}", "gpu");
  units += fmt::format("{:>4}", "Idx");
  for (const Column& c : cols) {
    names += fmt::format(" {:>6}", c.name);
    units += fmt::format(" {:>6}", "MB/s");
  }
  return names + "\n" + units + "\n";
}

std::string liveRow(const LiveLayout& l, const LiveRow& r, const std::string& format) {
  const std::vector<Column> cols = liveColumns(l);
  if (format == "json") {
    nlohmann::json j;
    if (l.date) j["date"] = r.date;
    if (l.time) j["time"] = r.time;
    j["t_s"] = r.t_s;
    j["gpu"] = r.gpu;
    for (const Column& c : cols) j[std::string(c.name) + "_mbps"] = opt(r.*(c.value));
    return j.dump() + "\n";
  }
  if (format == "csv") {
    std::string s;
    if (l.date) s += r.date + ",";
    if (l.time) s += r.time + ",";
    s += std::to_string(r.gpu);
    for (const Column& c : cols) s += "," + num(r.*(c.value), "{:.1f}");
    return s + "\n";
  }
  std::string s = " ";
  if (l.date) s += fmt::format("{:<8} ", r.date);
  if (l.time) s += fmt::format("{:<8} ", r.time);
  s += fmt::format("{:>4}", r.gpu);
  for (const Column& c : cols) s += fmt::format(" {:>6}", num(r.*(c.value)));
  return s + "\n";
}

std::string summaryTable(const MeterSummary& s) {
  const std::vector<MeterCounter> counters = reportedCounters(s.options);
  // The dmon method beside the counters gets a column of its own, as nvidia-smi dmon's figures.
  const bool dmon = s.options.runs("dmon");
  std::string out;
  std::string gpus;
  for (const MeterGpu& g : s.gpus) gpus += fmt::format("{}{} {}", gpus.empty() ? "" : " | ", g.index, g.name);
  out += fmt::format("# tpscope meter: {} GPU{} ({}), {}\n", s.gpus.size(), s.gpus.size() == 1 ? "" : "s", gpus,
                     methodText(s.options));
  for (const MeterCadence& c : s.cadence)
    out += fmt::format(
        "# GPU {} {:<6} reads: period {} target, {:.2f} ms mean, {:.2f} ms p99, {:.2f} ms max; "
        "one read {:.2f} ms mean; {} reads{}\n",
        s.gpus[c.gpu].index, meterGroupName(c.group),
        c.idle_period_ms > c.period_target_ms ? fmt::format("{:.2f} ms busy / {:.2f} ms quiet (+{} at window edges)",
                                                            c.period_target_ms, c.idle_period_ms, c.edge_reads)
                                              : fmt::format("{:.2f} ms", c.period_target_ms),
        c.period_mean_ms, c.period_p99_ms, c.period_max_ms, c.read_cost_mean_ms, c.reads,
        c.read_cost_mean_ms >= c.period_target_ms ? " (back to back: a read outlasts the period)" : "");
  if (dmon)
    out += fmt::format("# dmon method: one ~20 ms throughput reading per GPU and direction every {} ms\n",
                       s.options.dmon_period_ms);
  if (!s.command.empty()) {
    std::string cmd;
    for (const std::string& a : s.command) cmd += (cmd.empty() ? "" : " ") + a;
    out += fmt::format("# command: {} -> {}{}\n", cmd,
                       s.exit_code ? fmt::format("exit code {}", *s.exit_code) : std::string("did not run"),
                       s.interrupted ? " (interrupted)" : "");
  }
  for (const QuiesceRecord& q : s.quiesce)
    out += fmt::format("# quiesce: {} ({:.1f} s idle, threshold {} MB/s per counter, {}){}\n",
                       q.passed ? "passed" : "FAILED", (q.end_ns - q.start_ns) * 1e-9, q.threshold_mbps,
                       q.processes_checked ? "processes checked" : "processes not checked",
                       q.passed ? "" : ": " + q.reason);
  out += "# Bytes are link bytes as the GPU counts them (PCIe includes packet headers); MB = 10^6 B; TX/RX from\n";
  out += "# the GPU's side. bytes, MB/s and %ceil are net of the meter's own reads (own: its reads in the window\n";
  out += "# x the calibrated bytes per read). %ceil = MB/s over the per-direction ceiling. edge% = how far the\n";
  out += "# true bytes can be from the figure (edges and the calibration's spread). N/A = not measurable.\n";
  out += fmt::format("#{:<19} {:>3} {:>10} {:>4}  {:<13} {:>14} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6}{}\n", "window",
                     "rep", "dur(ms)", "gpu", "counter", "bytes", "own", "MB/s", "peak MB/s", "%ceil", "reads", "edge%",
                     dmon ? fmt::format(" {:>10}", "dmon MB/s") : "");
  std::map<std::string, std::vector<const MeterWindow*>> by_name;
  std::vector<std::string> names;
  for (const MeterWindow& w : s.windows) {
    if (!by_name.count(w.name)) names.push_back(w.name);
    by_name[w.name].push_back(&w);
    for (size_t k = 0; k < w.cells.size(); ++k) {
      for (MeterCounter c : counters) {
        const MeterCell& x = w.cells[k][static_cast<int>(c)];
        const std::string share = x.share_of_ceiling ? fmt::format("{:.1f}%", 100 * *x.share_of_ceiling) : "N/A";
        out += fmt::format(" {:<19} {:>3} {:>10.1f} {:>4}  {:<13} {:>14} {:>10} {:>10} {:>10} {:>6} {:>6} {:>6}{}\n",
                           w.name, w.repetition, (w.end_ns - w.start_ns) * 1e-6, s.gpus[k].index, meterCounterName(c),
                           num(x.bytes), num(x.own_bytes), num(x.mean_mbps, "{:.1f}"), num(x.peak_mbps, "{:.1f}"),
                           share, x.samples, num(edgePercent(x), "{:.1f}"),
                           dmon ? fmt::format(" {:>10}", isPcie(c) ? num(dmonMBps(x), "{:.1f}") : "") : "");
      }
    }
    // Every other source that counts bytes: a line per GPU and counter beside the first source's row,
    // with the ratio to it.
    const std::string first = s.options.sources.empty() ? "" : s.options.sources.front();
    for (size_t k = 0; k < w.cells.size(); ++k)
      for (MeterCounter c : counters)
        for (const MeterCell::Beside& b : w.cells[k][static_cast<int>(c)].beside) {
          if (!b.figure.counted_bytes) continue;
          out +=
              fmt::format("   {:<19} {:>3} {:>10} {:>4}  {:<13} {:>14} {:>10} {:>10} {}/{} {} edge {} B, {} records\n",
                          w.name, w.repetition, "", s.gpus[k].index, b.source + " " + meterCounterName(c),
                          num(b.figure.bytes), num(b.figure.own_bytes), num(b.figure.mean_mbps, "{:.1f}"), b.source,
                          first, num(b.ratio, "{:.4f}"), num(edgeBytes(b.figure)), b.figure.samples);
        }
    for (const MeterVerdict& v : w.verdicts) {
      if (!v.complete)
        out += v.why.empty() ? fmt::format("# warning: window '{}' has no read after its end on some GPU\n", w.name)
                             : fmt::format("# warning: window '{}' is incomplete in {}: {}\n", w.name, v.source, v.why);
      if (v.gaps > 0) {
        std::string others;
        for (const MeterVerdict& o : w.verdicts)
          if (o.source != v.source) others += (others.empty() ? "" : ", ") + o.source;
        out += fmt::format(
            "# warning: window '{}' holds {} {} read gap{} long enough to hide traffic (a PCIe counter could wrap "
            "unseen at line rate){}\n",
            w.name, v.gaps, v.source, v.gaps == 1 ? "" : "s",
            others.empty() ? "" : " (" + others + " beside it: the cross-check)");
      }
    }
  }
  bool repeated = false;
  for (const auto& [name, ws] : by_name) repeated = repeated || ws.size() > 1;
  if (repeated) {
    out += "\n# Across repetitions: median [min - max] of each repetition's mean MB/s\n";
    out += fmt::format("#{:<19} {:>3} {:>4}  {:<13} {:>10} {:>10} {:>10}\n", "window", "n", "gpu", "counter", "median",
                       "min", "max");
    for (const std::string& name : names) {
      const auto& ws = by_name[name];
      if (ws.size() < 2) continue;
      for (size_t k = 0; k < s.gpus.size(); ++k) {
        for (MeterCounter c : counters) {
          std::vector<std::optional<double>> v;
          for (const MeterWindow* w : ws) v.push_back(w->cells[k][static_cast<int>(c)].mean_mbps);
          std::optional<MeterSpread> sp = meterSpread(v);
          out += fmt::format(" {:<19} {:>3} {:>4}  {:<13} {:>10} {:>10} {:>10}\n", name, ws.size(), s.gpus[k].index,
                             meterCounterName(c), sp ? fmt::format("{:.1f}", sp->median) : "N/A",
                             sp ? fmt::format("{:.1f}", sp->min) : "N/A", sp ? fmt::format("{:.1f}", sp->max) : "N/A");
        }
      }
    }
  }
  if (s.options.runs("nvml")) out += ownTrafficLines(s.calibration, s.own_mbps, s.gpus);
  out += sourceLines(s.sources, s.gpus);
  for (const MeterCadence& c : s.cadence) {
    if (c.dropped)
      out += fmt::format("# warning: GPU {} lost {} {} reads (ring full)\n", s.gpus[c.gpu].index, c.dropped,
                         meterGroupName(c.group));
    if (c.failed_reads)
      out += fmt::format("# warning: GPU {} had {} {} reads without a value (latest: {}); windows may be incomplete\n",
                         s.gpus[c.gpu].index, c.failed_reads, meterGroupName(c.group), c.last_error);
    if (c.wrap_gaps)
      out += fmt::format(
          "# warning: GPU {} had {} gaps long enough for a PCIe counter to wrap unseen; PCIe bytes "
          "may be short\n",
          s.gpus[c.gpu].index, c.wrap_gaps);
  }
  return out;
}

std::string summaryCsv(const MeterSummary& s) {
  const std::vector<MeterCounter> counters = reportedCounters(s.options);
  std::string out = windowsCsvHeader();
  for (const MeterWindow& w : s.windows) out += toCsv(w, s.gpus, counters);
  return out;
}

namespace {

// The summary's document; with `windows` false its "windows" is an empty array (writeSummaryJson fills it).
nlohmann::json summaryDocument(const MeterSummary& s, bool windows_too) {
  const std::vector<MeterCounter> counters = reportedCounters(s.options);
  nlohmann::json doc;
  nlohmann::json gpus = nlohmann::json::array(), windows = nlohmann::json::array(), cadence = nlohmann::json::array(),
                 quiesce = nlohmann::json::array();
  for (const MeterGpu& g : s.gpus) gpus.push_back(toJson(g));
  if (windows_too)
    for (const MeterWindow& w : s.windows) windows.push_back(toJson(w, s.gpus, counters));
  for (const MeterCadence& c : s.cadence) cadence.push_back(toJson(c, s.gpus));
  for (const QuiesceRecord& q : s.quiesce) quiesce.push_back(toJson(q, s.gpus));
  doc["context"] = {{"tpscope_version", tpsGetVersion()},
                    {"calibration", toJson(s.calibration, s.gpus)},
                    {"command", s.command},
                    {"exit_code", s.exit_code ? nlohmann::json(*s.exit_code) : nlohmann::json(nullptr)},
                    {"interrupted", s.interrupted},
                    {"options", toJson(s.options)},
                    {"gpus", gpus}};
  doc["windows"] = windows;
  doc["cadence"] = cadence;
  doc["quiesce"] = quiesce;
  // What each source says of its run, by source name ("pm": records, gaps, its own traffic).
  for (const MeterSourceStatus& st : s.sources) {
    nlohmann::json own = nlohmann::json::array();
    for (size_t k = 0; k < st.own_mbps.size() && k < s.gpus.size(); ++k) {
      nlohmann::json g = {{"gpu", s.gpus[k].index}};
      for (MeterCounter c : {MeterCounter::kPcieTx, MeterCounter::kPcieRx})
        g[std::string(meterCounterName(c)) + "_mbps"] = opt(st.own_mbps[k][static_cast<int>(c)]);
      own.push_back(g);
    }
    doc[st.source] = {{"how", st.how},    {"records", st.records}, {"dropped", st.dropped},
                      {"holes", st.gaps}, {"ended", st.ended},     {"own_traffic", own}};
  }
  return doc;
}

}  // namespace

nlohmann::json summaryJson(const MeterSummary& s) { return summaryDocument(s, true); }

void writeSummaryJson(const MeterSummary& s, std::FILE* out) {
  // The document without its windows, dumped, and the windows written where its empty array stands, each
  // dumped alone and indented as the whole document's dump would indent it (two levels deeper).
  const std::string text = summaryDocument(s, false).dump(2);
  const std::string empty = "\n  \"windows\": []";
  const size_t at = text.find(empty);
  if (at == std::string::npos || s.windows.empty()) {
    std::fprintf(out, "%s\n", text.c_str());
    return;
  }
  const std::vector<MeterCounter> counters = reportedCounters(s.options);
  std::fwrite(text.data(), 1, at, out);
  std::fputs("\n  \"windows\": [", out);
  for (size_t i = 0; i < s.windows.size(); ++i) {
    const std::string w = toJson(s.windows[i], s.gpus, counters).dump(2);
    std::fputs("\n    ", out);
    for (size_t from = 0; from < w.size();) {  // each line, four spaces deeper
      const size_t nl = std::min(w.find('\n', from), w.size());
      std::fwrite(w.data() + from, 1, nl - from, out);
      if (nl < w.size()) std::fputs("\n    ", out);
      from = nl + 1;
    }
    if (i + 1 < s.windows.size()) std::fputc(',', out);
  }
  std::fputs("\n  ]", out);
  std::fputs(text.c_str() + at + empty.size(), out);
  std::fputc('\n', out);
}

}  // namespace tpscope::cli
