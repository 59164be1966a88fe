// SPDX-License-Identifier: Apache-2.0
// arms/arms_command.cc - `tpscope arms SPEC.toml [--out RUN_DIR] [--quick]`.
//
// At the end: the report on stdout, plots in RUN_DIR/plots where python3 has matplotlib. Without GPUs it
// says so in one line; when the spec names a recorded_run (examples/four-arms.toml does) it then renders
// that recording and exits 0, so the README's first command shows real output anywhere; else it exits 1.
// Tests: the hidden --fake-workload, together with TPSCOPE_METER_FAKE=1, runs the arms on a fake workload
// (makeFakeArmPhases) and the meter's two scripted GPUs.
#include "arms/arms_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "experiment/configure.h"
#include "experiment/report_render.h"
#include "experiment/run_folder.h"
#include "experiment/spec.h"
#include "report/report_command.h"

namespace tpscope::cli {

namespace {

std::string defaultRunDir(const std::string& experiment) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return "runs/" + experiment + "-" + buf;
}

class ArmsCommand : public Command {
 public:
  explicit ArmsCommand(CLI::App& app) {
    sub_ = app.add_subcommand("arms", "Run an experiment spec (arms x repetitions, quiesced and metered) and report");
    sub_->add_option("SPEC", spec_path_, "Experiment spec (TOML), e.g. examples/four-arms.toml")->required();
    sub_->add_option("--out", out_, "Run folder to write (default: runs/NAME-YYYYMMDD-HHMMSS)");
    sub_->add_flag("--quick", quick_, "Fast run: at most 2 repetitions, 2 s idle, 1024 prompt and 64 decode tokens");
    sub_->add_option("--arms", only_, "Run only these arms of the spec, e.g. A,B (default: all)")->delimiter(',');
    // For tests: not in --help (group ""), and it needs the fake meter.
    sub_->add_flag("--fake-workload", fake_workload_, "Run a fake workload instead of the GPUs (tests)")->group("");
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    experiment::ExperimentSpec spec;
    try {
      spec = experiment::loadSpec(spec_path_);
    } catch (const experiment::SpecError& e) {
      return fail(kExitUsage, e.what());
    }
    if (quick_) spec = experiment::quickSpec(spec);
    if (!only_.empty()) {
      std::vector<experiment::ArmSpec> kept;
      for (const std::string& name : only_) {
        auto a = std::find_if(spec.arms.begin(), spec.arms.end(),
                              [&](const experiment::ArmSpec& x) { return x.name == name; });
        if (a == spec.arms.end()) {
          std::string known;
          for (const experiment::ArmSpec& x : spec.arms) known += (known.empty() ? "" : ", ") + x.name;
          return fail(kExitUsage, fmt::format("--arms: the spec has no arm \"{}\" (its arms: {})", name, known));
        }
        kept.push_back(*a);
      }
      spec.arms = kept;
    }

    experiment::ConfigureOptions o;
    o.out_dir = out_.empty() ? defaultRunDir(spec.name) : out_;
    o.fake_meter = fakeMeterGpus();
    o.fake_workload = fake_workload_;
    o.versions = {{"tpscope", tpsGetVersion()}, {"git_sha", tpsGetGitRevision()}};
    o.invocation = {{"argv", processArgv()}, {"quick", quick_}, {"arms", only_}};
    o.progress = &std::cerr;
    experiment::Configuration configured = experiment::configure(spec, o);
    switch (configured.status) {
      case experiment::Configuration::Status::kReady: return runAndReport(configured.config);
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
  int runAndReport(const experiment::RunnerConfig& c) {
    const experiment::ExperimentSpec& spec = c.spec;
    std::cerr << fmt::format("tpscope arms: {} ({} arm{}), run folder {}\n", spec.name, spec.arms.size(),
                             spec.arms.size() == 1 ? "" : "s", c.out_dir);
    const experiment::RunOutcome o = experiment::runExperiment(c);
    switch (o.status) {
      case experiment::RunOutcome::Status::kDone:
        std::cout << o.report_markdown;
        std::cout.flush();
        std::cerr << fmt::format(
            "tpscope arms: {} attempts, {} failed baselines, {} failed repetitions; run folder {}\n", o.attempts,
            o.failed_attempts, o.failed_repetitions, c.out_dir);
        return writePlots(o.report, c.out_dir, c.out_dir + "/plots");
      case experiment::RunOutcome::Status::kRefused: {
        // The table (or the refused arms) first, then the one-line error.
        const size_t nl = o.message.find('\n');
        std::cerr << o.message.substr(nl == std::string::npos ? o.message.size() : nl + 1);
        return fail(kExitRuntime, o.message.substr(0, nl));
      }
      case experiment::RunOutcome::Status::kFailed:
      default: return fail(kExitRuntime, o.message);
    }
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
  std::string spec_path_, out_;
  std::vector<std::string> only_;
  bool quick_ = false;
  bool fake_workload_ = false;
};

}  // namespace

std::unique_ptr<Command> makeArmsCommand(CLI::App& app) { return std::make_unique<ArmsCommand>(app); }

}  // namespace tpscope::cli
