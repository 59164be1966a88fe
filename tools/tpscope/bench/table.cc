// SPDX-License-Identifier: Apache-2.0
// bench/table.cc - formulas, the nccl-tests table, footer, ratio section and JSON of the AllReduce benchmark.
#include "bench/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "cli.h"

namespace tpscope::cli {

double algBandwidthGBps(uint64_t bytes, double time_us) {
  return time_us > 0 ? static_cast<double>(bytes) / 1.0e3 / time_us : 0.0;  // B/us / 1e3 = GB/s
}

double busBandwidthGBps(double algbw_gbps, int ngpus) {
  return ngpus > 0 ? algbw_gbps * 2.0 * (ngpus - 1) / ngpus : 0.0;
}

TimeStats summarizeTimes(std::vector<double> t) {
  TimeStats s;
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  double sum = 0;
  for (double v : t) sum += v;
  const size_t n = t.size();
  s.mean_us = sum / n;
  s.min_us = t.front();
  s.max_us = t.back();
  s.median_us = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  return s;
}

void setBandwidths(BenchRow* row, int ngpus) {
  row->algbw_gbps = algBandwidthGBps(row->bytes(), row->time.mean_us);
  row->busbw_gbps = busBandwidthGBps(row->algbw_gbps, ngpus);
}

void setNcclSymmAccounting(BenchRow* row, int ngpus) {
  row->path = "nccl-symm";
  const double ring = ngpus > 0 ? static_cast<double>(row->bytes()) * 2 * (ngpus - 1) / ngpus : 0.0;
  row->bytes_per_call = MediumBytes{0, 0, 0, 0, ring, ring};
}

const std::vector<std::string>& benchEnvNames() {
  static const std::vector<std::string> kNames = {"NCCL_P2P_DISABLE",
                                                  "NCCL_SHM_DISABLE",
                                                  "NCCL_ALGO",
                                                  "NCCL_PROTO",
                                                  "NCCL_NVLS_ENABLE",
                                                  "TPSCOPE_ALLREDUCE",
                                                  "TPSCOPE_HOST_COPY_THRESHOLD",
                                                  "TPSCOPE_HOST_CHUNK_BYTES",
                                                  "TPSCOPE_HOST_BLOCKS",
                                                  "TPSCOPE_SPIN_TIMEOUT_MS",
                                                  "TPSCOPE_TUNE_FILE",
                                                  "TPSCOPE_WIRE"};
  return kNames;
}

namespace {

// Column names and widths, shared by the header and the rows so they cannot drift apart. A group
// starts a new block: the header shows " |" between groups where rows have blanks.
struct Column {
  const char* name;
  int width;
  bool group;
};
constexpr Column kColumns[] = {{"size(B)", 12, false},     {"count(elements)", 15, false},
                               {"type", 8, false},         {"redop", 6, false},
                               {"time(us)", 9, true},      {"algbw(GB/s)", 11, false},
                               {"busbw(GB/s)", 11, false}, {"#wrong", 7, false},
                               {"backend", 9, true},       {"wire", 6, false},
                               {"ranks", 7, false},        {"path", 16, false},
                               {"min(us)", 9, false},      {"median(us)", 10, false},
                               {"max(us)", 9, false},      {"rel_rms", 9, false},
                               {"rel_max", 9, false},      {"host_tx(B)", 11, false},
                               {"host_rx(B)", 11, false},  {"peer_tx(B)", 11, false},
                               {"peer_rx(B)", 11, false},  {"nccl_tx(B)", 11, false},
                               {"nccl_rx(B)", 11, false},  {"pcie_tx(B)", 11, true},
                               {"pcie_rx(B)", 11, false},  {"nvl_tx(B)", 11, false},
                               {"nvl_rx(B)", 11, false}};
constexpr size_t kNumColumns = sizeof(kColumns) / sizeof(kColumns[0]);

// nccl-tests' time format: two decimals below 100 us, one below 10 ms, none above.
std::string timeText(double us) {
  if (us >= 10000.0) return fmt::format("{:.0f}", us);
  if (us >= 100.0) return fmt::format("{:.1f}", us);
  return fmt::format("{:.2f}", us);
}

std::string joinCells(const std::vector<std::string>& cells, char lead) {
  std::string s(1, lead);
  for (size_t i = 0; i < cells.size() && i < kNumColumns; ++i)
    s += fmt::format("{}{:>{}}", kColumns[i].group ? (lead == '#' ? " |" : "  ") : "", cells[i], kColumns[i].width + 1);
  return s + "\n";
}

// A relative error: three significant digits in exponent form ("3.91e-03"), N/A when not computed.
std::string errorText(const std::optional<double>& v) { return v ? fmt::format("{:.2e}", *v) : "N/A"; }

std::string cudaVersionText(int v) { return v ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "N/A"; }

std::string joinBackends(const std::vector<tpsBackend_t>& b) {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) s += (i ? "," : "") + std::string(benchBackendName(b[i]));
  return s;
}

}  // namespace

