// SPDX-License-Identifier: Apache-2.0
// report/report_command.cc - `tpscope report RUN_DIR [--format md|json] [--plots] [--plot-dir DIR]`.
#include "report/report_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "experiment/report_render.h"
#include "experiment/run_folder.h"

namespace tpscope::cli {

namespace {

std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class ReportCommand : public Command {
 public:
  explicit ReportCommand(CLI::App& app) {
    sub_ = app.add_subcommand("report", "Render the report of a recorded run folder (no GPU needed)");
    sub_->add_option("RUN_DIR", run_dir_, "Run folder written by `tpscope arms`")->required();
    sub_->add_option("--format", format_, "Output format")->check(CLI::IsMember({"md", "json"}))->capture_default_str();
    sub_->add_flag("--plots", plots_, "Also draw PNG plots with scripts/plot_report.py (needs python3 + matplotlib)");
    sub_->add_option("--plot-dir", plot_dir_, "Where the plots go (default: RUN_DIR/plots)");
  }
  CLI::App* subcommand() const override { return sub_; }

  int run() override {
    if (!std::filesystem::is_directory(run_dir_))
      return fail(kExitUsage, "run folder " + run_dir_ + " does not exist: give a folder written by `tpscope arms`");
    experiment::RunRecord run;
    try {
      run = experiment::readRun(run_dir_);
    } catch (const experiment::RecordError& e) {
      return fail(kExitRuntime, std::string(e.what()) + "; the run folder cannot be rendered");
    }
    for (const std::string& note : run.notes) std::cerr << "tpscope report: " << note << "\n";
    const experiment::Report report = experiment::buildReport(run);
    if (format_ == "json")
      std::cout << experiment::toJson(report).dump(2) << "\n";
    else
      std::cout << experiment::formatMarkdown(report);
    std::cout.flush();
    return plots_ ? writePlots(report, run_dir_, plot_dir_.empty() ? run_dir_ + "/plots" : plot_dir_) : kExitOk;
  }

 private:
  CLI::App* sub_ = nullptr;
  std::string run_dir_, format_ = "md", plot_dir_;
  bool plots_ = false;
};

}  // namespace

std::string plotScriptPath() {
  if (const char* env = std::getenv("TPSCOPE_PLOT_SCRIPT"); env && *env) return std::filesystem::exists(env) ? env : "";
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    const std::filesystem::path p = std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path();
    const std::filesystem::path beside = p / ".." / ".." / "scripts" / "plot_report.py";
    if (std::filesystem::exists(beside)) return std::filesystem::weakly_canonical(beside).string();
  }
#ifdef TPSCOPE_SCRIPTS_DIR
  const std::string built = std::string(TPSCOPE_SCRIPTS_DIR) + "/plot_report.py";
  if (std::filesystem::exists(built)) return built;
#endif
  return "";
}

int writePlots(const experiment::Report& report, const std::string& run_dir, const std::string& plot_dir) {
  const std::string script = plotScriptPath();
  if (script.empty()) {
    std::cerr << "tpscope: plots skipped: scripts/plot_report.py not found (set TPSCOPE_PLOT_SCRIPT)\n";
    return kExitOk;
  }
  // TPSCOPE_PYTHON when set; else python3 on PATH, then the system's (a pyenv or venv python3 on PATH
  // often lacks the python3-matplotlib that scripts/setup installs for /usr/bin/python3).
  const char* py_env = std::getenv("TPSCOPE_PYTHON");
  std::vector<std::string> candidates;
  if (py_env && *py_env)
    candidates = {py_env};
  else
    candidates = {"python3", "/usr/bin/python3"};
  std::string python;
  for (const std::string& c : candidates)
    if (std::system((shellQuote(c) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
      python = shellQuote(c);
      break;
    }
  if (python.empty()) {
    std::cerr << "tpscope: plots skipped: python3 with matplotlib is not available (install python3-matplotlib, "
                 "or point TPSCOPE_PYTHON at a python that has it)\n";
    return kExitOk;
  }
  std::error_code ec;
  std::filesystem::create_directories(plot_dir, ec);
  const std::string json_path = plot_dir + "/report.json";
  std::ofstream(json_path) << experiment::toJson(report).dump(2) << "\n";
  if (!std::ofstream(json_path, std::ios::app)) return fail(kExitRuntime, "cannot write " + json_path);
  const std::string cmd = python + " " + shellQuote(script) + " --report " + shellQuote(json_path) + " --samples " +
                          shellQuote(run_dir + "/samples.jsonl") + " --out " + shellQuote(plot_dir) + " 1>&2";
  const int st = std::system(cmd.c_str());
  if (st != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fail(kExitRuntime, "scripts/plot_report.py failed (its message is above); the tables are printed");
  std::cerr << "tpscope: plots written to " << plot_dir
            << (report.pm_steps.empty() ? " (traffic.png, arms.png)\n" : " (traffic.png, arms.png, pm_step.png)\n");
  return kExitOk;
}

std::unique_ptr<Command> makeReportCommand(CLI::App& app) { return std::make_unique<ReportCommand>(app); }

}  // namespace tpscope::cli
