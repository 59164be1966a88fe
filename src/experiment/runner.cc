// SPDX-License-Identifier: Apache-2.0
// runner.cc - guards, quiescing with retries, phases under the meter, the run folder, the report.
#include "experiment/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "allreduce/wire.h"
#include "experiment/report_render.h"
#include "meter/record.h"

namespace tpscope::experiment {

namespace {

// Why the window after the phases shows someone else's traffic (a PCIe rate above the baseline
// threshold on any GPU), or "" when it does not.
std::string trafficAfter(const MeterWindow& w, const std::vector<MeterGpu>& gpus, double threshold_mbps) {
  for (size_t g = 0; g < w.cells.size(); ++g)
    for (MeterCounter k : {MeterCounter::kPcieRx, MeterCounter::kPcieTx})
      if (const std::optional<double> rate = w.cells[g][static_cast<int>(k)].mean_mbps; rate && *rate > threshold_mbps)
        return fmt::format(
            "traffic went on after the phases ended: GPU {} {} {:.0f} MB/s over {:.1f} s (threshold {:g} "
            "MB/s)",
            gpus[g].index, meterCounterName(k), *rate, (w.end_ns - w.start_ns) * 1e-9, threshold_mbps);
  return "";
}

// While alive, watches RunnerConfig::interrupt and calls phases.interrupt() once it is set, so that an
// engine's long call (a server's start or request) ends soon after the run is asked to stop.
class InterruptWatch {
 public:
  InterruptWatch(const RunnerConfig& c, ArmPhases& phases) {
    if (!c.interrupt) return;
    const std::atomic<int>* flag = c.interrupt;
    thread_ = std::thread([this, flag, &phases] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!done_) {
        if (flag->load() != 0) {
          phases.interrupt();
          return;
        }
        cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
    });
  }
  ~InterruptWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

void say(const RunnerConfig& c, const std::string& line) {
  if (c.progress) *c.progress << line << "\n" << std::flush;
}

// The highest idle rate any counter showed, for the progress line.
double highestIdle(const QuiesceRecord& q) {
  double m = 0;
  for (const auto& gpu : q.idle_mbps)
    for (const auto& v : gpu)
      if (v) m = std::max(m, *v);
  return m;
}

// Starts every arm's engine once (ArmPhases::prepare, then destroyed: a server stops) and adds what
// each reported about itself to that arm's settings. false with out->message when one cannot start.
bool probeEngines(const RunnerConfig& c, std::vector<EffectiveSettings>* arms, RunOutcome* out) {
  for (EffectiveSettings& arm : *arms) {
    say(c, fmt::format("arm {}: starting the engine to read what it decides ...", arm.arm));
    std::unique_ptr<ArmPhases> phases = c.make_phases(arm);
    std::vector<Setting> reported;
    std::string reason;
    if (!phases) {
      out->message = "arm " + arm.arm + ": no engine for it";
      return false;
    }
    tpsResult_t prepared;
    {
      InterruptWatch watch(c, *phases);
      prepared = phases->prepare(arm, &reported, &reason);
    }
    if (prepared != tpsSuccess) {
      out->message = "arm " + arm.arm + ": " + (phases ? reason : "no engine for it");
      return false;
    }
    for (const Setting& s : reported) arm.set(s);
  }
  return true;
}

// After a repetition's phases: a meter window for each phase the engine did not mark itself, the meter
// stopped, the window after the phases judged (`tail`), and each phase's record with its traffic.
// *summary gets the progress line's tok/s figures.
void recordPhases(const std::vector<PhaseOutcome>& outcomes, bool tail, double threshold_mbps, Meter& meter,
                  RepetitionResult* r, std::string* summary) {
  auto sameWindow = [](const MeterWindow& w, const PhaseOutcome& o) {
    return w.name == o.phase && w.start_ns == o.start_ns && w.end_ns == o.end_ns;
  };
  const std::vector<MeterWindow> marked = meter.windows();
  for (const PhaseOutcome& o : outcomes)
    if (std::none_of(marked.begin(), marked.end(), [&](const MeterWindow& w) { return sameWindow(w, o); }))
      meter.addWindow(o.phase, o.start_ns, o.end_ns);
  meter.stop();
  const std::vector<MeterWindow> windows = meter.windows();
  if (tail && r->disturbed.empty())
    for (const MeterWindow& w : windows)
      if (w.name == "after") r->disturbed = trafficAfter(w, meter.gpus(), threshold_mbps);
  // With a source that records per interval (PM): one decode step record by record, beside the
  // library's calls in it.
  const std::vector<MeterRecord> records = meter.records();
  for (const PhaseOutcome& o : outcomes) {
    std::vector<GpuTraffic> traffic;
    for (const MeterWindow& w : windows)
      if (sameWindow(w, o)) {
        traffic = trafficFromWindow(w, meter.gpus());
        break;
      }
    r->phases.push_back(makePhaseResult(o, traffic));
    if (!records.empty() && o.phase == "decode")
      r->phases.back().pm_step = pmStepFromSamples(o.start_ns, o.end_ns, o.steps, o.allreduce, records, meter.gpus(),
                                                   meter.options().pm_interval_us);
    *summary += fmt::format(" {} {:.1f} tok/s", o.phase, r->phases.back().tok_s);
  }
}

// 1. The guards, before anything runs: false with *out refused when arms differ in what they do not
// declare, or ask for what this build or box cannot run. With run_what_fits, arms refused only for
// naming a GPU beyond the box's count leave *arms (into out->left_out) while some other arm can run.
bool passGuards(std::vector<EffectiveSettings>* arms, const Availability& box, bool run_what_fits, RunOutcome* out) {
  if (const std::vector<Difference> diffs = undeclaredDifferences(*arms); !diffs.empty()) {
    out->status = RunOutcome::Status::kRefused;
    out->message = "the arms differ in settings no arm declares; nothing was run\n" + formatDifferences(diffs);
    return false;
  }
  const std::vector<Refusal> refused = checkAvailability(*arms, box);
  const bool only_gpus =
      std::all_of(refused.begin(), refused.end(), [](const Refusal& r) { return r.needs_more_gpus; });
  if (!refused.empty() && run_what_fits && only_gpus && refused.size() < arms->size()) {
    out->left_out = refused;
    arms->erase(std::remove_if(arms->begin(), arms->end(),
                               [&](const EffectiveSettings& e) {
                                 return std::any_of(refused.begin(), refused.end(),
                                                    [&](const Refusal& r) { return r.arm == e.arm; });
                               }),
                arms->end());
    return true;
  }
  if (!refused.empty()) {
    out->status = RunOutcome::Status::kRefused;
    out->message = "arms this build or box cannot run; nothing was run\n";
    for (const Refusal& r : refused) out->message += fmt::format("arm {}: {}\n", r.arm, r.reason);
    return false;
  }
  return true;
}

// Why `was` (a run folder's arm, as its manifest records it) is not `now` (the same arm as this build
// and box make it), or "" when every setting of `now` has the recorded value. Settings an engine
// reported once started are compared only when `now` has them (after the probe).
std::string settingsDiffer(const EffectiveSettings& was, const EffectiveSettings& now) {
  for (const Setting& s : now.settings) {
    const Setting* w = was.find(s.key);
    if (!w) return fmt::format("arm {}: {} = {} here, not set when the run started", now.arm, s.key, s.value);
    if (w->value != s.value)
      return fmt::format("arm {}: {} = {} here, {} when the run started", now.arm, s.key, s.value, w->value);
  }
  return "";
}

// Why the run folder being resumed is not this run (its arms, their settings, tpscope's build, the
// machine), or "".
std::string notTheSameRun(const Manifest& was, const RunnerConfig& c, const std::vector<EffectiveSettings>& arms) {
  std::vector<std::string> names;
  for (const EffectiveSettings& e : arms) names.push_back(e.arm);
  if (names != was.arms)
    return fmt::format("its arms are {}, this spec and box run {}", fmt::join(was.arms, ", "), fmt::join(names, ", "));
  for (const EffectiveSettings& now : arms)
    for (const EffectiveSettings& e : was.effective)
      if (e.arm == now.arm)
        if (const std::string d = settingsDiffer(e, now); !d.empty()) return d;
  for (const auto& [key, value] : c.versions.items())
    if (was.versions.contains(key) && was.versions.at(key) != value)
      return fmt::format("it was started by {} {}, this is {}", key, was.versions.at(key).dump(), value.dump());
  for (const char* key : {"description", "hostname", "gpus"})
    if (was.machine.contains(key) && c.machine.contains(key) && was.machine.at(key) != c.machine.at(key))
      return fmt::format("it was started on {}, this machine is {}", was.machine.at(key).dump(),
                         c.machine.at(key).dump());
  return "";
}

Manifest manifestOf(const RunnerConfig& c, const std::vector<EffectiveSettings>& arms) {
  const ExperimentSpec& spec = c.spec;
  Manifest m;
  m.spec_path = spec.source;
  m.spec_toml = spec.text;
  m.experiment = spec.name;
  for (const EffectiveSettings& a : arms) m.arms.push_back(a.arm);  // the arms that run, in the spec's order
  m.phases = spec.shared.phases;
  m.effective = arms;
  m.versions = c.versions;
  m.topology = c.topology;
  m.machine = c.machine;
  m.invocation = c.invocation;
  m.start_time = isoTimeUtc();
  return m;
}

// 2b. Engines that know their settings only once started: each arm's is started once, what they report
// is added to the arms' settings and the manifest, and the guards compare again. false with *out set.
bool probeAndCompare(const RunnerConfig& c, std::vector<EffectiveSettings>* arms, Manifest* m, RunWriter& writer,
                     RunOutcome* out) {
  if (!probeEngines(c, arms, out)) return false;
  if (!c.resume) m->effective = *arms;
  try {
    writer.rewrite(*m);
  } catch (const std::exception& e) {
    out->message = e.what();
    return false;
  }
  if (const std::vector<Difference> diffs = undeclaredDifferences(*arms); !diffs.empty()) {
    out->status = RunOutcome::Status::kRefused;
    out->message = "the arms' engines decided differently in settings no arm declares; nothing was measured\n" +
                   formatDifferences(diffs);
    return false;
  }
  if (c.resume)
    if (const std::string d = notTheSameRun(c.resume->manifest, c, *arms); !d.empty()) {
      out->status = RunOutcome::Status::kRefused;
      out->message =
          fmt::format("{} is not the run this spec, build and box make ({}); nothing was run\n", c.out_dir, d);
      return false;
    }
  return true;
}

// An arm's workload prepared, its decisions checked against what the guards saw. false with out->message.
bool prepareArm(const RunnerConfig& c, const EffectiveSettings& arm, ArmPhases& phases, RunOutcome* out) {
  say(c, fmt::format("arm {}: preparing ({} split on GPU {}, backend {})", arm.arm, arm.value("split"),
                     arm.value("devices"), arm.value("allreduce_backend")));
  std::vector<Setting> decisions;
  std::string reason;
  tpsResult_t prepared;
  {
    InterruptWatch watch(c, phases);
    prepared = phases.prepare(arm, &decisions, &reason);
  }
  if (prepared != tpsSuccess) {
    out->message = "arm " + arm.arm + ": " + reason;
    return false;
  }
  // A decision the workload makes now must be the one the guards saw (an undeclared difference otherwise).
  for (const Setting& d : decisions)
    if (const Setting* s = arm.find(d.key); s && s->value != d.value) {
      out->message = fmt::format(
          "arm {}: the workload decided {} = {} where the guards saw {}; the arms would no "
          "longer be one condition apart",
          arm.arm, d.key, d.value, s->value);
      return false;
    }
  return true;
}

// What a resumed run folder holds of one repetition: whether an attempt was valid, how many were made.
struct Recorded {
  bool valid = false;
  int attempts = 0;
};
using RecordedReps = std::map<std::pair<std::string, int>, Recorded>;  // by (arm, repetition)

// What every repetition of the run shares.
struct RunContext {
  const RunnerConfig& c;
  MeterFactory start_meter;
  QuiesceFn quiesce;
  RunWriter& writer;
  RunOutcome& out;
  RecordedReps recorded;  // a resumed folder's repetitions
};

bool interrupted(const RunnerConfig& c) { return c.interrupt && c.interrupt->load() != 0; }

enum class Attempt { kValid, kRetry, kAbort, kInterrupted };

// 3b. One attempt at repetition `rep` of an arm: a meter on its GPUs, the quiesce baseline, the phases under
// the meter, the tail, all recorded. kRetry: the baseline failed or the run was disturbed (recorded as
// invalid); kAbort: out.message says why the run stops.
Attempt runAttempt(RunContext& x, const EffectiveSettings& arm, ArmPhases& phases, const QuiesceOptions& qo, int rep,
                   int attempt) {
  const RunnerConfig& c = x.c;
  const SharedSettings& sh = c.spec.shared;
  if (interrupted(c)) return Attempt::kInterrupted;
  MeterOptions mo;
  // Each GPU once: positions that share a GPU (tensor split on devices 0,0) share its counters, and a
  // GPU holds one PM session only.
  for (int d : arm.devices())
    if (std::find(mo.devices.begin(), mo.devices.end(), d) == mo.devices.end()) mo.devices.push_back(d);
  mo.period_us = static_cast<int64_t>(sh.meter_period_ms * 1000 + 0.5);
  mo.idle_period_us = std::max(mo.period_us, static_cast<int64_t>(sh.meter_idle_period_ms * 1000 + 0.5));
  mo.sources = parseMeterSources(sh.meter_source, nullptr).value_or(std::vector<std::string>{"nvml"});
  mo.pm_interval_us = sh.pm_interval_us;
  // The dmon figure beside NVML's counters, same windows. Not without NVML: the meter would make the
  // dmon calls (NVML calls that cross PCIe themselves) without NVML's calibration, so their traffic
  // would land uncounted in the other sources' figures, and "NVML is not read" would no longer hold.
  if (std::find(mo.sources.begin(), mo.sources.end(), "nvml") != mo.sources.end()) mo.sources.push_back("dmon");
  std::unique_ptr<Meter> meter;
  std::string reason;
  if (x.start_meter(mo, &meter, &reason) != tpsSuccess) {
    x.out.message = "arm " + arm.arm + ": the meter did not start: " + reason;
    return Attempt::kAbort;
  }
  const std::string tag = fmt::format("arm {} rep {}/{}{}", arm.arm, rep + 1, sh.repetitions,
                                      attempt ? fmt::format(" (retry {})", attempt) : "");
  say(c, fmt::format("{}: quiescing {:g} s ...", tag, sh.idle_seconds));
  RepetitionResult r;
  r.arm = arm.arm;
  r.repetition = rep;
  r.attempt = attempt;
  r.devices.clear();
  for (const MeterGpu& g : meter->gpus()) r.devices.push_back(g.index);
  r.meter = {{"options", toJson(meter->options())}, {"calibration", toJson(meter->calibration(), meter->gpus())}};
  if (x.quiesce(*meter, qo, &r.quiesce) != tpsSuccess) {
    x.out.message = "arm " + arm.arm + ": quiescing failed: " + r.quiesce.reason;
    return Attempt::kAbort;
  }
  if (interrupted(c)) return Attempt::kInterrupted;  // the baseline alone is no attempt
  ++x.out.attempts;
  if (!r.quiesce.passed) {
    r.valid = false;
    meter->stop();
    x.writer.append(r);
    ++x.out.failed_attempts;
    say(c, fmt::format("{}: baseline failed ({}){}", tag, r.quiesce.reason,
                       attempt < sh.baseline_retries ? "; retrying" : "; reported as failed"));
    return Attempt::kRetry;
  }
  std::vector<PhaseOutcome> outcomes;
  phases.useMeter(meter.get());
  tpsResult_t ran;
  {
    InterruptWatch watch(c, phases);
    ran = phases.runPhases(sh.phases, &outcomes, &reason);
  }
  phases.useMeter(nullptr);
  if (ran != tpsSuccess) {
    // A Ctrl-C from the terminal reaches the engine's processes too (a server in tpscope's process group
    // stops): the attempt then failed because the run was stopped, and nothing of it is recorded.
    if (interrupted(c)) return Attempt::kInterrupted;
    x.out.message = fmt::format("{}: {}", tag, reason);
    return Attempt::kAbort;
  }
  for (const PhaseOutcome& o : outcomes)
    if (!o.disturbed.empty() && r.disturbed.empty()) r.disturbed = o.disturbed;
  if (c.tail_seconds > 0 && !outcomes.empty()) {
    // Traffic that goes on after the rig's work ended is someone else's (the study's quiescing lesson).
    int64_t end = 0;
    for (const PhaseOutcome& o : outcomes) end = std::max(end, o.end_ns);
    std::this_thread::sleep_for(std::chrono::duration<double>(c.tail_seconds));
    (void)meter->addWindow("after", end, Meter::now());
  }
  std::string summary;
  recordPhases(outcomes, c.tail_seconds > 0, sh.baseline_threshold_mbps, *meter, &r, &summary);
  r.valid = r.disturbed.empty();
  // The samples first: the results line is what makes the attempt count (a resume runs again an attempt
  // whose line is missing), so a results line always has its samples beside it.
  x.writer.append(rowsFromSamples(arm.arm, rep, meter->samples(), meter->gpus()));
  x.writer.append(r);
  if (!r.valid) {
    ++x.out.failed_attempts;
    say(c, fmt::format("{}: disturbed ({}){}", tag, r.disturbed,
                       attempt < sh.baseline_retries ? "; retrying" : "; reported as failed"));
    return Attempt::kRetry;
  }
  say(c, fmt::format("{}: baseline {:.0f} MB/s max ...{}", tag, highestIdle(r.quiesce), summary));
  return Attempt::kValid;
}

// 3. One arm: prepared once, then each repetition with up to baseline_retries retries; a repetition a
// resumed folder finished is skipped, one it began goes on from its next attempt. false when the run
// stops (out.message says why, or out.status is kInterrupted).
bool runArm(RunContext& x, const EffectiveSettings& arm, const QuiesceOptions& qo) {
  const SharedSettings& sh = x.c.spec.shared;
  std::vector<std::pair<int, int>> todo;  // (repetition, first attempt)
  for (int rep = 0; rep < sh.repetitions; ++rep) {
    const Recorded r = x.recorded.count({arm.arm, rep}) ? x.recorded.at({arm.arm, rep}) : Recorded{};
    if (r.valid || r.attempts > sh.baseline_retries)
      ++x.out.skipped_repetitions;
    else
      todo.emplace_back(rep, r.attempts);
  }
  if (todo.empty()) {
    say(x.c, fmt::format("arm {}: every repetition is recorded already", arm.arm));
    return true;
  }
  if (interrupted(x.c)) {
    x.out.status = RunOutcome::Status::kInterrupted;
    return false;
  }
  std::unique_ptr<ArmPhases> phases = x.c.make_phases(arm);
  if (!phases) {
    x.out.message = "arm " + arm.arm + ": no workload for it";
    return false;
  }
  if (!prepareArm(x.c, arm, *phases, &x.out)) {
    if (interrupted(x.c)) x.out.status = RunOutcome::Status::kInterrupted;  // as in runAttempt
    return false;
  }
  QuiesceOptions arm_qo = qo;
  arm_qo.own_pids = phases->processes();
  for (const auto& [rep, first] : todo) {
    bool done = false;
    for (int attempt = first; attempt <= sh.baseline_retries && !done; ++attempt) {
      const Attempt a = runAttempt(x, arm, *phases, arm_qo, rep, attempt);
      if (a == Attempt::kInterrupted) x.out.status = RunOutcome::Status::kInterrupted;
      if (a == Attempt::kAbort || a == Attempt::kInterrupted) return false;
      done = a == Attempt::kValid;
    }
    if (!done) ++x.out.failed_repetitions;
  }
  return true;
}

}  // namespace

ExperimentSpec quickSpec(ExperimentSpec spec) {
  SharedSettings& s = spec.shared;
  s.repetitions = std::min(s.repetitions, 2);
  s.idle_seconds = std::min(s.idle_seconds, 2.0);
  s.prompt_tokens = std::min(s.prompt_tokens, 1024);
  s.decode_tokens = std::min(s.decode_tokens, 64);
  s.context = std::min(s.context, 4096);
  return spec;
}

RunOutcome runExperiment(const RunnerConfig& c) {
  RunOutcome out;
  if (!c.make_phases) {
    out.message = "no workload to run the arms with";
    return out;
  }
  std::vector<EffectiveSettings> arms = effectiveSettings(c.spec, c.decide);
  if (!passGuards(&arms, c.box, c.run_what_fits, &out)) return out;

  // 2. The run folder: the manifest first; a resumed one must record this run, and keeps its manifest
  // (with this continuation added to its invocation).
  Manifest m = manifestOf(c, arms);
  if (!out.left_out.empty()) {
    nlohmann::json left = nlohmann::json::array();
    for (const Refusal& r : out.left_out) left.push_back({{"arm", r.arm}, {"reason", r.reason}});
    m.invocation["left_out"] = left;
  }
  RecordedReps recorded;
  if (c.resume) {
    if (const std::string d = notTheSameRun(c.resume->manifest, c, arms); !d.empty()) {
      out.status = RunOutcome::Status::kRefused;
      out.message =
          fmt::format("{} is not the run this spec, build and box make ({}); nothing was run\n", c.out_dir, d);
      return out;
    }
    nlohmann::json invocation = c.resume->manifest.invocation;
    if (!invocation.is_object()) invocation = nlohmann::json::object();
    if (!invocation.contains("resumed") || !invocation["resumed"].is_array())
      invocation["resumed"] = nlohmann::json::array();
    invocation["resumed"].push_back({{"time", isoTimeUtc()}, {"argv", c.invocation.value("argv", nlohmann::json())}});
    m = c.resume->manifest;
    m.invocation = invocation;
    for (const RepetitionResult& r : c.resume->repetitions) {
      Recorded& x = recorded[{r.arm, r.repetition}];
      x.valid = x.valid || r.valid;
      x.attempts = std::max(x.attempts, r.attempt + 1);
      ++out.attempts;
      out.failed_attempts += r.valid ? 0 : 1;
    }
    for (const auto& [key, x] : recorded)
      if (!x.valid && x.attempts > c.spec.shared.baseline_retries) ++out.failed_repetitions;
  }
  std::unique_ptr<RunWriter> writer;
  try {
    writer = std::make_unique<RunWriter>(c.out_dir, m, c.resume ? RunWriter::Mode::kContinue : RunWriter::Mode::kNew);
  } catch (const std::exception& e) {
    out.message = e.what();
    return out;
  }
  if (c.probe && !probeAndCompare(c, &arms, &m, *writer, &out)) {
    if (interrupted(c) && out.status == RunOutcome::Status::kFailed) out.status = RunOutcome::Status::kInterrupted;
    return out;
  }

  RunContext x{c,
               c.start_meter ? c.start_meter : MeterFactory(&Meter::start),
               c.quiesce ? c.quiesce : QuiesceFn([](Meter& mt, const QuiesceOptions& o, QuiesceRecord* r) {
                 return mt.quiesce(o, r);
               }),
               *writer,
               out,
               std::move(recorded)};
  QuiesceOptions qo;
  qo.idle_ms = static_cast<int64_t>(c.spec.shared.idle_seconds * 1000 + 0.5);
  qo.threshold_mbps = c.spec.shared.baseline_threshold_mbps;
  qo.check_processes = c.check_processes;
  for (const EffectiveSettings& arm : arms)
    if (!runArm(x, arm, qo)) return out;
  writer.reset();  // flush and close before reading back

  // 4. The report, from the folder as written.
  try {
    const RunRecord run = readRun(c.out_dir);
    out.manifest = run.manifest;
    out.report = buildReport(run);
    out.report_markdown = formatMarkdown(out.report);
  } catch (const std::exception& e) {
    out.message = std::string("the run folder cannot be read back: ") + e.what();
    return out;
  }
  out.status = RunOutcome::Status::kDone;
  return out;
}

namespace {

// A made-up decode output: 256 values, as the arm's wire would carry them through one AllReduce (the
// codec's CPU reference), so that wires differ from the exact arm by a real quantisation error.
std::vector<float> fakeOutput(const std::string& wire) {
  std::vector<float> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i * 37 % 255) - 127) / 64.0f;
  tpscope::detail::WirePolicy policy;
  std::string why;
  if (!tpscope::detail::parseWirePolicy(wire, &policy, &why) || policy.automatic ||
      policy.wire == tpscope::detail::WireCode::kExact)
    return v;
  std::vector<uint8_t> payload(tpscope::detail::wirePayloadBytes(policy.wire, v.size()));
  tpscope::detail::encodeMessage(policy.wire, v.data(), v.size(), payload.data());
  tpscope::detail::decodeMessage(policy.wire, payload.data(), v.size(), v.data());
  return v;
}