std::string formatPreamble(const BenchContext& ctx) {
  const BenchOptions& o = ctx.options;
  std::string s = fmt::format("# tpscope bench allreduce {} (git {})\n", ctx.version, ctx.git_sha);
  const std::string step = o.sweep.step_factor > 1 ? fmt::format("{}(factor)", o.sweep.step_factor)
                                                   : fmt::format("{}(bytes)", o.sweep.step_bytes);
  s += fmt::format("# nGpus {} minBytes {} maxBytes {} step: {} warmup iters: {} iters: {} validation: {} graph: {}\n",
                   ctx.devices.size(), o.sweep.min_bytes, o.sweep.max_bytes, step, o.warmup_iters, o.iters,
                   o.check ? 1 : 0, o.graph ? 1 : 0);
  std::string types;
  for (size_t i = 0; i < o.dtypes.size(); ++i) types += (i ? "," : "") + std::string(tpsDataTypeName(o.dtypes[i]));
  std::string wires;
  for (size_t i = 0; i < o.wires.size(); ++i)
    wires += (i ? "," : "") + (o.wires_given || !ctx.communicator
                                   ? wireLabel(o.wires[i])
                                   : wireLabel(ctx.communicator->wire, ctx.communicator->wire_error_budget));
  s += fmt::format("# backends: {} (interleaved size by size)  wires: {}  datatypes: {}  op: sum, in place\n",
                   joinBackends(o.backends), wires, types);
  if (o.wires.size() > 1 || o.wires.front() != tpsWireExact)
    s += "# wires: algbw/busbw on the dtype's bytes; host_*/peer_* the bytes the wire moved; a path without\n"
         "#        +wire ran exact (the backend or dtype does not carry that wire); rel_rms/rel_max: rank 0's\n"
         "#        result against the exact sum (-c 1)\n";
  if (o.procs > 0) {
    std::string gpus;
    for (size_t r = 0; r < ctx.procs_devices.size(); ++r)
      gpus += fmt::format("{}{}", r ? "," : "", ctx.procs_devices[r]);
    s += fmt::format(
        "# procs: the sweep again with each of {} ranks a process of its own (tpsCommInitRank; this binary re-run\n"
        "#        per rank) on GPUs {}: rows 'procs', after the rows 'threads' (every rank in this process);\n"
        "#        time = mean over ranks, min/median/max over every rank's calls\n",
        o.procs, gpus);
    if (ctx.communicator && ctx.communicator->shared_devices)
      s += "# shared_devices: ranks share a GPU (their processes time-slice it): a test of the paths, not a link "
           "measurement\n";
  }
  if (o.meter && !o.graph)
    s += "# meter: each size also runs >= 20 ms of calls in a meter window whose idle edges each hold a read of\n"
         "#        every counter (idle background subtracted); pcie_*/nvl_* = link counter bytes per call and\n"
         "#        rank (the GPUs' counters over the ranks), protocol overhead included; N/A: a counter not read in\n"
         "#        time\n";
  if (o.graph)
    s += fmt::format(
        "# timer: CUDA events on GPU0's stream around each launch of a graph of {} calls on all GPUs;"
        " {} timed launches after {} eager warm-ups and 1 untimed launch; time = launch time / {}\n",
        o.iters, o.graph_replays, o.warmup_iters, o.iters);
  else
    s += fmt::format(
        "# timer: CUDA events on GPU0's stream; {} back-to-back calls after {} warm-ups; every GPU's"
        " stream waits for the start event and joins before the stop event\n",
        o.iters, o.warmup_iters);
  std::string env;
  for (const auto& [k, v] : ctx.env) env += fmt::format(" {}={}", k, v);
  s += fmt::format("# env:{}\n", env.empty() ? " (no NCCL_ or TPSCOPE_ variable that changes the paths is set)" : env);
  s += fmt::format("# driver {} | CUDA driver {}, runtime {} | NCCL {}\n",
                   ctx.driver_version.empty() ? "N/A" : ctx.driver_version, cudaVersionText(ctx.cuda_driver_version),
                   cudaVersionText(ctx.cuda_runtime_version), ctx.nccl_version.empty() ? "N/A" : ctx.nccl_version);
  auto rate = [](const std::optional<double>& v) { return v ? fmt::format("{:.1f} GB/s", *v) : std::string("N/A"); };
  s += fmt::format("# pinned copy rate GPU{} (256 MiB, CUDA events): D2H {}, H2D {}\n",
                   ctx.devices.empty() ? 0 : ctx.devices[0].device, rate(ctx.pinned_d2h_gbps),
                   rate(ctx.pinned_h2d_gbps));
  s += formatNcclSymmPreamble(ctx.nccl_symm);
  s += "#\n# Using devices\n";
  for (const DeviceEntry& d : ctx.devices)
    s += fmt::format("#  Rank {:2d} Group  0 Pid {:6d} on {:>10} device {:2d} [{}] {}\n", d.rank, ctx.pid, ctx.hostname,
                     d.device, d.bus_id, d.name);
  return s + "#\n";
}

