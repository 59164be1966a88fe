// SPDX-License-Identifier: Apache-2.0
// meter/meter_command.cc - `tpscope meter`: its options, the meter's start, one of the modes (live,
// wrapped, serving: meter_command.h), then --timeline and --out.
//
// Serving (--serve [ADDR:]PORT, meter_serve.h): the counters at /metrics for Prometheus, alone until
// SIGINT/SIGTERM (exit 0), or while a wrapped command runs.
//
// Signals (meter_signals.h) are counted from before the meter starts until the outputs are written:
// an interrupt at any moment still leaves the summary and --out.
#include "meter/meter_command.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "meter/meter_serve.h"
#include "meter/meter_signals.h"
#include "meter/pm_bursts.h"
#include "meter/record.h"
#include "meter/source.h"

namespace tpscope::cli {

namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// --source, then --method: "counters" keeps the list, "both" adds dmon, "dmon" puts it in NVML's place.
std::vector<std::string> sourcesFor(const std::string& source, const std::string& method) {
  std::string error;
  std::optional<std::vector<std::string>> list = parseMeterSources(source, &error);
  if (!list) throw UsageError("--source " + error);
  auto has = [&](const char* s) { return std::find(list->begin(), list->end(), s) != list->end(); };
  if (method == "dmon") list->erase(std::remove(list->begin(), list->end(), "nvml"), list->end());
  if (method != "counters" && !has("dmon")) list->push_back("dmon");
  return *list;
}

std::string sourcesHelp() {
  std::string out =
      "Where the figures come from, one source or several (comma-separated; the first one's fill "
      "the table, the others stand beside it): ";
  for (const detail::SourceEntry* e : detail::sourceRegistry()) out += std::string(e->name) + " (" + e->help + "), ";
  return out + "or both (nvml,pm)";
}

class MeterCommand : public Command {
 public:
  explicit MeterCommand(CLI::App& app) {
    sub_ = app.add_subcommand("meter",
                              "PCIe and NVLink bytes from the GPUs' counters: live, or per window of a "
                              "wrapped command (tpscope meter [options] -- CMD ARGS)");
    sub_->add_option("-i,--id", devices_, "GPU indices, comma-separated (default: all)");
    sub_->add_option("-d,--delay", args_.delay_ms, "Live mode: interval between rows in ms")
        ->check(CLI::Range(1, 3600000))
        ->capture_default_str();
    sub_->add_option("-o,--options", args_.stamp, "Live mode: prefix rows with T (time), D (date) or DT");
    sub_->add_option("-c,--count", args_.count, "Live mode: rows per GPU, then exit (0: until Ctrl-C)")
        ->check(CLI::NonNegativeNumber);
    sub_->add_option("--method", method_, "counters (byte counters), dmon (nvidia-smi dmon's 20 ms snapshot) or both")
        ->check(CLI::IsMember({"counters", "dmon", "both"}))
        ->capture_default_str();
    sub_->add_option("--source", source_, sourcesHelp())->capture_default_str();
    sub_->add_option("--pm-interval-us", pm_interval_us_, "PM sampling interval in us (10-1000000)")
        ->check(CLI::Range(10, 1000000))
        ->capture_default_str();
    sub_->add_option("--pm-decode-ms", pm_decode_ms_, "How often PM records are decoded off the GPU's buffer, ms")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    sub_->add_option("--timeline", timeline_,
                     "Wrapped mode, with --source pm|both: write each PM record of each window with the burst it "
                     "belongs to (JSONL; the 'command' window only when the command marked none); "
                     "scripts/plot_timeline.py draws it");
    sub_->add_option("--burst-rule", burst_rule_,
                     "With --timeline: which records are a burst, DIRECTION:MBPS:GAP_US (busy above MBPS on tx, rx "
                     "or either, merged across dips shorter than GAP_US)")
        ->capture_default_str();
    sub_->add_flag("--list-pm-metrics", list_pm_,
                   "Print the PM-sampling metrics CUPTI offers on the first GPU of -i (default 0), then exit");
    sub_->add_option("--format", args_.format, "Output format")
        ->check(CLI::IsMember({"table", "csv", "json"}))
        ->capture_default_str();
    sub_->add_option("--period-us", period_us_,
                     "Counter read period per GPU in us while the link moves (default TPSCOPE_METER_PERIOD_US or "
                     "2000); given alone, the period is fixed. NVLink (one field per link, a slow read) is read "
                     "back to back on its own thread");
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
    sub_->add_option("--quiesce", args_.quiesce_ms, "Wrapped mode: first require this many ms of idle GPUs (0: skip)");
    sub_->add_option("--quiesce-mbps", args_.quiesce_mbps, "Idle threshold per counter in MB/s")->capture_default_str();
    sub_->add_option("--serve", serve_,
                     "Serve the counters for Prometheus at http://[ADDR:]PORT/metrics (ADDR default 127.0.0.1; "
                     "0.0.0.0 for every interface); without a command, until SIGINT/SIGTERM");
    sub_->add_option("command", args_.command, "Command to run and measure, after --");
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    if (list_pm_) return listPm();
    MeterOptions o;
    o.sources = sourcesFor(source_, method_);
    o.pm_interval_us = pm_interval_us_;
    o.pm_decode_ms = pm_decode_ms_;
    const bool pm = std::find(o.sources.begin(), o.sources.end(), "pm") != o.sources.end();
    if (!timeline_.empty() && !pm) throw UsageError("--timeline needs --source pm or both: it writes PM's records");
    if (!timeline_.empty() && args_.command.empty()) throw UsageError("--timeline needs a wrapped command (-- CMD)");
    std::string rule_error;
    const std::optional<detail::PmBurstRule> rule = detail::parseBurstRule(burst_rule_, &rule_error);
    if (!rule) throw UsageError("--burst-rule: " + rule_error);
    o.devices = parseDeviceList(devices_, "-i");
    o.period_us = period_us_;
    o.idle_period_us = idle_period_us_;
    o.calibrate = !no_calibrate_;
    o.nvlink = !no_nvlink_;
    o.nvlink_raw = nvlink_raw_;
    o.dmon_period_ms = args_.command.empty() ? args_.delay_ms : dmon_period_ms_;
    if (!args_.stamp.empty() && args_.stamp.find_first_not_of("TDtd") != std::string::npos)
      throw UsageError("-o takes T, D or DT, not '" + args_.stamp + "'");
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
      if (args_.command.empty()) o.history_s = 10;
    }

