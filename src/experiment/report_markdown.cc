// SPDX-License-Identifier: Apache-2.0
// report_markdown.cc - the report as markdown: the tables `tpscope arms` and `tpscope report` print.
#include <fmt/format.h>

#include "experiment/report_render.h"
#include "experiment/report_text.h"
#include "meter/pm_bursts.h"

namespace tpscope::experiment {

using detail::armPhase;
using detail::describe;
using detail::mbps;
using detail::pct;
using detail::spread;
using detail::tok;

namespace {

std::string ms(double v) { return fmt::format("{:.3f}", v); }
std::string count(double v) { return fmt::format("{:g}", v); }
std::string kB(double bytes) { return mbps(bytes / 1e3); }
std::string ratio(double v) { return fmt::format("{:.2f}", v); }

std::string sci(double v) { return fmt::format("{:.2e}", v); }

// "Wires": where an arm's AllReduce travels on a compressed wire, each arm's decode speed, bytes and the
// error of its output against the exact arm's.
std::string wireSection(const Report& r) {
  bool wires = false;
  for (const ReportArm& a : r.arms) wires |= (a.wire != "exact" && a.wire != "none") || a.output_error.has_value();
  if (!wires) return "";
  std::string s =
      "\n## Wires\n\n| arm | wire | decode tok/s | AllReduce bytes per call | decode rx MB/s per card | output error "
      "| against |\n| --- | --- | ---: | ---: | ---: | --- | --- |\n";
  for (const ReportArm& a : r.arms) {
    const ReportArmPhase* ap = armPhase(r, a.name, "decode");
    bool reference = false;
    for (const ReportArm& o : r.arms) reference |= o.output_reference == a.name;
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", a.name, a.wire,
                     ap && ap->tok_s ? tok(ap->tok_s->median) : "N/A",
                     ap && ap->allreduce_bytes_per_call ? fmt::format("{:.0f}", *ap->allreduce_bytes_per_call) : "N/A",
                     ap ? mbps(ap->rx_per_card_mbps) : "N/A",
                     a.output_error ? spread(a.output_error, sci)
                     : reference    ? "reference"
                                    : "N/A",
                     a.output_error ? a.output_reference : "-");
  }
  s += "\nOutput error: the relative RMS error of the last decode step's final hidden state (last token) against "
       "the exact-wire arm's, per repetition, median (min–max). Bytes per call: the payload the wire moved "
       "(codes and scales on a compressed wire).\n";
  return s;
}

// "One decode step on the bus": where PM sampled a decode step, its records against the library's calls.
std::string pmStepSection(const Report& r) {
  if (r.pm_steps.empty()) return "";
  std::string s = fmt::format(
      "\n## One decode step on the bus (PM sampling, {} µs)\n\n| arm | GPU | step ms | records | tx kB | rx kB | "
      "bursts (tx) | AllReduce calls per step | bursts per call |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      r.pm_steps.front().interval_us);
  for (const ReportPmStep& p : r.pm_steps)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p.arm, p.gpu, spread(p.step_ms, ms),
                     spread(p.records, count), spread(p.tx_bytes, kB), spread(p.rx_bytes, kB), spread(p.bursts, count),
                     spread(p.allreduce_calls, count), spread(p.bursts_per_call, ratio));
  s += fmt::format(
      "\nThe step in the middle of each decode window (window / steps), record by record; median (min–max) over the "
      "arm's valid repetitions. tx and rx: the records' bytes, the two edge records prorated to the step (kB = 10^3 "
      "bytes). Bursts: runs of records above {} MB/s on {}, merged across dips shorter than {:g} µs (the meter's rule, "
      "as `tpscope meter --timeline` labels them by default, `--bursts {}`). "
      "AllReduce calls: the library's count in the window / steps; N/A where it made none. `tpscope report RUN_DIR "
      "--plots` draws each arm's step of its first valid repetition (pm_step.png).\n",
      mbps(tpscope::detail::kStepBurstRule.threshold_mbps),
      tpscope::detail::pmDirectionName(tpscope::detail::kStepBurstRule.direction),
      tpscope::detail::kStepBurstRule.min_gap_us, tpscope::detail::burstRuleText(tpscope::detail::kStepBurstRule));
  for (const ReportPmStep& p : r.pm_steps)
    for (const std::string& n : p.notes) s += fmt::format("- arm {} GPU {}, {}\n", p.arm, p.gpu, n);
  return s;
}

std::string dmonSection(const Report& r) {
  std::string s =
      "\n## Counters beside the dmon method (rx MB/s)\n\n| arm | phase | GPU | counters | dmon | dmon samples per rep "
      "|\n"
      "| --- | --- | ---: | --- | --- | --- |\n";
  bool blind = false;
  for (const ReportCell& c : r.cells) {
    std::string n;
    for (size_t i = 0; i < c.dmon_samples.size(); ++i) n += (i ? ", " : "") + std::to_string(c.dmon_samples[i]);
    const bool none = !c.dmon_rx_mbps;
    blind = blind || none;
    s += fmt::format("| {} | {} | {} | {} | {} | {} |\n", c.arm, c.phase, c.gpu, spread(c.rx_mbps, mbps),
                     none ? std::string("no sample") : spread(c.dmon_rx_mbps, mbps), n.empty() ? "-" : n);
  }
  s += "\nThe dmon method takes the driver's 20 ms throughput snapshot once per second, as `nvidia-smi dmon` does, "
       "and averages the snapshots that fall inside the window; the counters give exact bytes.";
  if (blind)
    s += " \"no sample\": the window is shorter than the 1 s cadence and no reading fell inside it, so that method "
         "cannot see the phase at all.";
  s += "\n";
  return s;
}

}  // namespace