std::string formatHeader() {
  std::vector<std::string> names;
  for (const Column& c : kColumns) names.emplace_back(c.name);
  return joinCells(names, '#');
}

std::string formatRow(const BenchRow& r) {
  auto bytes = [&](double MediumBytes::*field) {
    return r.bytes_per_call ? fmt::format("{:.0f}", (*r.bytes_per_call).*field) : std::string("N/A");
  };
  auto metered = [&](std::optional<double> MeteredBytes::*field) {
    return r.metered && ((*r.metered).*field) ? fmt::format("{:.0f}", *((*r.metered).*field)) : std::string("N/A");
  };
  return joinCells({std::to_string(r.bytes()),
                    std::to_string(r.count),
                    tpsDataTypeName(r.dtype),
                    "sum",
                    timeText(r.time.mean_us),
                    fmt::format("{:.2f}", r.algbw_gbps),
                    fmt::format("{:.2f}", r.busbw_gbps),
                    r.check ? std::to_string(r.check->wrong) : "N/A",
                    benchBackendName(r.backend),
                    r.wire,
                    r.procs ? "procs" : "threads",
                    r.path,
                    timeText(r.time.min_us),
                    timeText(r.time.median_us),
                    timeText(r.time.max_us),
                    errorText(r.check ? r.check->rel_rms : std::nullopt),
                    errorText(r.check ? r.check->rel_max : std::nullopt),
                    bytes(&MediumBytes::host_tx),
                    bytes(&MediumBytes::host_rx),
                    bytes(&MediumBytes::peer_tx),
                    bytes(&MediumBytes::peer_rx),
                    bytes(&MediumBytes::nccl_tx),
                    bytes(&MediumBytes::nccl_rx),
                    metered(&MeteredBytes::pcie_tx),
                    metered(&MeteredBytes::pcie_rx),
                    metered(&MeteredBytes::nvlink_tx),
                    metered(&MeteredBytes::nvlink_rx)},
                   ' ');
}

