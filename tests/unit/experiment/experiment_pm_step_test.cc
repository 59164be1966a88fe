// SPDX-License-Identifier: Apache-2.0
// One decode step on the bus: the step the runner takes out of a PM-sampled decode window, its record,
// and the report's section (figures, burst count against the library's calls, absent without PM).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <utility>

#include "experiment/report_render.h"
#include "experiment/run_folder.h"
#include "experiment_fixture.h"
#include "time_units.h"

namespace tpscope::experiment {
namespace {

using tpscope::testing::kUs;

// Back-to-back records of `interval_us` on GPU position `gpu` from t0 to t1 (ns), tx(i) / rx(i) bytes.
std::vector<MeterRecord> records(int gpu, int64_t t0, int64_t t1, int64_t interval_us,
                                 const std::function<double(int)>& tx, const std::function<double(int)>& rx) {
  std::vector<MeterRecord> out;
  int i = 0;
  for (int64_t t = t0; t < t1; t += interval_us * kUs, ++i) {
    MeterRecord m;
    m.gpu = gpu;
    m.t_start_ns = t;
    m.t_end_ns = t + interval_us * kUs;
    m.bytes = {tx(i), rx(i)};
    out.push_back(m);
  }
  return out;
}

std::vector<MeterGpu> gpus(std::vector<int> ordinals) {
  std::vector<MeterGpu> out;
  for (int o : ordinals) {
    MeterGpu g;
    g.index = o;
    out.push_back(g);
  }
  return out;
}

PathCalls calls(uint64_t n) {
  PathCalls pc;
  pc.path = "host-kernel";
  pc.calls = n;
  return pc;
}

TEST(ExperimentPmStep, TheMiddleStepWithEveryRecordOverlappingIt) {
  // A 1 ms window from 3 us, 10 steps of 100 us: step 5 is [503, 603) us. 10 us records from 0 on GPU
  // position 0 (ordinal 4), from 0 on position 1 (ordinal 6) with other bytes.
  std::vector<MeterRecord> s = records(
      0, 0, 2000 * kUs, 10, [](int i) { return 100.0 * i; }, [](int) { return 7.0; });
  const std::vector<MeterRecord> s1 = records(
      1, 0, 2000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 2.0; });
  s.insert(s.end(), s1.begin(), s1.end());
  const std::optional<PmStep> st =
      pmStepFromSamples(3 * kUs, 1003 * kUs, 10, {calls(600), calls(40)}, s, gpus({4, 6}), 10);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->interval_us, 10);
  EXPECT_EQ(st->step, 5);
  EXPECT_EQ(st->start_ns, 503 * kUs);
  EXPECT_EQ(st->end_ns, 603 * kUs);
  ASSERT_TRUE(st->allreduce_calls_per_step);
  EXPECT_DOUBLE_EQ(*st->allreduce_calls_per_step, 64);  // (600 + 40) calls / 10 steps
  EXPECT_TRUE(st->complete) << st->note;
  ASSERT_EQ(st->gpus.size(), 2u);
  EXPECT_EQ(st->gpus[0].gpu, 4);
  EXPECT_EQ(st->gpus[1].gpu, 6);
  // Records [500, 510) .. [600, 610): 11 of them, the first starting 3 us before the step.
  ASSERT_EQ(st->gpus[0].samples.size(), 11u);
  EXPECT_EQ(st->gpus[0].samples.front().t_ns, -3 * kUs);
  EXPECT_DOUBLE_EQ(st->gpus[0].samples.front().tx_bytes, 100.0 * 50);
  EXPECT_DOUBLE_EQ(st->gpus[0].samples.front().rx_bytes, 7);
  EXPECT_EQ(st->gpus[0].samples.back().t_ns, 97 * kUs);
  EXPECT_DOUBLE_EQ(st->gpus[1].samples.back().tx_bytes, 1);
  // A step edge on a record edge: that record starts the step, and the one ending at the edge is out.
  const std::vector<MeterRecord> s0 = records(
      0, 0, 2000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 2.0; });
  const std::optional<PmStep> aligned = pmStepFromSamples(0, 1000 * kUs, 10, {}, s0, gpus({6}), 10);
  ASSERT_TRUE(aligned);
  EXPECT_EQ(aligned->gpus[0].samples.size(), 10u);
  EXPECT_EQ(aligned->gpus[0].samples.front().t_ns, 0);
  EXPECT_FALSE(aligned->allreduce_calls_per_step);  // no communicator: no calls to set beside
}

