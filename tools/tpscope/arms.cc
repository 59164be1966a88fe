// SPDX-License-Identifier: Apache-2.0
// arms.cc - `tpscope arms SPEC.toml [--out RUN_DIR] [--quick]`.
//
// At the end: the report on stdout, plots in RUN_DIR/plots where python3 has matplotlib. Without GPUs it
// says so in one line; when the spec names a recorded_run (examples/four-arms.toml does) it then renders
// that recording and exits 0, so the README's first command shows real output anywhere; else it exits 1.
// Tests: the hidden --fake-workload, together with TPSCOPE_METER_FAKE=1, runs the arms on a fake workload
// (makeFakeArmPhases) and the meter's two scripted GPUs.
#include "arms.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "allreduce/media.h"
#include "engine/gguf.h"
#include "experiment/record.h"
#include "experiment/report.h"
#include "experiment/runner.h"
#include "experiment/server_phases.h"
#include "experiment/spec.h"
#include "experiment/workload_phases.h"
#include "report.h"
#include "topo.h"
#include "topology/topology.h"
#include "workload/model_config.h"

namespace tpscope::cli {

namespace {

// The first line of /proc/cpuinfo that starts with `key`, after its colon; "" where there is none.
std::string cpuinfoField(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

// What the manifest says about the machine: the host's name, its kernel, CPU and GPUs, and a
// description a report prints ("2x NVIDIA H200"), from the topology where it was read (`topo` null:
// none was, and the description says what the GPUs were instead, e.g. the fake ones).
nlohmann::json machineRecord(const Topology* topo, const std::string& no_topology) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  utsname u{};
  uname(&u);
  nlohmann::json m = {{"hostname", host},
                      {"os", std::string(u.sysname) + " " + u.release + " " + u.machine},
                      {"cpu", cpuinfoField("model name")}};
  if (topo == nullptr || topo->gpus.empty()) {
    m["description"] = no_topology;
    return m;
  }
  // GPU names in order of first appearance, with their counts: "2x NVIDIA H200".
  std::vector<std::pair<std::string, int>> names;
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuInfo& g : topo->gpus) {
    gpus.push_back(g.name);
    auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == g.name; });
    if (it == names.end())
      names.emplace_back(g.name, 1);
    else
      ++it->second;
  }
  std::string description;
  for (const auto& [name, count] : names)
    description += (description.empty() ? "" : ", ") + fmt::format("{}x {}", count, name);
  m["gpus"] = gpus;
  m["description"] = description + " (" + host + ")";
  return m;
}

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

    experiment::RunnerConfig c;
    c.spec = spec;
    if (fakeMeterGpus())
      c.start_meter = [](const MeterOptions& o, std::unique_ptr<Meter>* out, std::string* reason) {
        MeterOptions fake = o;
        fake.fake_gpus = true;
        return Meter::start(fake, out, reason);
      };
    c.out_dir = out_.empty() ? defaultRunDir(spec.name) : out_;
    c.progress = &std::cerr;
    c.versions = {{"tpscope", tpsGetVersion()}, {"git_sha", tpsGetGitRevision()}};
    c.invocation = {{"argv", processArgv()}, {"quick", quick_}, {"arms", only_}};
    c.machine = machineRecord(nullptr, "GPUs not read");
    c.box.split_modes = {"none", "layer", "tensor"};
    c.box.presets = {"tiny", "8b", "32b"};

    const experiment::Engine engine = spec.shared.engine.engine;
    if (engine != experiment::Engine::kSynthetic) return runEngine(spec, c);
    if (fake_workload_) {
      if (!fakeMeterGpus())
        return fail(kExitUsage, "--fake-workload needs TPSCOPE_METER_FAKE=1 (the fake workload runs on no GPU)");
      c.box.gpu_count = 2;
      c.box.backends = {"host", "p2p", "nccl"};
      c.versions["workload"] = "fake (--fake-workload)";
      c.machine = machineRecord(nullptr, "fake GPUs (--fake-workload)");
      c.make_phases = [](const experiment::EffectiveSettings& arm) { return experiment::makeFakeArmPhases(arm); };
    } else {
      int exit_code = 0;
      if (!countGpus(spec, &c.box.gpu_count, &exit_code)) return exit_code;
      std::string why;
      Topology topo;
      if (queryTopology({}, &topo, &why) == tpsSuccess) {
        const BackendsBuilt built = backendsBuilt();
        const std::vector<MediumStatus> media = evaluateMedia(topo, built);
        for (const MediumStatus& p : media) {
          const std::string backend = p.id.rfind("p2p", 0) == 0 ? "p2p" : p.id;
          if (p.state == MediumState::kAvailable) {
            if (std::find(c.box.backends.begin(), c.box.backends.end(), backend) == c.box.backends.end())
              c.box.backends.push_back(backend);
          } else if (!c.box.backend_reasons.count(backend)) {
            c.box.backend_reasons[backend] = p.reason;
          }
        }
        for (const std::string& b : c.box.backends) c.box.backend_reasons.erase(b);
        c.topology = topologyDocument(topo, media, built.nccl_version ? ncclVersionString(*built.nccl_version) : "");
        c.machine = machineRecord(&topo, "");
      } else {
        c.box.backends = {"host"};
      }
      c.decide = experiment::workloadDecisions;
      c.make_phases = [](const experiment::EffectiveSettings&) { return experiment::makeWorkloadArmPhases(); };
    }

    return runAndReport(spec, c);
  }

 private:
  // A server or a command: its binary, model and GPUs checked before the runner starts anything.
  int runEngine(experiment::ExperimentSpec& spec, experiment::RunnerConfig& c) {
    experiment::EngineSettings& e = spec.shared.engine;
    // The meter needs the GPUs; TPSCOPE_METER_FAKE=1 gives it two scripted ones (tests, CI). Without
    // GPUs nothing is started: the spec's recording is rendered, as for the synthetic engine.
    if (fakeMeterGpus()) {
      c.box.gpu_count = 2;
      c.machine = machineRecord(nullptr, "fake meter GPUs (TPSCOPE_METER_FAKE=1)");
    } else {
      int exit_code = 0;
      if (!countGpus(spec, &c.box.gpu_count, &exit_code)) return exit_code;
      Topology topo;
      std::string why;
      if (queryTopology({}, &topo, &why) == tpsSuccess) c.machine = machineRecord(&topo, "");
    }
    // The server itself says which split modes it implements (a mode it lists but lacks fails to load).
    c.box.split_modes = {"none", "layer", "tensor", "row"};
    if (e.engine == experiment::Engine::kLlamaServer) {
      if (e.server.empty()) {
        const char* env = std::getenv("TPSCOPE_LLAMA_SERVER");
        e.server = env ? env : "";
      }
      if (e.server.empty())
        return fail(kExitUsage,
                    "name the llama-server to run: server = \"PATH\" in [experiment], or TPSCOPE_LLAMA_SERVER=PATH "
                    "(scripts/llama/build-llama-server --print-path builds the pinned one)");
      std::string why;
      if (!isGguf(e.model, &why)) return fail(kExitUsage, why);
      auto checkDraft = [&](const std::optional<std::string>& d) {
        return !d || *d == "self" || *d == "none" || isGguf(*d, &why);
      };
      if (!checkDraft(spec.shared.base.draft)) return fail(kExitUsage, why);
      for (const experiment::ArmSpec& a : spec.arms)
        if (!checkDraft(a.delta.draft)) return fail(kExitUsage, why);
      c.spec = spec;
    }
    c.versions["engine"] = experiment::engineName(e.engine);
    std::vector<std::string> visible;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) visible.push_back(item);
    }
    const std::string dir = c.out_dir;
    const experiment::EngineSettings settings = e;
    if (e.engine == experiment::Engine::kLlamaServer) {
      c.make_phases = [settings, dir, visible](const experiment::EffectiveSettings&) {
        return experiment::makeServerArmPhases(settings, dir, visible);
      };
      c.probe = true;
      c.tail_seconds = 1;
    } else {
      c.make_phases = [settings, dir](const experiment::EffectiveSettings&) {
        return experiment::makeCommandArmPhases(settings, dir);
      };
    }
    return runAndReport(spec, c);
  }

  // The GPUs to measure on. None: the spec's recording is rendered instead (or the run is refused when it
  // names none) and false returns with the command's exit code.
  bool countGpus(const experiment::ExperimentSpec& spec, int* count, int* exit_code) {
    std::string why;
    if (cudaDeviceCount(count, &why) == tpsSuccess && *count > 0) return true;
    if (why.empty()) why = "no GPU";
    *exit_code = spec.recorded_run.empty()
                     ? fail(kExitRuntime, "tpscope arms needs GPUs and this machine has none visible (" + why +
                                              "); `tpscope report` renders a recorded run folder anywhere")
                     : showRecording(spec.recorded_run, why);
    return false;
  }

  // True when `path` is a GGUF file llama.cpp can load, else false with the one-line error in *why.
  static bool isGguf(const std::string& path, std::string* why) {
    engine::GgufHeader header;
    return engine::readGgufHeader(path, &header, why);
  }

  int runAndReport(const experiment::ExperimentSpec& spec, experiment::RunnerConfig& c) {
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