std::string formatFooter(const std::vector<BenchRow>& rows, const std::vector<tpsBackend_t>& backends) {
  uint64_t wrong = 0;
  bool checked = false;
  for (const BenchRow& r : rows)
    if (r.check) {
      checked = true;
      wrong += r.check->wrong;
    }
  std::string s = checked ? fmt::format("# Out of bounds values : {} {}\n", wrong, wrong ? "FAILED" : "OK")
                          : "# Out of bounds values : N/A (not checked: -c 0)\n";
  // Mean busbw over the sizes, as nccl-tests' "Avg bus bandwidth", per backend, wire and type (and for
  // --procs rows apart, marked so).
  std::vector<std::string> wires;
  for (const BenchRow& r : rows)
    if (std::find(wires.begin(), wires.end(), r.wire) == wires.end()) wires.push_back(r.wire);
  for (bool procs : {false, true})
    for (tpsBackend_t b : backends)
      for (const std::string& w : wires)
        for (int t = 0; t < tpsNumDataTypes; ++t) {
          double sum = 0;
          int n = 0;
          for (const BenchRow& r : rows)
            if (r.backend == b && r.wire == w && r.dtype == t && r.procs == procs) sum += r.busbw_gbps, ++n;
          if (n)
            s += fmt::format("# Avg bus bandwidth    : {:.4g} {} {} {}{}\n", sum / n, benchBackendName(b),
                             tpsDataTypeName(static_cast<tpsDataType_t>(t)), w, procs ? " procs" : "");
        }
  return s + "#\n";
}

std::vector<RatioRow> timeRatios(const std::vector<BenchRow>& rows, const std::vector<tpsBackend_t>& backends,
                                 tpsBackend_t reference, const std::string& wire) {
  // Keyed by (dtype, bytes) in the order rows were measured.
  std::vector<RatioRow> out;
  std::map<std::pair<int, uint64_t>, std::map<int, double>> times;
  for (const BenchRow& r : rows) {
    if (r.procs || r.wire != wire) continue;
    auto key = std::make_pair(static_cast<int>(r.dtype), r.bytes());
    if (times.find(key) == times.end()) out.push_back({r.dtype, r.bytes(), {}, std::nullopt});
    times[key][r.backend] = r.time.mean_us;
  }
  for (RatioRow& rr : out) {
    const auto& t = times[{static_cast<int>(rr.dtype), rr.bytes}];
    auto ref = t.find(reference);
    for (tpsBackend_t b : backends) {
      auto it = t.find(b);
      const bool ok = it != t.end() && ref != t.end() && ref->second > 0;
      rr.ratio.push_back(ok ? std::optional<double>(it->second / ref->second) : std::nullopt);
      if (it != t.end() && (!rr.fastest || it->second < t.at(*rr.fastest))) rr.fastest = b;
    }
  }
  return out;
}

std::string formatRatios(const std::vector<RatioRow>& ratios, const std::vector<tpsBackend_t>& backends,
                         tpsBackend_t reference) {
  std::string s = fmt::format("# Time ratios: each backend's time(us) / {}'s (below 1: faster), and the fastest\n",
                              benchBackendName(reference));
  s += fmt::format("#{:>12} {:>8}", "size(B)", "type");
  for (tpsBackend_t b : backends) s += fmt::format(" {:>9}", benchBackendName(b));
  s += fmt::format(" {:>9}\n", "fastest");
  for (const RatioRow& r : ratios) {
    s += fmt::format("#{:>12} {:>8}", r.bytes, tpsDataTypeName(r.dtype));
    for (const auto& v : r.ratio) s += fmt::format(" {:>9}", v ? fmt::format("{:.3f}", *v) : "N/A");
    s += fmt::format(" {:>9}\n", r.fastest ? benchBackendName(*r.fastest) : "N/A");
  }
  return s;
}

