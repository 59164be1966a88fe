// SPDX-License-Identifier: Apache-2.0
// meter/meter_command.cc - `tpscope meter`: live mode, and wrapped mode (`tpscope meter [options] -- CMD ARGS`).
//
// Wrapped mode runs CMD with TPSCOPE_METER_PIPE naming a FIFO; CMD marks windows by writing
// `begin NAME` / `end NAME` lines to it (src/meter/control.h). When CMD exits, tpscope prints one
// row per window, GPU and counter, writes --out, and exits with CMD's exit code.
//
// Serving (--serve [ADDR:]PORT, meter_serve.h): the counters at /metrics for Prometheus, alone until
// SIGINT/SIGTERM (exit 0), or while a wrapped command runs.
//
// Signals: SIGINT/SIGTERM set a flag. A terminal's Ctrl-C reaches CMD too (same process group), so
// tpscope only forwards a signal that was sent to it alone (si_code SI_USER: `kill PID`); a second
// one kills CMD. Either way the summary and --out are still written.
#include "meter/meter_command.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "engine/process.h"
#include "meter/control.h"
#include "meter/meter_serve.h"
#include "meter/record.h"
#include "meter/source.h"

namespace tpscope::cli {

namespace {

volatile sig_atomic_t g_interrupts = 0;
volatile pid_t g_child = 0;

void onSignal(int sig, siginfo_t* info, void*) {
  g_interrupts = g_interrupts + 1;
  if (g_child > 0 && info != nullptr && (info->si_code == SI_USER || info->si_code == SI_QUEUE)) kill(g_child, sig);
}

// Installs the handlers for its lifetime. No SA_RESTART: waitpid and sleeps return EINTR.
class SignalScope {
 public:
  SignalScope() {
    g_interrupts = 0;
    struct sigaction sa {};
    sa.sa_sigaction = onSignal;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

std::string clockText(const char* fmt_str) {
  time_t now = time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  char buf[32];
  strftime(buf, sizeof(buf), fmt_str, &local);
  return buf;
}

void warn(const std::string& message) { std::fprintf(stderr, "tpscope: warning: %s\n", message.c_str()); }

bool hasEveryCounter(const MeterSample& s, const MeterGpu& g) {
  for (int c = 0; c < kMeterCounters; ++c)
    if (g.supported[c] && !s.bytes[c]) return false;
  return true;
}

// MB/s of counter c between two Meter::latest() results. Each counter has its own time (PCIe and
// NVLink are read at different cadences); no newer value of c since `a` (a row shorter than
// NVLink's ~22 ms read period) is N/A, and the next row spans from a's value.
// Net of the meter's own reads in between when it is calibrated (Meter::ownBytes).
std::optional<double> rate(const Meter& m, int gpu, const MeterSample& a, const MeterSample& b, MeterCounter c) {
  const int k = static_cast<int>(c);
  if (!a.bytes[k] || !b.bytes[k] || b.t_ns[k] <= a.t_ns[k]) return std::nullopt;
  const double own = m.ownBytes(gpu, c, a.t_ns[k], b.t_ns[k]).value_or(0);
  return (double(*b.bytes[k] - *a.bytes[k]) - own) / ((b.t_ns[k] - a.t_ns[k]) * 1e-9) / 1e6;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class MeterCommand : public Command {
 public:
  explicit MeterCommand(CLI::App& app) {
    sub_ = app.add_subcommand("meter",
                              "PCIe and NVLink bytes from the GPUs' counters: live, or per window of a "
                              "wrapped command (tpscope meter [options] -- CMD ARGS)");
    sub_->add_option("-i,--id", devices_, "GPU indices, comma-separated (default: all)");
    sub_->add_option("-d,--delay", delay_ms_, "Live mode: interval between rows in ms")
        ->check(CLI::Range(1, 3600000))
        ->capture_default_str();
    sub_->add_option("-o,--options", stamp_, "Live mode: prefix rows with T (time), D (date) or DT");
    sub_->add_option("-c,--count", count_, "Live mode: rows per GPU, then exit (0: until Ctrl-C)")
        ->check(CLI::NonNegativeNumber);
    sub_->add_option("--method", method_, "counters (byte counters), dmon (nvidia-smi dmon's 20 ms snapshot) or both")
        ->check(CLI::IsMember({"counters", "dmon", "both"}))
        ->capture_default_str();
    sub_->add_option(
            "--source", source_,
            "Where bytes come from: nvml (cumulative counters), pm (CUPTI PM sampling: the GPU counts PCIe "
            "bytes per interval on its own clock; needs profiling rights) or both (PM and PM/NVML beside NVML)")
        ->check(CLI::IsMember({"nvml", "pm", "both"}))
        ->capture_default_str();
    sub_->add_option("--pm-interval-us", pm_interval_us_, "PM sampling interval in us (10-1000000)")
        ->check(CLI::Range(10, 1000000))
        ->capture_default_str();
    sub_->add_option("--pm-decode-ms", pm_decode_ms_, "How often PM records are decoded off the GPU's buffer, ms")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    sub_->add_option("--timeline", timeline_,
                     "Wrapped mode, with --source pm|both: write each PM record of each window (JSONL; the 'command' "
                     "window only when the command marked none); scripts/plot_timeline.py draws it");
    sub_->add_flag("--list-pm-metrics", list_pm_,
                   "Print the PM-sampling metrics CUPTI offers on the first GPU of -i (default 0), then exit");
    sub_->add_option("--format", format_, "Output format")
        ->check(CLI::IsMember({"table", "csv", "json"}))
        ->capture_default_str();
    sub_->add_option("--period-us", period_us_,
                     "Counter read period per GPU in us while the link moves (default TPSCOPE_METER_PERIOD_US or "
                     "2000); given alone, the period is fixed. NVLink is read back to back on its own thread "
                     "(~22 ms a read on H200)");
    sub_->add_option("--idle-period-us", idle_period_us_,
                     "Read period while the link is quiet (default 25000 with the default period, else the period: "
                     "fixed); each read adds its own PCIe traffic, so quiet links are read seldom")
        ->check(CLI::Range(100, 50000));
    sub_->add_flag("--no-calibrate", no_calibrate_,
                   "Do not measure what the meter's own reads add (figures then include them)");
    sub_->add_flag("--no-nvlink", no_nvlink_, "Do not read NVLink counters (saves a thread per GPU busy in NVML)");
    sub_->add_flag("--nvlink-raw", nvlink_raw_, "Also read NVLink raw counters (data + protocol)");
    sub_->add_option("--dmon-period", dmon_period_ms_, "Wrapped mode: dmon-method period in ms")->capture_default_str();
    sub_->add_option("--out", out_, "Write every sample and window: JSONL, or CSV when the name ends in .csv");
    sub_->add_option("--quiesce", quiesce_ms_, "Wrapped mode: first require this many ms of idle GPUs (0: skip)");
    sub_->add_option("--quiesce-mbps", quiesce_mbps_, "Idle threshold per counter in MB/s")->capture_default_str();
    sub_->add_option("--serve", serve_,
                     "Serve the counters for Prometheus at http://[ADDR:]PORT/metrics (ADDR default 127.0.0.1; "
                     "0.0.0.0 for every interface); without a command, until SIGINT/SIGTERM");
    sub_->add_option("command", command_, "Command to run and measure, after --");
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    if (list_pm_) return listPm();
    MeterOptions o;
    o.source = source_ == "pm" ? MeterSource::kPm : source_ == "both" ? MeterSource::kBoth : MeterSource::kNvml;
    o.pm_interval_us = pm_interval_us_;
    o.pm_decode_ms = pm_decode_ms_;
    if (!timeline_.empty() && o.source == MeterSource::kNvml) throw UsageError("--timeline needs --source pm or both");
    if (!timeline_.empty() && command_.empty()) throw UsageError("--timeline needs a wrapped command (-- CMD)");
    o.devices = parseDeviceList(devices_, "-i");
    o.period_us = period_us_;
    o.idle_period_us = idle_period_us_;
    o.calibrate = !no_calibrate_;
    o.nvlink = !no_nvlink_;
    o.nvlink_raw = nvlink_raw_;
    o.method = method_ == "dmon" ? MeterMethod::kDmon : method_ == "both" ? MeterMethod::kBoth : MeterMethod::kCounters;
    o.dmon_period_ms = command_.empty() ? delay_ms_ : dmon_period_ms_;
    if (!stamp_.empty() && stamp_.find_first_not_of("TDtd") != std::string::npos)
      throw UsageError("-o takes T, D or DT, not '" + stamp_ + "'");
    if (o.nvlink_raw && no_nvlink_) throw UsageError("--nvlink-raw and --no-nvlink contradict each other");

    // Open --out and --timeline before measuring anything, so a bad path costs nothing.
    std::ofstream out, out_windows, timeline;
    if (!timeline_.empty()) {
      timeline.open(timeline_);
      if (!timeline) return fail(kExitRuntime, "cannot write --timeline " + timeline_ + ": " + std::strerror(errno));
    }
    if (!out_.empty()) {
      out.open(out_);
      if (!out) return fail(kExitRuntime, "cannot write --out " + out_ + ": " + std::strerror(errno));
      if (endsWith(out_, ".csv")) {
        const std::string wpath = out_.substr(0, out_.size() - 4) + ".windows.csv";
        out_windows.open(wpath);
        if (!out_windows) return fail(kExitRuntime, "cannot write " + wpath + ": " + std::strerror(errno));
      }
    }

    // Bind before measuring anything, so a port in use costs nothing. Made only when serving: the
    // HTTP server ignores SIGPIPE process-wide, which `tpscope meter | head` must not inherit.
    std::unique_ptr<MetricsServer> server;
    const bool serving = !serve_.empty();
    if (serving) {
      std::string error;
      const std::optional<ServeAddress> address = parseServeAddress(serve_, &error);
      if (!address) throw UsageError(error);
      server = std::make_unique<MetricsServer>();
      if (!server->bind(*address, &error)) return fail(kExitRuntime, error);
      // Serving alone runs for days: keep 10-20 s of samples (~2 MB per GPU at the busy period, for the
      // cadence gauges), not all of them.
      if (command_.empty()) o.history_s = 10;
    }

    // Signals are ours from before the meter starts: an interrupt while it calibrates ends the run
    // cleanly like any other.
    SignalScope signals;
    std::unique_ptr<Meter> meter;
    std::string reason;
    o.fake_gpus = fakeMeterGpus();
    if (const char* script = std::getenv("TPSCOPE_METER_FAKE_SCRIPT"); o.fake_gpus && script) o.fake_script = script;
    tpsResult_t r = Meter::start(o, &meter, &reason);
    if (r == tpsInvalidArgument) return fail(kExitUsage, reason);
    if (r != tpsSuccess) return fail(kExitRuntime, reason);
    if (serving) {
      server->serve(*meter);
      const std::string host =
          serve_.find(':') == std::string::npos ? "127.0.0.1" : serve_.substr(0, serve_.rfind(':'));
      std::fprintf(stderr, "tpscope: serving the meter's counters at http://%s:%d/metrics\n", host.c_str(),
                   server->port());
    }
    int code = serving && command_.empty() ? runServing(*meter)
               : command_.empty()          ? runLive(*meter)
                                           : runWrapped(*meter);
    if (server) server->stop();
    if (timeline.is_open() && !writeTimeline(*meter, timeline)) {
      std::fprintf(stderr, "tpscope: error: writing --timeline %s failed (%s)\n", timeline_.c_str(),
                   std::strerror(errno));
      if (code == kExitOk) code = kExitRuntime;
    }
    if (!out_.empty() && !writeOut(*meter, out, out_windows)) {
      std::fprintf(stderr, "tpscope: error: writing --out %s failed (%s); the summary above is complete\n",
                   out_.c_str(), std::strerror(errno));
      if (code == kExitOk) code = kExitRuntime;
    }
    return code;
  }

 private:
  int runLive(Meter& meter) {
    LiveLayout layout;
    layout.date = stamp_.find_first_of("Dd") != std::string::npos;
    layout.time = stamp_.find_first_of("Tt") != std::string::npos;
    const MeterOptions& o = meter.options();
    layout.counters = o.method != MeterMethod::kDmon;
    layout.nvlink = o.nvlink;
    layout.dmon_beside = o.method == MeterMethod::kBoth;
    const size_t n = meter.gpus().size();
    std::fputs(liveHeader(layout, format_).c_str(), stdout);
    std::fflush(stdout);
    std::vector<std::optional<MeterSample>> prev(n);
    // The first row needs a baseline value of every counter of every GPU (the first NVML reads can
    // take a while; NVLink's ~22 ms on H200).
    for (int i = 0; i < 2000 && layout.counters && g_interrupts == 0; ++i) {
      bool all = true;
      for (size_t k = 0; k < n; ++k) {
        prev[k] = meter.latest(static_cast<int>(k));
        all = all && prev[k] && hasEveryCounter(*prev[k], meter.gpus()[k]);
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int64_t t0 = Meter::now();
    int64_t next = t0;
    for (int row = 0; count_ == 0 || row < count_; ++row) {
      for (size_t k = 0; k < n; ++k)
        if (!prev[k]) prev[k] = meter.latest(static_cast<int>(k));
      next += delay_ms_ * 1000000;
      while (g_interrupts == 0 && Meter::now() < next)
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::min<int64_t>(20, (next - Meter::now()) / 1000000 + 1)));
      if (g_interrupts) break;
      for (size_t k = 0; k < n; ++k) {
        LiveRow lr;
        lr.gpu = meter.gpus()[k].index;
        lr.t_s = (Meter::now() - t0) * 1e-9;
        lr.date = clockText("%Y%m%d");
        lr.time = clockText("%H:%M:%S");
        std::optional<MeterSample> cur = meter.latest(static_cast<int>(k));
        if (layout.counters && prev[k] && cur) {
          lr.rxpci = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kPcieRx);
          lr.txpci = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kPcieTx);
          lr.nvlrx = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kNvlinkRx);
          lr.nvltx = rate(meter, static_cast<int>(k), *prev[k], *cur, MeterCounter::kNvlinkTx);
        }
        if (cur) prev[k] = cur;
        if (o.method != MeterMethod::kCounters) {
          auto rx = meter.latestDmon(static_cast<int>(k), MeterCounter::kPcieRx);
          auto tx = meter.latestDmon(static_cast<int>(k), MeterCounter::kPcieTx);
          std::optional<double> rxd = rx ? rx->mbps : std::nullopt, txd = tx ? tx->mbps : std::nullopt;
          if (layout.counters) {
            lr.rxdmn = rxd;
            lr.txdmn = txd;
          } else {
            lr.rxpci = rxd;
            lr.txpci = txd;
          }
        }
        std::fputs(liveRow(layout, lr, format_).c_str(), stdout);
      }
      std::fflush(stdout);
    }
    meter.stop();
    return kExitOk;
  }