TEST(ExperimentPmStep, NoStepWithoutStepsOrWindow) {
  const std::vector<MeterRecord> s = records(
      0, 0, 1000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 1.0; });
  EXPECT_FALSE(pmStepFromSamples(0, 1000 * kUs, 0, {}, s, gpus({0}), 10));
  EXPECT_FALSE(pmStepFromSamples(500 * kUs, 500 * kUs, 4, {}, s, gpus({0}), 10));
  // One step: the whole window.
  const std::optional<PmStep> one = pmStepFromSamples(100 * kUs, 200 * kUs, 1, {calls(3)}, s, gpus({0}), 10);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->step, 0);
  EXPECT_EQ(one->start_ns, 100 * kUs);
  EXPECT_DOUBLE_EQ(*one->allreduce_calls_per_step, 3);
}

TEST(ExperimentPmStep, GapsAndMissingRecordsMarkTheStepIncomplete) {
  std::vector<MeterRecord> s = records(
      0, 0, 1000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 1.0; });
  s.erase(s.begin() + 55);  // [550, 560) us lost: more than half an interval
  std::optional<PmStep> st = pmStepFromSamples(0, 1000 * kUs, 10, {}, s, gpus({2}), 10);
  ASSERT_TRUE(st);
  EXPECT_FALSE(st->complete);
  EXPECT_EQ(st->note, "GPU 2: a gap between PM records");
  EXPECT_EQ(st->gpus[0].samples.size(), 9u);
  // Records that end inside the step; a GPU with none at all.
  s = records(
      0, 0, 580 * kUs, 10, [](int) { return 1.0; }, [](int) { return 1.0; });
  st = pmStepFromSamples(0, 1000 * kUs, 10, {}, s, gpus({2, 3}), 10);
  EXPECT_EQ(st->note, "GPU 2: PM records do not cover the step");
  st = pmStepFromSamples(0, 1000 * kUs, 10, {},
                         records(
                             0, 0, 1000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 1.0; }),
                         gpus({2, 3}), 10);
  EXPECT_FALSE(st->complete);
  EXPECT_EQ(st->note, "GPU 3: no PM records over the step");
  EXPECT_TRUE(st->gpus[1].samples.empty());
}

TEST(ExperimentPmStep, ALongStepKeepsItsFirstRecordsOnly) {
  // One step of 1 s at 10 us: 100000 records, more than a record keeps.
  const std::vector<MeterRecord> s = records(
      0, 0, 1000000 * kUs, 10, [](int) { return 1.0; }, [](int) { return 1.0; });
  const std::optional<PmStep> st = pmStepFromSamples(0, 1000000 * kUs, 1, {}, s, gpus({0}), 10);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->gpus[0].samples.size(), kPmStepMaxRecords);
  EXPECT_FALSE(st->complete);
  EXPECT_EQ(st->note, "GPU 0: the step spans 100000 records, the first 20000 are kept");
}