    // Signals are ours from before the meter starts: an interrupt while it calibrates ends the run
    // cleanly like any other.
    MeterSignals signals;
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
    int code = serving && args_.command.empty() ? runServing(*meter)
               : args_.command.empty()          ? runLive(*meter, args_)
                                                : runWrapped(*meter, args_);
    if (server) server->stop();
    if (timeline.is_open()) {
      for (const nlohmann::json& j : timelineJson(meter->windows(), meter->records(), meter->gpus(), *rule))
        timeline << j.dump() << "\n";
      timeline.flush();
      if (!timeline.good()) {
        std::fprintf(stderr, "tpscope: error: writing --timeline %s failed (%s)\n", timeline_.c_str(),
                     std::strerror(errno));
        if (code == kExitOk) code = kExitRuntime;
      }
    }
    if (!out_.empty() && !writeOut(*meter, out, out_windows)) {
      std::fprintf(stderr, "tpscope: error: writing --out %s failed (%s); the summary above is complete\n",
                   out_.c_str(), std::strerror(errno));
      if (code == kExitOk) code = kExitRuntime;
    }
    return code;
  }

 private:
  int listPm() {
    std::vector<int> ids = parseDeviceList(devices_, "-i");
    std::string reason;
    std::vector<std::string> names = detail::listCuptiPmMetrics(ids.empty() ? 0 : ids[0], &reason);
    for (const std::string& n : names) std::printf("%s\n", n.c_str());
    if (!reason.empty()) return fail(kExitRuntime, "cannot list PM metrics: " + reason);
    return kExitOk;
  }

  // Every sample, reading, record, window, quiescing record and cadence line.
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
                           {"command", args_.command}};
    for (const MeterGpu& g : gpus) head["gpus"].push_back(toJson(g));
    out << head.dump() << "\n";
    for (const MeterSample& s : meter.samples()) out << toJson(s, gpus).dump() << "\n";
    for (const MeterDmonSample& d : meter.dmonSamples()) out << toJson(d, gpus).dump() << "\n";
    for (const MeterRecord& p : meter.records()) out << toJson(p, gpus).dump() << "\n";
    for (const MeterWindow& w : meter.windows()) out << toJson(w, gpus, counters).dump() << "\n";
    for (const QuiesceRecord& q : meter.quiesceRecords()) out << toJson(q, gpus).dump() << "\n";
    for (const MeterCadence& c : meter.cadence()) out << toJson(c, gpus).dump() << "\n";
    out.flush();
    return out.good();
  }

  CLI::App* sub_ = nullptr;
  MeterArgs args_;
  std::string devices_, method_ = "counters", out_, source_ = "nvml", timeline_, serve_;
  std::string burst_rule_ = detail::burstRuleText(detail::kStepBurstRule);
  int64_t pm_interval_us_ = 100, pm_decode_ms_ = 50;
  bool list_pm_ = false;
  int64_t period_us_ = 0, idle_period_us_ = 0, dmon_period_ms_ = 1000;
  bool no_calibrate_ = false;
  bool no_nvlink_ = false, nvlink_raw_ = false;
};

}  // namespace

std::unique_ptr<Command> makeMeterCommand(CLI::App& app) { return std::make_unique<MeterCommand>(app); }

}  // namespace tpscope::cli
