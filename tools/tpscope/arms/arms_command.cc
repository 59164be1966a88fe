// SPDX-License-Identifier: Apache-2.0
// arms/arms_command.cc - `tpscope arms SPEC.toml [--out RUN_DIR] [--quick] [--arms A,B]`, `tpscope arms --resume
// RUN_DIR`.
//
// At the end: the report on stdout, plots in RUN_DIR/plots where python3 has matplotlib. What a box
// gets: with the GPUs every arm needs, every arm is measured. With fewer (one GPU, for the four-arm
// study) the arms it can run are measured, and when the spec names a recorded_run (examples/four-arms.toml
// does) the others are shown from that recording beside them, marked recorded with its machine, in one
// report; one line on stderr says which is which; exit 0. Without a recording those arms are refused, as
// is an arm this build cannot run at all. With no GPU at all nothing is measured: one line says so and
// the recording is rendered instead (exit 0), or without one the run is refused (exit 1).
// Ctrl-C (or SIGTERM) stops the run before its next attempt, leaving the folder `--resume` continues
// and `tpscope report` renders; a second one ends tpscope at once.
// Tests: the hidden --fake-workload, together with TPSCOPE_METER_FAKE=1, runs the arms on a fake workload
// (makeFakeArmPhases) and the meter's two scripted GPUs; the hidden --fake-gpus N gives that box N GPUs.
#include "arms/arms_command.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "common/bounded_input.h"
#include "experiment/configure.h"
#include "experiment/report_render.h"
#include "experiment/run_folder.h"
#include "experiment/spec.h"
#include "report/report_command.h"