TEST(ExperimentPmStep, TheStepTravelsWithTheDecodePhaseOnly) {
  RepetitionResult r;
  r.arm = "T";
  PhaseResult p;
  p.phase = "decode";
  r.phases.push_back(p);
  nlohmann::json j = toJson(r);
  EXPECT_FALSE(j["phases"][0].contains("pm_step"));  // NVML-only records keep their shape
  PmStep st;
  st.interval_us = 10;
  st.step = 32;
  st.start_ns = 123456789;
  st.end_ns = 128456789;
  st.allreduce_calls_per_step = 64;
  st.complete = false;
  st.note = "GPU 0: a gap between PM records";
  st.gpus = {{0, {{-2500, 20480.5, 512}, {7500, 0, 1}}}, {1, {}}};
  r.phases[0].pm_step = st;
  j = toJson(r);
  const nlohmann::json& pj = j["phases"][0]["pm_step"];
  EXPECT_EQ(pj["interval_us"], 10);
  EXPECT_EQ(pj["step_start_ns"], 123456789);
  EXPECT_EQ(pj["step_end_ns"], 128456789);
  EXPECT_EQ(pj["gpus"][0]["gpu"], 0);
  EXPECT_EQ(pj["gpus"][0]["samples"][0], nlohmann::json::parse("[-2500, 20480.5, 512.0]"));
  const RepetitionResult back = repetitionFromJson(j);
  ASSERT_TRUE(back.phases[0].pm_step);
  EXPECT_EQ(toJson(back), j);
  EXPECT_EQ(back.phases[0].pm_step->gpus[0].samples[1].t_ns, 7500);
  EXPECT_FALSE(back.phases[0].pm_step->complete);
  j["phases"][0]["pm_step"]["gpus"][0]["samples"][0] = nlohmann::json::array({1, 2});  // not [t, tx, rx]
  EXPECT_THROW(repetitionFromJson(j), nlohmann::json::exception);
}

// A run with one tensor arm whose decode steps PM recorded: `bursts` bursts of 3 busy 10 us records on tx
// (2048 MB/s) 70 us apart, while rx never rests (the host backend's flag polls), over a 5 ms step.
RunRecord pmRun(int reps, int bursts, double calls_per_step) {
  RunRecord run;
  run.manifest.arms = {"T"};
  run.manifest.phases = {"decode"};
  EffectiveSettings e;
  e.arm = "T";
  e.settings = {{"meter_source", "pm", SettingSource::kShared},
                {"devices", "0,0", SettingSource::kShared},
                {"split", "tensor", SettingSource::kShared},
                {"allreduce_backend", "host", SettingSource::kDerived}};
  run.manifest.effective = {e};
  for (int rep = 0; rep < reps; ++rep) {
    RepetitionResult r;
    r.arm = "T";
    r.repetition = rep;
    PhaseResult p;
    p.phase = "decode";
    p.end_ns = 640'000'000;
    p.steps = 128;
    PmStep st;
    st.interval_us = 10;
    st.step = 64;
    st.start_ns = 320'000'000;
    st.end_ns = st.start_ns + (5000 + 1000 * rep) * kUs;  // 5, 6, 7 ms: the median is the middle one
    st.allreduce_calls_per_step = calls_per_step;
    PmStepGpu g;
    g.gpu = 0;
    for (int64_t t = -5 * kUs; t < st.end_ns - st.start_ns; t += 10 * kUs) {
      const int64_t k = (t + 5 * kUs) / (10 * kUs);  // record index from the step's first
      const bool busy = k % 7 < 3 && k / 7 < bursts;
      g.samples.push_back({t, busy ? 20480.0 : 512.0, 40960.0});
    }
    st.gpus = {g};
    p.pm_step = st;
    r.phases.push_back(p);
    run.repetitions.push_back(r);
  }
  return run;
}