class FakeArmPhases : public ArmPhases {
 public:
  FakeArmPhases(const EffectiveSettings& arm, double seconds) : arm_(arm), seconds_(seconds) {}
  tpsResult_t prepare(const EffectiveSettings&, std::vector<Setting>*, std::string*) override { return tpsSuccess; }
  tpsResult_t runPhases(const std::vector<std::string>& phases, std::vector<PhaseOutcome>* out, std::string*) override {
    const int gpus = std::max<int>(1, static_cast<int>(arm_.devices().size()));
    const bool tensor = arm_.value("split") == "tensor";
    const int layers = 32;
    for (const std::string& p : phases) {
      PhaseOutcome o;
      o.phase = p;
      const bool prefill = p == "prefill";
      o.tokens = std::stoll(arm_.value(prefill ? "prompt_tokens" : "decode_tokens"));
      o.steps = prefill ? std::max<int64_t>(1, o.tokens / 512) : o.tokens;
      if (meter_) {
        // Mark the window on the meter as the GPU workload does, and report its edges.
        (void)meter_->begin(p);
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
        (void)meter_->end(p);
        const std::vector<MeterWindow> ws = meter_->windows();
        for (auto w = ws.rbegin(); w != ws.rend(); ++w)
          if (w->name == p) {
            o.start_ns = w->start_ns, o.end_ns = w->end_ns;
            break;
          }
      } else {
        o.start_ns = Meter::now();
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds_));
        o.end_ns = Meter::now();
      }
      if (tensor) {
        PathCalls pc;
        pc.path = arm_.value("allreduce_backend") == "host" ? "host-kernel" : arm_.value("allreduce_backend");
        pc.calls = static_cast<uint64_t>(o.steps) * 2 * layers;
        pc.payload_bytes = pc.calls * 8192;
        pc.tx_bytes.assign(gpus, pc.payload_bytes);
        pc.rx_bytes.assign(gpus, pc.payload_bytes);
        o.allreduce.push_back(pc);
      }
      if (!prefill) o.output = fakeOutput(arm_.value("wire"));
      out->push_back(o);
    }
    return tpsSuccess;
  }

  void useMeter(Meter* meter) override { meter_ = meter; }

 private:
  Meter* meter_ = nullptr;
  EffectiveSettings arm_;
  double seconds_;
};

}  // namespace

std::unique_ptr<ArmPhases> makeFakeArmPhases(const EffectiveSettings& arm, double seconds_per_phase) {
  return std::make_unique<FakeArmPhases>(arm, seconds_per_phase);
}

}  // namespace tpscope::experiment