namespace tpscope::cli {

namespace {

std::atomic<int> g_stop{0};

// The first SIGINT or SIGTERM asks the runner to stop (RunnerConfig::interrupt); the second takes the
// signal's default action, so a run that does not stop soon enough can still be ended.
void onStop(int sig) {
  if (g_stop.fetch_add(1) == 0) {
    static const char kLine[] =
        "\ntpscope arms: stopping after the attempt in progress (interrupt again to end at once)\n";
    (void)!write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

class StopSignals {
 public:
  StopSignals() {
    g_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = onStop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

std::string defaultRunDir(const std::string& experiment) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return "runs/" + experiment + "-" + buf;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

class ArmsCommand : public Command {
 public:
  explicit ArmsCommand(CLI::App& app) {
    sub_ = app.add_subcommand("arms", "Run an experiment spec (arms x repetitions, quiesced and metered) and report");
    sub_->add_option("SPEC", spec_path_, "Experiment spec (TOML), e.g. examples/four-arms.toml");
    sub_->add_option("--out", out_, "Run folder to write (default: runs/NAME-YYYYMMDD-HHMMSS)");
    sub_->add_flag("--quick", quick_, "Fast run: at most 2 repetitions, 2 s idle, 1024 prompt and 64 decode tokens");
    sub_->add_option("--arms", only_, "Run only these arms of the spec, e.g. A,B (default: all)")->delimiter(',');
    sub_->add_option("--resume", resume_,
                     "Continue the interrupted run in RUN_DIR: its spec and options, the repetitions it lacks");
    // For tests: not in --help (group ""), and they need the fake meter.
    sub_->add_flag("--fake-workload", fake_workload_, "Run a fake workload instead of the GPUs (tests)")->group("");
    sub_->add_option("--fake-gpus", fake_gpus_, "GPUs of the fake workload's box (tests)")->group("");
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    experiment::ExperimentSpec spec;
    std::optional<experiment::RunRecord> resumed;
    if (!resume_.empty()) {
      if (quick_ || !only_.empty() || !out_.empty())
        return fail(kExitUsage,
                    "--resume continues a run with the spec, --quick and --arms it was started with and in its own "
                    "folder: give only --resume RUN_DIR (and the SPEC, to check it is the same)");
      if (const int code = readResumed(&spec, &resumed); code != kExitOk) return code;
    } else {
      if (spec_path_.empty())
        return fail(kExitUsage, "arms: give a SPEC (e.g. examples/four-arms.toml) or --resume RUN_DIR");
      try {
        spec = experiment::loadSpec(spec_path_);
      } catch (const experiment::SpecError& e) {
        return fail(kExitUsage, e.what());
      }
      if (quick_) spec = experiment::quickSpec(spec);
    }
    if (!only_.empty())
      if (const int code = keepArms(only_, &spec); code != kExitOk) return code;

    experiment::ConfigureOptions o;
    o.out_dir = !resume_.empty() ? resume_ : out_.empty() ? defaultRunDir(spec.name) : out_;
    o.fake_meter = fakeMeterGpus();
    o.fake_workload = fake_workload_;
    o.fake_gpus = fake_gpus_;
    o.versions = {{"tpscope", tpsGetVersion()}, {"git_sha", tpsGetGitRevision()}};
    o.invocation = {{"argv", processArgv()}, {"quick", quick_}, {"arms", only_}};
    o.progress = &std::cerr;
    experiment::Configuration configured = experiment::configure(spec, o);
    switch (configured.status) {
      case experiment::Configuration::Status::kReady: {
        experiment::RunnerConfig& c = configured.config;
        c.resume = std::move(resumed);
        // With a recording to show for them, arms this box has too few GPUs for leave the run, not stop it.
        recording_ = readRecording(spec.recorded_run);
        c.run_what_fits = recording_.has_value() && !c.resume;
        return runAndReport(c);
      }
      case experiment::Configuration::Status::kNoGpu:
        // Nothing can be measured here: the spec's recording is rendered instead, or the run is refused.
        return spec.recorded_run.empty()
                   ? fail(kExitRuntime, "tpscope arms needs GPUs and this machine has none visible (" +
                                            configured.message +
                                            "); `tpscope report` renders a recorded run folder anywhere")
                   : showRecording(spec.recorded_run, configured.message);
      case experiment::Configuration::Status::kUsage:
      default: return fail(kExitUsage, configured.message);
    }
  }

 private:
  // --resume: the run folder, and the spec as its manifest keeps it, with the options it started with.
  int readResumed(experiment::ExperimentSpec* spec, std::optional<experiment::RunRecord>* resumed) {
    try {
      *resumed = experiment::readRun(resume_);
    } catch (const experiment::RecordError& e) {
      return fail(kExitRuntime, std::string(e.what()) + "; there is no run to resume there");
    }
    for (const std::string& note : (*resumed)->notes) std::cerr << "tpscope arms: " << note << "\n";
    const experiment::Manifest& m = (*resumed)->manifest;
    try {
      *spec = experiment::parseSpecFile(m.spec_toml, m.spec_path);
    } catch (const experiment::SpecError& e) {
      return fail(kExitRuntime,
                  fmt::format("{}/manifest.json keeps a spec that does not parse ({})", resume_, e.what()));
    }
    if (!spec_path_.empty()) {
      std::string text, error;
      if (readRegularFile(spec_path_, experiment::kMaxSpecBytes, &text, &error) != FileReadError::kNone)
        return fail(kExitUsage, error);
      if (text != m.spec_toml)
        return fail(kExitRuntime, fmt::format("{} is not the spec {} was started with ({}); resume it without a SPEC, "
                                              "or start a new run",
                                              spec_path_, resume_, m.spec_path));
    }
    if (m.invocation.is_object() && m.invocation.value("quick", false) == true) *spec = experiment::quickSpec(*spec);
    return keepArms(m.arms, spec);
  }

  // The spec's arms named in `names`, in that order; a name it lacks is a usage error.
  int keepArms(const std::vector<std::string>& names, experiment::ExperimentSpec* spec) {
    std::vector<experiment::ArmSpec> kept;
    for (const std::string& name : names) {
      auto a = std::find_if(spec->arms.begin(), spec->arms.end(),
                            [&](const experiment::ArmSpec& x) { return x.name == name; });
      if (a == spec->arms.end()) {
        std::vector<std::string> known;
        for (const experiment::ArmSpec& x : spec->arms) known.push_back(x.name);
        return fail(kExitUsage, fmt::format("--arms: the spec has no arm \"{}\" (its arms: {})", name, joined(known)));
      }
      kept.push_back(*a);
    }
    spec->arms = kept;
    return kExitOk;
  }

  // The spec's recorded run, read; nullopt where it names none or it cannot be read (the arms this box
  // cannot run are then refused, and the message of a recording that does not read is kept).
  std::optional<experiment::RunRecord> readRecording(const std::string& dir) {
    if (dir.empty()) return std::nullopt;
    try {
      return experiment::readRun(dir);
    } catch (const experiment::RecordError& e) {
      recording_error_ = e.what();
      return std::nullopt;
    }
  }

  int runAndReport(const experiment::RunnerConfig& c) {
    const experiment::ExperimentSpec& spec = c.spec;
    std::cerr << fmt::format("tpscope arms: {} ({} arm{}), run folder {}{}\n", spec.name, spec.arms.size(),
                             spec.arms.size() == 1 ? "" : "s", c.out_dir, c.resume ? ", resumed" : "");
    experiment::RunnerConfig run = c;
    run.interrupt = &g_stop;
    StopSignals signals;
    const experiment::RunOutcome o = experiment::runExperiment(run);
    switch (o.status) {
      case experiment::RunOutcome::Status::kDone: {
        experiment::Report shown = o.report;
        if (!o.left_out.empty()) shown = withRecording(o, c);
        std::cout << experiment::formatMarkdown(shown);
        std::cout.flush();
        std::cerr << fmt::format(
            "tpscope arms: {} attempts, {} failed baselines, {} failed repetitions{}; run folder {}\n", o.attempts,
            o.failed_attempts, o.failed_repetitions,
            o.skipped_repetitions ? fmt::format(", {} repetitions recorded before the resume", o.skipped_repetitions)
                                  : "",
            c.out_dir);
        return writePlots(o.report, c.out_dir, c.out_dir + "/plots");
      }
      case experiment::RunOutcome::Status::kInterrupted:
        std::cerr << fmt::format(
            "tpscope arms: interrupted with {} attempts recorded in {}: continue with `tpscope arms --resume {}`, or "
            "render what there is with `tpscope report {}`\n",
            o.attempts, c.out_dir, c.out_dir, c.out_dir);
        return 128 + SIGINT;
      case experiment::RunOutcome::Status::kRefused: {
        // The table (or the refused arms) first, then the one-line error.
        const size_t nl = o.message.find('\n');
        std::cerr << o.message.substr(nl == std::string::npos ? o.message.size() : nl + 1);
        std::string line = o.message.substr(0, nl);
        if (!recording_error_.empty() && line.rfind("arms this build or box cannot run", 0) == 0)
          line += fmt::format(
              " (the spec's recorded_run, which would show the arms this box cannot run, does not "
              "read: {})",
              recording_error_);
        return fail(kExitRuntime, line);
      }
      case experiment::RunOutcome::Status::kFailed:
      default: return fail(kExitRuntime, o.message);
    }
  }

  // The measured arms' report with the arms left out for want of GPUs shown from the spec's recording,
  // and one line on stderr saying which is which.
  experiment::Report withRecording(const experiment::RunOutcome& o, const experiment::RunnerConfig& c) {
    std::vector<std::string> measured, left, missing;
    for (const experiment::EffectiveSettings& e : o.manifest.effective) measured.push_back(e.arm);
    for (const experiment::Refusal& r : o.left_out) {
      const std::vector<std::string>& has = recording_->manifest.arms;
      (std::find(has.begin(), has.end(), r.arm) != has.end() ? left : missing).push_back(r.arm);
    }
    const experiment::Report shown = experiment::withRecordedArms(o.report, *recording_, left, c.spec.recorded_run);
    auto arms = [](const std::vector<std::string>& names) {
      return fmt::format("arm{} {} {}", names.size() == 1 ? "" : "s", joined(names), names.size() == 1 ? "is" : "are");
    };
    std::cerr << fmt::format(
        "tpscope arms: this box has {} GPU{}: {} measured here{}{}\n", c.box.gpu_count, c.box.gpu_count == 1 ? "" : "s",
        arms(measured),
        left.empty()
            ? ""
            : fmt::format("; {} shown from the recorded run {}, marked recorded", arms(left), shown.recorded_from),
        missing.empty() ? "" : fmt::format("; {} in neither (the recording lacks them)", arms(missing)));
    return shown;
  }

  // No GPU here: the recording the spec names, rendered as `tpscope report` would, plots beside --out
  // (default runs/recorded-NAME/plots, never inside the shipped folder).
  int showRecording(const std::string& dir, const std::string& why) {
    experiment::RunRecord run;
    try {
      run = experiment::readRun(dir);
    } catch (const experiment::RecordError& e) {
      return fail(kExitRuntime, fmt::format("tpscope arms needs GPUs and this machine has none visible ({}); the "
                                            "spec's recorded_run cannot be shown either: {}",
                                            why, e.what()));
    }
    std::cerr << fmt::format(
        "tpscope arms: no GPU here: {}; nothing is measured, rendering the recorded run {} instead\n", why, dir);
    const experiment::Report report = experiment::buildReport(run);
    std::cout << experiment::formatMarkdown(report);
    std::cout.flush();
    std::filesystem::path name = std::filesystem::path(dir).lexically_normal();
    if (name.filename().empty()) name = name.parent_path();
    const std::string out = out_.empty() ? "runs/recorded-" + name.filename().string() : out_;
    return writePlots(report, dir, out + "/plots");
  }

  CLI::App* sub_ = nullptr;
  std::string spec_path_, out_, resume_;
  std::vector<std::string> only_;
  bool quick_ = false;
  bool fake_workload_ = false;
  int fake_gpus_ = 2;
  std::optional<experiment::RunRecord> recording_;
  std::string recording_error_;
};

}  // namespace

std::unique_ptr<Command> makeArmsCommand(CLI::App& app) { return std::make_unique<ArmsCommand>(app); }

}  // namespace tpscope::cli