TEST(ExperimentPmStep, ReportSectionSetsTheBurstsBesideTheCalls) {
  const Report rep = buildReport(pmRun(3, 64, 64));
  ASSERT_EQ(rep.pm_steps.size(), 1u);
  const ReportPmStep& p = rep.pm_steps[0];
  EXPECT_EQ(p.arm, "T");
  EXPECT_EQ(p.gpu, 0);
  EXPECT_EQ(p.interval_us, 10);
  EXPECT_DOUBLE_EQ(p.step_ms->median, 6);
  EXPECT_DOUBLE_EQ(p.step_ms->min, 5);
  EXPECT_EQ(p.step_ms->n, 3);
  EXPECT_DOUBLE_EQ(p.records->median, 601);  // 6 ms of 10 us records, and one more across the start edge
  EXPECT_DOUBLE_EQ(p.bursts->median, 64);
  EXPECT_DOUBLE_EQ(p.bursts->max, 64);
  EXPECT_DOUBLE_EQ(p.allreduce_calls->median, 64);
  EXPECT_DOUBLE_EQ(p.bursts_per_call->median, 1);
  // rx: 40960 B per record over the step, the edge records prorated: 6 ms x 4096 MB/s.
  EXPECT_NEAR(p.rx_bytes->median, 6000 * 40960.0 / 10, 1e-6);
  // tx: 64 x 3 busy records (the first starts 5 us before the step: half of it is out), the rest quiet.
  const double tx = 64 * 3 * 20480.0 - 10240 + (601 - 64 * 3) * 512.0 - 256;
  EXPECT_NEAR(p.tx_bytes->median, tx, 1e-6);
  EXPECT_EQ(p.repetition, 0);
  EXPECT_EQ(p.step_ns, 5000 * kUs);
  EXPECT_EQ(p.samples.size(), 501u);  // the first valid repetition's step, for the plot
  const std::string md = formatMarkdown(rep);
  EXPECT_NE(md.find("\n## One decode step on the bus (PM sampling, 10 µs)\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| T | 0 | 6.000 (5.000–7.000) | 601 (501–701) | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | 64 (64–64) | 64 (64–64) | 1.00 (1.00–1.00) |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("runs of records above 1,024 MB/s on tx, merged across dips shorter than 25 µs"), std::string::npos)
      << md;
  // PM alone: the figures are PM's and no dmon method ran.
  EXPECT_NE(md.find("PCIe bytes from PM sampling (NVML counters not read)"), std::string::npos);
  EXPECT_EQ(md.find("dmon method (rx MB/s)"), std::string::npos);
  const nlohmann::json j = toJson(rep);
  EXPECT_EQ(j["meter_source"], "pm");
  ASSERT_TRUE(j.contains("decode_step_pm")) << j.dump(1);
  EXPECT_EQ(j["decode_step_pm"]["burst_rule"]["counter"], "tx");
  EXPECT_EQ(j["decode_step_pm"]["burst_rule"]["threshold_mbps"], 1024.0);
  EXPECT_EQ(j["decode_step_pm"]["burst_rule"]["min_gap_us"], 25.0);
  const nlohmann::json& row = j["decode_step_pm"]["rows"][0];
  EXPECT_EQ(row["bursts"]["median"], 64.0);
  EXPECT_EQ(row["plot"]["samples"].size(), 501u);
  EXPECT_EQ(row["plot"]["step_ns"], 5000 * kUs);
}

TEST(ExperimentPmStep, BurstsThatDoNotFollowTheCallsShowInTheRatio) {
  const Report rep = buildReport(pmRun(1, 36, 72));
  ASSERT_EQ(rep.pm_steps.size(), 1u);
  EXPECT_DOUBLE_EQ(rep.pm_steps[0].bursts->median, 36);
  EXPECT_DOUBLE_EQ(rep.pm_steps[0].bursts_per_call->median, 0.5);
  EXPECT_NE(formatMarkdown(rep).find(" | 36 | 72 | 0.50 |\n"), std::string::npos) << formatMarkdown(rep);
}

TEST(ExperimentPmStep, IncompleteAndInvalidRepetitionsAreNamed) {
  RunRecord run = pmRun(2, 10, 64);
  run.repetitions[0].phases[0].pm_step->complete = false;
  run.repetitions[0].phases[0].pm_step->note = "GPU 0: a gap between PM records";
  run.repetitions[1].valid = false;  // left out of the figures, as everywhere in the report
  const Report rep = buildReport(run);
  ASSERT_EQ(rep.pm_steps.size(), 1u);
  EXPECT_EQ(rep.pm_steps[0].bursts->n, 1);
  ASSERT_EQ(rep.pm_steps[0].notes.size(), 1u);
  EXPECT_NE(formatMarkdown(rep).find("- arm T GPU 0, repetition 1: GPU 0: a gap between PM records\n"),
            std::string::npos);
}

// A recorded step that is no step the runner writes (edges reversed or an hour apart, an interval the
// meter does not take) is named as corrupt and kept out of the figures; its neighbours still count.
// Reached through the run folder as `tpscope report` reads it, and through buildReport directly.
TEST(ExperimentPmStep, ImplausibleStepsAreNamedAndLeftOut) {
  struct Bad {
    const char* what;
    std::function<void(PmStep*)> damage;
    std::string note;
  };
  const std::vector<Bad> bad = {
      {"edges reversed", [](PmStep* s) { std::swap(s->start_ns, s->end_ns); },
       "repetition 1: the recorded step is not one (interval 10 us, 325000000 to 320000000 ns)"},
      {"edges an hour apart", [](PmStep* s) { s->end_ns = s->start_ns + 3601 * int64_t{1000000000}; },
       "repetition 1: the recorded step is not one (interval 10 us, 320000000 to 3601320000000 ns)"},
      {"an interval past a second", [](PmStep* s) { s->interval_us = 1000001; },
       "repetition 1: the recorded step is not one (interval 1000001 us, 320000000 to 325000000 ns)"},
      {"edges whose difference overflows",
       [](PmStep* s) {
         s->start_ns = std::numeric_limits<int64_t>::min();
         s->end_ns = std::numeric_limits<int64_t>::max();
       },
       "the recorded step is not one"}};
  for (const Bad& b : bad) {
    RunRecord run = pmRun(3, 64, 64);
    b.damage(&*run.repetitions[0].phases[0].pm_step);
    // Written and read back as a folder first: the reader takes such a record, the report judges it.
    const std::string dir = tpscope::testing::tempDir("pm_step_bad");
    {
      RunWriter w(dir, run.manifest);
      for (const RepetitionResult& r : run.repetitions) w.append(r);
    }
    const RunRecord read = readRun(dir);
    std::filesystem::remove_all(dir);
    const Report rep = buildReport(read);
    ASSERT_EQ(rep.pm_steps.size(), 1u) << b.what;
    EXPECT_EQ(rep.pm_steps[0].step_ms->n, 2) << b.what;  // the other two repetitions
    EXPECT_EQ(rep.pm_steps[0].repetition, 1) << b.what;  // the plot takes the first plausible one
    ASSERT_EQ(rep.pm_steps[0].notes.size(), 1u) << b.what;
    EXPECT_NE(rep.pm_steps[0].notes[0].find(b.note), std::string::npos) << b.what << ": " << rep.pm_steps[0].notes[0];
    EXPECT_NE(formatMarkdown(rep).find("- arm T GPU 0, " + rep.pm_steps[0].notes[0]), std::string::npos) << b.what;
  }
}

TEST(ExperimentPmStep, NoSectionWithoutPm) {
  const std::string dir = tpscope::testing::tempDir("pm_step_none");
  const RunRecord run = tpscope::testing::writeStudyRun(dir);
  std::filesystem::remove_all(dir);
  const Report rep = buildReport(run);
  EXPECT_TRUE(rep.pm_steps.empty());
  EXPECT_EQ(formatMarkdown(rep).find("One decode step on the bus"), std::string::npos);
  EXPECT_FALSE(toJson(rep).contains("decode_step_pm"));
  EXPECT_FALSE(toJson(rep).contains("meter_source"));
  EXPECT_NE(formatMarkdown(rep).find("dmon method (rx MB/s)"), std::string::npos);
}

}  // namespace
}  // namespace tpscope::experiment
