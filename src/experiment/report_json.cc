// SPDX-License-Identifier: Apache-2.0
// report_json.cc - the report as JSON (report.json of a run folder, `tpscope report --format json`).
#include "experiment/report_render.h"
#include "experiment/report_text.h"
#include "meter/pm_bursts.h"

namespace tpscope::experiment {

using detail::armPhase;
using detail::describe;
using nlohmann::json;

namespace {

json spreadJson(const std::optional<MeterSpread>& s) {
  if (!s) return nullptr;
  return {{"median", s->median}, {"min", s->min}, {"max", s->max}, {"n", s->n}};
}

// The decode steps PM sampled: the rule the bursts are counted by, a row per arm and GPU, and the first
// valid repetition's records for the plot.
json pmStepsJson(const Report& r) {
  json rows = json::array();
  for (const ReportPmStep& p : r.pm_steps) {
    json samples = json::array();
    for (const PmStepSample& x : p.samples) samples.push_back(json::array({x.t_ns, x.tx_bytes, x.rx_bytes}));
    rows.push_back({{"arm", p.arm},
                    {"gpu", p.gpu},
                    {"interval_us", p.interval_us},
                    {"step_ms", spreadJson(p.step_ms)},
                    {"records", spreadJson(p.records)},
                    {"tx_bytes", spreadJson(p.tx_bytes)},
                    {"rx_bytes", spreadJson(p.rx_bytes)},
                    {"bursts", spreadJson(p.bursts)},
                    {"allreduce_calls_per_step", spreadJson(p.allreduce_calls)},
                    {"bursts_per_call", spreadJson(p.bursts_per_call)},
                    {"notes", p.notes},
                    {"plot", {{"repetition", p.repetition}, {"step_ns", p.step_ns}, {"samples", samples}}}});
  }
  const tpscope::detail::PmBurstRule& rule = tpscope::detail::kStepBurstRule;
  return {{"burst_rule",
           {{"counter", tpscope::detail::pmDirectionName(rule.direction)},
            {"threshold_mbps", rule.threshold_mbps},
            {"min_gap_us", rule.min_gap_us}}},
          {"rows", rows}};
}

}  // namespace

json toJson(const Report& r) {
  json arms = json::array();
  for (const ReportArm& a : r.arms) {
    json phases = json::object();
    for (const std::string& p : r.phases) {
      const ReportArmPhase* ap = armPhase(r, a.name, p);
      if (!ap) continue;
      phases[p] = {{"tok_s", spreadJson(ap->tok_s)},
                   {"step_ms", spreadJson(ap->step_ms)},
                   {"rx_per_card_mbps", jsonOrNull(ap->rx_per_card_mbps)},
                   {"tx_per_card_mbps", jsonOrNull(ap->tx_per_card_mbps)},
                   {"allreduce_calls", spreadJson(ap->allreduce_calls)},
                   {"allreduce_bytes_per_call", jsonOrNull(ap->allreduce_bytes_per_call)},
                   {"allreduce_calls_per_token", jsonOrNull(ap->allreduce_calls_per_token)},
                   {"allreduce_paths", ap->paths}};
      if (ap->client_tok_s) {  // an engine that reports its own timings
        phases[p]["client_tok_s"] = spreadJson(ap->client_tok_s);
        phases[p]["engine_ms"] = spreadJson(ap->engine_ms);
        phases[p]["window_ms"] = spreadJson(ap->window_ms);
      }
    }
    arms.push_back({{"arm", a.name},
                    {"setup", describe(a)},
                    {"split", a.split},
                    {"devices", a.devices},
                    {"gpu_count", a.gpu_count},
                    {"allreduce_backend", a.backend},
                    {"tokens_per_step", a.tokens_per_step},
                    {"acceptance", a.acceptance},
                    {"wire", a.wire},
                    {"output_error",
                     a.output_error ? json{{"reference", a.output_reference}, {"rel_rms", spreadJson(a.output_error)}}
                                    : json(nullptr)},
                    {"valid_repetitions", a.valid_repetitions},
                    {"attempts", a.attempts},
                    {"phases", phases}});
    if (a.positions != a.gpu_count) arms.back()["positions"] = a.positions;  // positions that share a GPU
    if (!a.recorded_on.empty()) arms.back()["recorded_on"] = a.recorded_on;  // shown from a recorded run
  }
  json cells = json::array();
  for (const ReportCell& c : r.cells)
    cells.push_back({{"arm", c.arm},
                     {"phase", c.phase},
                     {"gpu", c.gpu},
                     {"rx_mbps", spreadJson(c.rx_mbps)},
                     {"tx_mbps", spreadJson(c.tx_mbps)},
                     {"dmon_rx_mbps", spreadJson(c.dmon_rx_mbps)},
                     {"dmon_tx_mbps", spreadJson(c.dmon_tx_mbps)},
                     {"nvlink_rx_mbps", spreadJson(c.nvlink_rx_mbps)},
                     {"nvlink_tx_mbps", spreadJson(c.nvlink_tx_mbps)},
                     {"library_rx_mbps", spreadJson(c.library_rx_mbps)},
                     {"library_tx_mbps", spreadJson(c.library_tx_mbps)},
                     {"samples_per_repetition", c.samples},
                     {"pcie_ceiling_mbps", jsonOrNull(c.ceiling_mbps)},
                     {"share_of_ceiling", jsonOrNull(c.share_of_ceiling)}});
  json net = json::array();
  for (const NetCost& n : r.net)
    net.push_back({{"phase", n.phase},
                   {"tensor_arm", n.tensor_arm},
                   {"layer_arm", n.layer_arm},
                   {"tensor_rx_mbps", n.tensor_rx_mbps},
                   {"layer_rx_mbps", n.layer_rx_mbps},
                   {"net_rx_mbps", n.net_rx_mbps},
                   {"ratio", n.ratio}});
  json busiest = nullptr;
  if (r.busiest)
    busiest = {{"arm", r.busiest->arm},
               {"phase", r.busiest->phase},
               {"gpu", r.busiest->gpu},
               {"direction", r.busiest->direction},
               {"mbps", r.busiest->mbps},
               {"share_of_ceiling", r.busiest->share},
               {"ceiling_mbps", r.busiest->ceiling_mbps}};
  json out = {{"experiment", r.experiment},
              {"start_time", r.start_time},
              {"recording", r.recording},
              {"machine", r.machine},
              {"phases", r.phases},
              {"arms", arms},
              {"cells", cells},
              {"net_allreduce", net},
              {"busiest", busiest},
              {"failed_baselines", r.failed},
              {"meaning", r.meaning},
              {"windows", r.windows}};
  if (!r.engine.empty()) out["engine"] = r.engine;
  if (!r.recorded_from.empty()) out["recorded_from"] = r.recorded_from;
  // Only where the run asked for PM, so runs metered by NVML alone keep their shape.
  if (!r.meter_source.empty() && r.meter_source != "nvml") out["meter_source"] = r.meter_source;
  if (!r.pm_steps.empty()) out["decode_step_pm"] = pmStepsJson(r);
  return out;
}

}  // namespace tpscope::experiment