  // --serve without a command: the scrapes are the output; ends at SIGINT/SIGTERM, exit 0.
  int runServing(Meter& meter) {
    while (g_interrupts == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    meter.stop();
    return kExitOk;
  }

  int runWrapped(Meter& meter) {
    MeterSummary summary;
    summary.command = command_;
    if (quiesce_ms_ > 0) {
      QuiesceOptions q;
      q.idle_ms = quiesce_ms_;
      q.threshold_mbps = quiesce_mbps_;
      QuiesceRecord rec;
      if (meter.quiesce(q, &rec) == tpsSuccess && !rec.passed) warn("quiescing failed: " + rec.reason);
    }
    // The protocol's own book: windows take the time their line was read, then go to the meter whole.
    detail::WindowBook book;
    detail::ControlPipe pipe;
    std::string error;
    const bool piped = pipe.open(
        [&](const std::string& line, int64_t t) {
          detail::ControlLine cl = detail::parseControlLine(line);
          std::optional<std::string> err;
          detail::ClosedWindow w;
          if (cl.kind == detail::ControlLine::Kind::kMalformed) err = cl.error;
          if (cl.kind == detail::ControlLine::Kind::kBegin) err = book.begin(cl.name, t);
          if (cl.kind != detail::ControlLine::Kind::kMalformed) meter.readNow();  // read the edge at once
          if (cl.kind == detail::ControlLine::Kind::kEnd) {
            err = book.end(cl.name, t, &w);
            if (!err) meter.addWindow(w.name, w.start_ns, w.end_ns);
          }
          if (err) warn("control pipe: " + *err + " (line '" + line.substr(0, 80) + "'); ignored");
        },
        &error);
    engine::SpawnOptions sp;
    sp.argv = command_;
    sp.inherit_stdio = true;     // CMD is on tpscope's terminal
    sp.die_with_parent = false;  // and outlives it, as a command run by a shell does
    if (piped)
      sp.env.emplace_back("TPSCOPE_METER_PIPE", pipe.path());
    else
      warn(error + "; the command runs without window marks");

    const int64_t t_start = Meter::now();
    meter.readNow();  // the command window's start, read at once
    // Interrupted while quiescing: the user wants out, so CMD does not start.
    const bool run_cmd = g_interrupts == 0;
    std::unique_ptr<engine::ChildProcess> child;
    std::string spawn_error;
    int spawn_err = ECANCELED;
    const bool started = run_cmd && engine::ChildProcess::spawn(sp, &child, &spawn_error, &spawn_err);
    int code = 0;
    if (!run_cmd) {
      code = 128 + SIGINT;
    } else if (!started) {
      fail(kExitRuntime, "cannot run '" + command_[0] + "': " + std::strerror(spawn_err));
      code = spawn_err == ENOENT ? 127 : 126;  // what shells return for "not found" / "cannot execute"
    } else {
      g_child = child->pid();
      int seen = 0;
      while (!child->wait()) {                                           // false: a signal interrupted the wait
        if (g_interrupts >= 2 && seen < 2) kill(child->pid(), SIGKILL);  // a second interrupt: stop for real
        seen = g_interrupts;
      }
      g_child = 0;
      code = child->exitCode();
      summary.exit_code = code;
    }
    const int64_t t_end = Meter::now();
    meter.readNow();
    pipe.close();  // reads what CMD wrote last
    for (const detail::ClosedWindow& w : book.closeAll(t_end)) {
      warn("window '" + w.name + "' was still open when the command ended; closed at its exit");
      meter.addWindow(w.name, w.start_ns, w.end_ns);
    }
    if (started) meter.addWindow("command", t_start, t_end);
    meter.stop();
    summary.interrupted = g_interrupts > 0;
    summary.gpus = meter.gpus();
    summary.options = meter.options();
    summary.windows = meter.windows();
    summary.cadence = meter.cadence();
    summary.quiesce = meter.quiesceRecords();
    summary.calibration = meter.calibration();
    summary.own_mbps = meter.ownMBps();
    summary.pm = meter.pmStatus();
    if (format_ == "json")
      std::printf("%s\n", summaryJson(summary).dump(2).c_str());
    else if (format_ == "csv")
      std::fputs(summaryCsv(summary).c_str(), stdout);
    else
      std::fputs(summaryTable(summary).c_str(), stdout);
    std::fflush(stdout);
    return code;
  }

  int listPm() {
    std::vector<int> ids = parseDeviceList(devices_, "-i");
    std::string reason;
    std::vector<std::string> names = detail::listCuptiPmMetrics(ids.empty() ? 0 : ids[0], &reason);
    for (const std::string& n : names) std::printf("%s\n", n.c_str());
    if (!reason.empty()) return fail(kExitRuntime, "cannot list PM metrics: " + reason);
    return kExitOk;
  }

  // One line per PM record per window it touches: the window, its GPU, the record's times (also
  // relative to the window's start, us) and bytes per direction.
  bool writeTimeline(const Meter& meter, std::ofstream& out) {
    const std::vector<MeterWindow> windows = meter.windows();
    const std::vector<MeterPmSample> samples = meter.pmSamples();
    const bool marked =
        std::any_of(windows.begin(), windows.end(), [](const MeterWindow& w) { return w.name != "command"; });
    for (const MeterWindow& w : windows) {
      if (marked && w.name == "command") continue;
      auto it = std::lower_bound(samples.begin(), samples.end(), w.start_ns,
                                 [](const MeterPmSample& p, int64_t t) { return p.t_end_ns <= t; });
      // Samples are GPU by GPU, each GPU's in time order: search each GPU's run.
      for (size_t k = 0; k < meter.gpus().size(); ++k) {
        auto first =
            std::find_if(samples.begin(), samples.end(), [k](const MeterPmSample& p) { return p.gpu == int(k); });
        auto last = std::find_if(first, samples.end(), [k](const MeterPmSample& p) { return p.gpu != int(k); });
        it = std::lower_bound(first, last, w.start_ns,
                              [](const MeterPmSample& p, int64_t t) { return p.t_end_ns <= t; });
        for (; it != last && it->t_start_ns < w.end_ns; ++it) {
          nlohmann::json j = toJson(*it, meter.gpus());
          j["type"] = "timeline";
          j["window"] = w.name;
          j["repetition"] = w.repetition;
          j["t_us"] = (it->t_start_ns - w.start_ns) * 1e-3;
          j["dur_us"] = (it->t_end_ns - it->t_start_ns) * 1e-3;
          out << j.dump() << "\n";
        }
      }
    }
    out.flush();
    return out.good();
  }

  // Every sample, dmon reading, window, quiescing record and cadence line.
  bool writeOut(const Meter& meter, std::ofstream& out, std::ofstream& out_windows) {
    const std::vector<MeterGpu>& gpus = meter.gpus();
    const std::vector<MeterCounter> counters = reportedCounters(meter.options());
    if (out_windows.is_open()) {
      out << samplesCsvHeader();
      for (const MeterSample& s : meter.samples()) out << toCsv(s, gpus);
      out_windows << windowsCsvHeader();
      for (const MeterWindow& w : meter.windows()) out_windows << toCsv(w, gpus, counters);
      out_windows.flush();
      out.flush();
      return out.good() && out_windows.good();
    }
    nlohmann::json head = {{"type", "meter"},
                           {"options", toJson(meter.options())},
                           {"calibration", toJson(meter.calibration(), gpus)},
                           {"command", command_}};
    for (const MeterGpu& g : gpus) head["gpus"].push_back(toJson(g));
    out << head.dump() << "\n";
    for (const MeterSample& s : meter.samples()) out << toJson(s, gpus).dump() << "\n";
    for (const MeterDmonSample& d : meter.dmonSamples()) out << toJson(d, gpus).dump() << "\n";
    for (const MeterPmSample& p : meter.pmSamples()) out << toJson(p, gpus).dump() << "\n";
    for (const MeterWindow& w : meter.windows()) out << toJson(w, gpus, counters).dump() << "\n";
    for (const QuiesceRecord& q : meter.quiesceRecords()) out << toJson(q, gpus).dump() << "\n";
    for (const MeterCadence& c : meter.cadence()) out << toJson(c, gpus).dump() << "\n";
    out.flush();
    return out.good();
  }

  CLI::App* sub_ = nullptr;
  std::string devices_, stamp_, method_ = "counters", format_ = "table", out_, source_ = "nvml", timeline_, serve_;
  int64_t pm_interval_us_ = 100, pm_decode_ms_ = 50;
  bool list_pm_ = false;
  int64_t delay_ms_ = 1000, count_ = 0, period_us_ = 0, idle_period_us_ = 0, dmon_period_ms_ = 1000, quiesce_ms_ = 0;
  bool no_calibrate_ = false;
  double quiesce_mbps_ = 100;
  bool no_nvlink_ = false, nvlink_raw_ = false;
  std::vector<std::string> command_;
};

}  // namespace

std::unique_ptr<Command> makeMeterCommand(CLI::App& app) { return std::make_unique<MeterCommand>(app); }

}  // namespace tpscope::cli