std::string formatWireRatios(const std::vector<BenchRow>& rows) {
  std::string s;
  for (const BenchRow& w : rows) {
    if (w.procs || w.wire == "exact") continue;
    auto e = std::find_if(rows.begin(), rows.end(), [&](const BenchRow& r) {
      return !r.procs && r.wire == "exact" && r.backend == w.backend && r.dtype == w.dtype && r.count == w.count;
    });
    if (e == rows.end()) continue;
    if (s.empty())
      s = fmt::format(
          "# Wires against the exact wire: time(us) over exact's (below 1: faster), payload algbw over exact's,\n"
          "# host bytes per call over exact's, and the relative RMS error\n"
          "#{:>12} {:>8} {:>7} {:>6} {:>16} {:>9} {:>9} {:>9} {:>9}\n",
          "size(B)", "type", "backend", "wire", "path", "time", "algbw", "bytes", "rel_rms");
    auto ratio = [](double a, double b) { return b > 0 ? fmt::format("{:.3f}", a / b) : std::string("N/A"); };
    const double wb = w.bytes_per_call ? w.bytes_per_call->host_tx : 0;
    const double eb = e->bytes_per_call ? e->bytes_per_call->host_tx : 0;
    s += fmt::format("#{:>12} {:>8} {:>7} {:>6} {:>16} {:>9} {:>9} {:>9} {:>9}\n", w.bytes(), tpsDataTypeName(w.dtype),
                     benchBackendName(w.backend), w.wire, w.path, ratio(w.time.mean_us, e->time.mean_us),
                     ratio(w.algbw_gbps, e->algbw_gbps), wb > 0 ? ratio(wb, eb) : std::string("N/A"),
                     errorText(w.check ? w.check->rel_rms : std::nullopt));
  }
  return s;
}

std::string formatProcsRatios(const std::vector<BenchRow>& rows) {
  std::string s;
  for (const BenchRow& p : rows) {
    if (!p.procs) continue;
    auto t = std::find_if(rows.begin(), rows.end(), [&](const BenchRow& r) {
      return !r.procs && r.backend == p.backend && r.dtype == p.dtype && r.count == p.count;
    });
    if (s.empty())
      s = fmt::format(
          "# Processes vs threads: time(us) with a process per rank / with every rank in this process\n"
          "#{:>12} {:>8} {:>7} {:>11} {:>11} {:>13}\n",
          "size(B)", "type", "backend", "threads(us)", "procs(us)", "procs/threads");
    const bool ok = t != rows.end() && t->time.mean_us > 0;
    s += fmt::format("#{:>12} {:>8} {:>7} {:>11} {:>11} {:>13}\n", p.bytes(), tpsDataTypeName(p.dtype),
                     benchBackendName(p.backend), t != rows.end() ? timeText(t->time.mean_us) : "N/A",
                     timeText(p.time.mean_us), ok ? fmt::format("{:.3f}", p.time.mean_us / t->time.mean_us) : "N/A");
  }
  return s;
}

nlohmann::json rowJson(const BenchRow& r) {
  using nlohmann::json;
  json j = {{"backend", benchBackendName(r.backend)},
            {"wire", r.wire},
            {"ranks", r.procs ? "procs" : "threads"},
            {"path", r.path},
            {"mode", r.graph ? "graph" : "eager"},
            {"op", "sum"},
            {"dtype", tpsDataTypeName(r.dtype)},
            {"size_bytes", r.bytes()},
            {"count", r.count},
            {"calls", r.calls},
            {"time_us", r.time.mean_us},
            {"min_us", r.time.min_us},
            {"median_us", r.time.median_us},
            {"max_us", r.time.max_us},
            {"algbw_gbps", r.algbw_gbps},
            {"busbw_gbps", r.busbw_gbps},
            {"n_wrong", r.check ? json(r.check->wrong) : json(nullptr)},
            {"n_out_of_tolerance", r.check ? json(r.check->out_of_tolerance) : json(nullptr)},
            {"n_not_bit_identical", r.check ? json(r.check->not_identical) : json(nullptr)},
            {"rel_rms_error", r.check && r.check->rel_rms ? json(*r.check->rel_rms) : json(nullptr)},
            {"rel_max_abs_error", r.check && r.check->rel_max ? json(*r.check->rel_max) : json(nullptr)},
            {"bytes_per_call", nullptr},
            {"metered_bytes_per_call", nullptr}};
  if (r.metered) {
    auto v = [](const std::optional<double>& x) { return x ? json(*x) : json(nullptr); };
    j["metered_bytes_per_call"] = {{"pcie_tx", v(r.metered->pcie_tx)},
                                   {"pcie_rx", v(r.metered->pcie_rx)},
                                   {"nvlink_tx", v(r.metered->nvlink_tx)},
                                   {"nvlink_rx", v(r.metered->nvlink_rx)}};
  }
  if (r.bytes_per_call) {
    const MediumBytes& b = *r.bytes_per_call;
    j["bytes_per_call"] = {{"host_tx", b.host_tx}, {"host_rx", b.host_rx}, {"peer_tx", b.peer_tx},
                           {"peer_rx", b.peer_rx}, {"nccl_tx", b.nccl_tx}, {"nccl_rx", b.nccl_rx}};
  }
  return j;
}