std::string formatMarkdown(const Report& r) {
  const bool pm_only = r.meter_source == "pm";
  std::string s = fmt::format("# Experiment {}\n\n", r.experiment);
  if (!r.recording.empty()) s += fmt::format("> {}\n\n", r.recording);
  if (!r.engine.empty()) s += r.engine + "\n\n";
  s += fmt::format(
      "Started {}{}. Per repetition: mean inside the phase window (bytes / duration). Across "
      "repetitions: median (min–max). MB/s = 10^6 bytes/s, {}, per card.\n\n",
      r.start_time, r.machine.empty() ? "" : " on " + r.machine,
      pm_only ? "PCIe bytes from PM sampling (NVML counters not read)" : "PCIe counters");
  // Summary.
  s += "## Per arm\n\n| arm | setup |";
  for (const std::string& p : r.phases) s += fmt::format(" {} tok/s | {} rx MB/s |", p, p);
  s += "\n| --- | --- |";
  for (size_t i = 0; i < r.phases.size(); ++i) s += " ---: | ---: |";
  s += "\n";
  for (const ReportArm& a : r.arms) {
    s += fmt::format("| {}{} | {} |", a.name, a.recorded_on.empty() ? "" : " (recorded)", describe(a));
    for (const std::string& p : r.phases) {
      const ReportArmPhase* ap = armPhase(r, a.name, p);
      s += fmt::format(" {} | {} |", ap && ap->tok_s ? tok(ap->tok_s->median) : "N/A",
                       ap ? mbps(ap->rx_per_card_mbps) : "N/A");
    }
    s += "\n";
  }
  s += "\nrx MB/s per card: the mean of the arm's GPUs.";
  if (!r.recorded_from.empty())
    s += fmt::format(
        " (recorded): an arm this box cannot run, not measured here but shown from {} (its rows in every "
        "table below come from there too).",
        r.recorded_from);
  bool engine_figures = false;
  for (const ReportArmPhase& ap : r.arm_phases) engine_figures |= ap.client_tok_s.has_value();
  if (engine_figures)
    s += " tok/s: the engine's own timings (the study's figure); the client's clock is beside them below.";
  s += "\n";
  if (engine_figures) {
    s += "\n## The engine's timings beside the client's clock\n\n"
         "| arm | phase | engine tok/s | client tok/s | engine ms | window ms | drafts accepted |\n"
         "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
    for (const ReportArmPhase& ap : r.arm_phases) {
      if (!ap.client_tok_s) continue;
      auto num = [](const std::optional<MeterSpread>& v, int digits) {
        return v ? fmt::format("{:.{}f}", v->median, digits) : std::string("N/A");
      };
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", ap.arm, ap.phase, num(ap.tok_s, 1),
                       num(ap.client_tok_s, 1), num(ap.engine_ms, 1), num(ap.window_ms, 1),
                       ap.draft_acceptance ? pct(ap.draft_acceptance->median) : "-");
    }
    s += "\nprefill window: request sent → first token; decode window: first → last token (the client's clock, "
         "which the meter's windows use).\n";
  }
  // Net cost.
  if (!r.net.empty()) {
    s += "\n## Net AllReduce cost (tensor − layer, rx per card)\n\n| phase | tensor arm | layer arm | tensor rx | "
         "layer rx | net MB/s | ratio |\n| --- | --- | --- | ---: | ---: | ---: | ---: |\n";
    for (const NetCost& n : r.net)
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {:.1f}× |\n", n.phase, n.tensor_arm, n.layer_arm,
                       mbps(n.tensor_rx_mbps), mbps(n.layer_rx_mbps), mbps(n.net_rx_mbps), n.ratio);
  }
  // Full table.
  s += "\n## Per arm, phase and GPU\n\n| arm | phase | GPU | rx MB/s | tx MB/s | samples per rep | share of ceiling |\n"
       "| --- | --- | ---: | --- | --- | --- | ---: |\n";
  for (const ReportCell& c : r.cells) {
    std::string samples;
    for (size_t i = 0; i < c.samples.size(); ++i) samples += (i ? ", " : "") + std::to_string(c.samples[i]);
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", c.arm, c.phase, c.gpu, spread(c.rx_mbps, mbps),
                     spread(c.tx_mbps, mbps), samples, c.share_of_ceiling ? pct(*c.share_of_ceiling) : "N/A");
  }
  if (!r.own.empty()) {
    s += pm_only ? "\nEvery figure is net of the PM sampler's own traffic (its records cross PCIe too; measured at "
                   "each meter start, docs/METHOD.md):"
                 : "\nEvery figure is net of the meter's own counter reads (each NVML read adds PCIe traffic; "
                   "calibrated at each meter start, docs/METHOD.md):";
    for (const std::string& line : r.own) s += "\n- " + line;
    s += "\n";
  }
  if (!r.own_note.empty()) s += "\n" + r.own_note + "\n";
  if (r.busiest)
    s += fmt::format("\nBusiest cell: arm {} {} GPU {} {} {} MB/s = {} of the {} MB/s ceiling per direction.\n",
                     r.busiest->arm, r.busiest->phase, r.busiest->gpu, r.busiest->direction, mbps(r.busiest->mbps),
                     pct(r.busiest->share), mbps(r.busiest->ceiling_mbps));
  // Library vs counters.
  bool any_lib = false;
  for (const ReportArmPhase& ap : r.arm_phases) any_lib |= ap.allreduce_calls && ap.allreduce_calls->median > 0;
  if (any_lib) {
    s += "\n## AllReduce: the library's bytes beside the counters\n\n| arm | phase | GPU | calls per rep | bytes per "
         "call | paths | library rx MB/s | counter rx MB/s | other rx MB/s |\n"
         "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n";
    for (const ReportCell& c : r.cells) {
      const ReportArmPhase* ap = armPhase(r, c.arm, c.phase);
      if (!ap || !ap->allreduce_calls || ap->allreduce_calls->median == 0) continue;
      const std::optional<double> lib =
          c.library_rx_mbps ? std::optional<double>(c.library_rx_mbps->median) : std::nullopt;
      const std::optional<double> cnt = c.rx_mbps ? std::optional<double>(c.rx_mbps->median) : std::nullopt;
      s += fmt::format(
          "| {} | {} | {} | {:.0f} | {} | {} | {} | {} | {} |\n", c.arm, c.phase, c.gpu, ap->allreduce_calls->median,
          ap->allreduce_bytes_per_call ? fmt::format("{:.0f}", *ap->allreduce_bytes_per_call) : "N/A",
          fmt::format("{}", fmt::join(ap->paths, ", ")), mbps(lib), mbps(cnt), lib && cnt ? mbps(*cnt - *lib) : "N/A");
    }
    s += "\nother = counters − library: the traffic that is not AllReduce payload (activations, copies, protocol "
         "overhead, 8–17% on PCIe).\n";
  }
  s += wireSection(r);
  s += pmStepSection(r);
  // dmon beside counters; with PM alone neither ran (the runner's meter then reads no NVML counter and
  // makes no dmon call).
  if (!pm_only) s += dmonSection(r);
  s += "\n## What this means\n\n";
  for (const std::string& m : r.meaning) s += "- " + m + "\n";
  if (!r.failed.empty()) {
    s += "\n## Repetitions that failed their baseline\n\n";
    for (const std::string& f : r.failed) s += "- " + f + "\n";
  }
  return s;
}

}  // namespace tpscope::experiment
