// SPDX-License-Identifier: Apache-2.0
// experiment_fixture.h - a synthetic run folder whose numbers follow the seed study's full data table
// (the published article's "Full data, all four arms"): per cell the three
// repetitions are the study's min, median and max, so the report must print the study's figures back.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "experiment/guards.h"
#include "experiment/run_folder.h"
#include "experiment/spec.h"

namespace tpscope::testing {

struct StudyCell {
  const char* arm;
  const char* phase;
  int gpu;
  double rx_median, rx_min, rx_max, tx;
  int samples[3];
};

inline const std::vector<StudyCell>& studyCells() {
  static const std::vector<StudyCell> cells = {
      {"A", "decode", 0, 31, 26, 38, 23, {10, 10, 6}},
      {"A", "prefill", 0, 10, 9, 45, 6, {21, 22, 22}},
      {"B", "decode", 0, 22, 21, 26, 5, {6, 8, 6}},
      {"B", "decode", 1, 22, 22, 29, 34, {6, 8, 6}},
      {"B", "prefill", 0, 33, 10, 99, 3, {13, 14, 13}},
      {"B", "prefill", 1, 110, 14, 117, 108, {13, 14, 13}},
      {"C", "decode", 0, 115, 51, 175, 56, {5, 4, 6}},
      {"C", "decode", 1, 63, 48, 72, 50, {5, 4, 6}},
      {"C", "prefill", 0, 1038, 1033, 1176, 1265, {14, 15, 15}},
      {"C", "prefill", 1, 1052, 1030, 1087, 1240, {14, 15, 15}},
      {"C'", "decode", 0, 97, 86, 235, 154, {4, 6, 5}},
      {"C'", "decode", 1, 195, 182, 209, 245, {4, 6, 5}},
      {"C'", "prefill", 0, 1071, 989, 1169, 1118, {15, 15, 14}},
      {"C'", "prefill", 1, 1064, 1048, 1335, 1215, {15, 15, 13}},
  };
  return cells;
}

// decode tok/s, prefill tok/s per arm (the study's first table).
inline std::pair<double, double> studyTokS(const std::string& arm) {
  if (arm == "A") return {24.1, 567.3};
  if (arm == "B") return {25.6, 944.8};
  if (arm == "C") return {37.7, 844.9};
  return {44.3, 797.9};
}

inline std::string tempDir(const std::string& tag) {
  const std::string d = (std::filesystem::temp_directory_path() /
                         ("tpscope_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(rand())))
                            .string();
  std::filesystem::remove_all(d);
  return d;
}

// Writes the synthetic four-arm run into `dir` and returns it. `failed_attempt`: arm C's second
// repetition first fails its baseline (another process on GPU 1) and is retried.
inline experiment::RunRecord writeStudyRun(const std::string& dir, bool failed_attempt = false) {
  using namespace tpscope::experiment;
  const ExperimentSpec spec = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/four-arms.toml");
  Manifest m;
  m.spec_path = "examples/four-arms.toml";
  m.spec_toml = spec.text;
  m.experiment = spec.name;
  for (const ArmSpec& a : spec.arms) m.arms.push_back(a.name);
  m.phases = {"prefill", "decode"};
  m.effective = effectiveSettings(spec);
  m.versions = {{"tpscope", "0.1.0"}, {"git_sha", "synthetic"}};
  m.machine = {{"hostname", "study"}, {"description", "2x RTX 2080 Ti 22 GB, PCIe Gen3 x16"}};
  m.start_time = "2026-07-20T02:00:00Z";
  m.recording = "Synthetic run: numbers from the seed study's tables (not a measurement)";
  RunRecord run;
  run.manifest = m;
  RunWriter w(dir, m);
  const double kCeiling = 15750;
  const int kLayers = 32, kHidden = 4096;
  int64_t t = 1'000'000'000'000;
  for (size_t ai = 0; ai < m.arms.size(); ++ai) {
    const std::string arm = m.arms[ai];
    const EffectiveSettings& e = m.effective[ai];
    const bool tensor = e.value("split") == "tensor";
    const double tps = std::stod(e.value("expected_tokens_per_step"));
    const std::vector<int> gpus = arm == "A" ? std::vector<int>{0} : std::vector<int>{0, 1};
    for (int rep = 0; rep < 3; ++rep) {
      for (int attempt = 0; attempt < ((failed_attempt && arm == "C" && rep == 1) ? 2 : 1); ++attempt) {
        RepetitionResult r;
        r.arm = arm;
        r.repetition = rep;
        r.attempt = attempt;
        r.devices = gpus;
        r.quiesce.start_ns = t;
        t += 8'000'000'000;
        r.quiesce.end_ns = t;
        r.quiesce.threshold_mbps = 100;
        r.quiesce.processes_checked = true;
        r.valid = r.quiesce.passed = !(failed_attempt && arm == "C" && rep == 1 && attempt == 0);
        for (size_t g = 0; g < gpus.size(); ++g) {
          std::array<std::optional<double>, kMeterCounters> idle{};
          idle[0] = 0.4;
          idle[1] = r.valid ? 0.3 : 152.0;
          r.quiesce.idle_mbps.push_back(idle);
        }
        if (!r.valid) {
          r.quiesce.other_pids = {4242};
          r.quiesce.reason = "GPU 1 pcie_rx idled at 152 MB/s (threshold 100) and process 4242 has a context on it";
        }
        std::map<int, double> running;  // cumulative counters carry across the phases
        for (const std::string phase : {"prefill", "decode"}) {
          PhaseResult p;
          p.phase = phase;
          const double tok_median = phase == "decode" ? studyTokS(arm).first : studyTokS(arm).second;
          const double f[3] = {0.98, 1.0, 1.015};
          p.tok_s = tok_median * f[rep];
          p.tokens = phase == "decode" ? 256 : 8192;
          p.steps = phase == "decode" ? static_cast<int64_t>(std::ceil(256 / tps)) : 16;
          const double seconds = p.tokens / p.tok_s;
          p.start_ns = t;
          p.end_ns = t + static_cast<int64_t>(seconds * 1e9);
          p.step_ms = seconds * 1e3 / p.steps;
          t = p.end_ns + 500'000'000;
          if (tensor) {
            const uint64_t tokens_per_call =
                phase == "decode" ? static_cast<uint64_t>(e.value("tokens_per_step") == "4" ? 4 : 1) : 512;
            PathCalls c;
            c.path = phase == "decode" ? "host-kernel" : "host-copy-engine";
            c.calls = static_cast<uint64_t>(p.steps) * 2 * kLayers;
            c.payload_bytes = c.calls * tokens_per_call * kHidden * 2;
            c.tx_bytes = c.rx_bytes = {c.payload_bytes, c.payload_bytes};
            p.allreduce.push_back(c);
          } else if (gpus.size() > 1) {
            p.allreduce.push_back({"host-kernel", 0, 0, {0, 0}, {0, 0}});
          }
          for (int g : gpus)
            for (const StudyCell& sc : studyCells())
              if (sc.arm == arm && sc.phase == phase && sc.gpu == g) {
                GpuTraffic tr;
                tr.gpu = g;
                const double rx[3] = {sc.rx_min, sc.rx_median, sc.rx_max};
                const double txf[3] = {0.97, 1.0, 1.04};
                tr.rx_mbps = rx[rep];
                tr.tx_mbps = sc.tx * txf[rep];
                tr.rx_bytes = *tr.rx_mbps * 1e6 * seconds;
                tr.tx_bytes = *tr.tx_mbps * 1e6 * seconds;
                tr.samples = sc.samples[rep];
                tr.dmon_rx_mbps = *tr.rx_mbps * (0.9 + 0.05 * rep);
                tr.dmon_tx_mbps = *tr.tx_mbps * (0.9 + 0.05 * rep);
                tr.dmon_samples = sc.samples[rep];
                tr.ceiling_mbps = kCeiling;
                p.gpus.push_back(tr);
                // Samples every 0.5 s with the window's bytes, one burst in the middle.
                std::vector<SampleRow> rows;
                const int n = static_cast<int>(seconds / 0.5) + 1;
                double& cum = running[g];
                const double cum0 = cum;
                for (int i = 0; i <= n; ++i) {
                  SampleRow s;
                  s.arm = arm;
                  s.repetition = rep;
                  s.gpu = g;
                  s.t_ns = p.start_ns + static_cast<int64_t>(i * (p.end_ns - p.start_ns) / n);
                  s.pcie_rx_bytes = static_cast<uint64_t>(cum);
                  s.pcie_tx_bytes = static_cast<uint64_t>(cum0 + (cum - cum0) * sc.tx / std::max(1.0, rx[rep]));
                  rows.push_back(s);
                  cum += *tr.rx_bytes / n * (i == n / 2 ? 3.0 : 1.0) * (n > 2 ? static_cast<double>(n) / (n + 2) : 1.0);
                }
                w.append(rows);
                run.samples.insert(run.samples.end(), rows.begin(), rows.end());
              }
          r.phases.push_back(p);
        }
        w.append(r);
        run.repetitions.push_back(r);
      }
    }
  }
  return run;
}

}  // namespace tpscope::testing