nlohmann::json benchDocument(const BenchContext& ctx, const std::vector<BenchRow>& rows, const std::string& error) {
  using nlohmann::json;
  const BenchOptions& o = ctx.options;
  auto orNull = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json devices = json::array();
  for (const DeviceEntry& d : ctx.devices)
    devices.push_back({{"rank", d.rank}, {"device", d.device}, {"bus_id", d.bus_id}, {"name", d.name}});
  json env = json::object();
  for (const auto& [k, v] : ctx.env) env[k] = v;
  json backends = json::array(), dtypes = json::array(), wires = json::array();
  for (tpsBackend_t b : o.backends) backends.push_back(benchBackendName(b));
  for (tpsWire_t w : o.wires)
    wires.push_back(o.wires_given || !ctx.communicator
                        ? wireLabel(w)
                        : wireLabel(ctx.communicator->wire, ctx.communicator->wire_error_budget));
  for (tpsDataType_t t : o.dtypes) dtypes.push_back(tpsDataTypeName(t));
  json context = {{"tool", "tpscope bench allreduce"},
                  {"version", ctx.version},
                  {"git_sha", ctx.git_sha},
                  {"argv", ctx.argv},
                  {"hostname", ctx.hostname},
                  {"pid", ctx.pid},
                  {"start_time", ctx.start_time},
                  {"devices", devices},
                  {"driver_version", orNull(ctx.driver_version)},
                  {"cuda_driver_version", ctx.cuda_driver_version},
                  {"cuda_runtime_version", ctx.cuda_runtime_version},
                  {"nccl_version", orNull(ctx.nccl_version)},
                  {"env", env},
                  {"communicator", communicatorJson(ctx.communicator)},
                  {"procs", o.procs > 0 ? json(o.procs) : json(nullptr)},
                  {"procs_devices", o.procs > 0 ? json(ctx.procs_devices) : json(nullptr)},
                  {"pinned_d2h_gbps", ctx.pinned_d2h_gbps ? json(*ctx.pinned_d2h_gbps) : json(nullptr)},
                  {"pinned_h2d_gbps", ctx.pinned_h2d_gbps ? json(*ctx.pinned_h2d_gbps) : json(nullptr)},
                  {"timer", "cuda events"},
                  {"warmup_iters", o.warmup_iters},
                  {"iters", o.iters},
                  {"graph", o.graph},
                  {"graph_replays", o.graph ? json(o.graph_replays) : json(nullptr)},
                  {"check", o.check},
                  {"backends", backends},
                  {"wires", wires},
                  {"dtypes", dtypes},
                  {"sweep",
                   {{"min_bytes", o.sweep.min_bytes},
                    {"max_bytes", o.sweep.max_bytes},
                    {"step_factor", o.sweep.step_factor},
                    {"step_bytes", o.sweep.step_bytes}}}};
  if (ctx.nccl_symm.requested) context["nccl_symm"] = ncclSymmJson(ctx.nccl_symm);
  json results = json::array();
  for (const BenchRow& r : rows) results.push_back(rowJson(r));
  return {{"json_schema_version", 1}, {"context", context}, {"results", results}, {"error", orNull(error)}};
}

}  // namespace tpscope::cli
