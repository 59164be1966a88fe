// SPDX-License-Identifier: Apache-2.0
// report.cc - statistics across repetitions, the study's tables, "what this means" (the renderers are
// report_markdown.cc and report_json.cc).
#include "experiment/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "experiment/report_text.h"
#include "meter/pm_bursts.h"

namespace tpscope::experiment {

using nlohmann::json;

namespace {

using Values = std::vector<std::optional<double>>;
using detail::armPhase;
using detail::describe;
using detail::mbps;
using detail::pct;
using detail::tok;

const PhaseResult* findPhase(const RepetitionResult& r, const std::string& phase) {
  for (const PhaseResult& p : r.phases)
    if (p.phase == phase) return &p;
  return nullptr;
}

const GpuTraffic* findGpu(const PhaseResult& p, int gpu) {
  for (const GpuTraffic& g : p.gpus)
    if (g.gpu == gpu) return &g;
  return nullptr;
}

const ReportArm* armNamed(const Report& r, const std::string& name) {
  for (const ReportArm& a : r.arms)
    if (a.name == name) return &a;
  return nullptr;
}
// The fastest arm of `split` (tokens_per_step 1 unless none has it) in `phase`.
const ReportArmPhase* fastest(const Report& r, const std::string& split, const std::string& phase, bool single_token) {
  const ReportArmPhase* best = nullptr;
  for (const ReportArm& a : r.arms) {
    if (a.split != split || (single_token && a.tokens_per_step != 1)) continue;
    const ReportArmPhase* p = armPhase(r, a.name, phase);
    if (p && p->tok_s && (!best || p->tok_s->median > best->tok_s->median)) best = p;
  }
  return best;
}

void explain(Report* r) {
  auto& m = r->meaning;
  // Which split wins, per phase: the best layer arm against the best single-token tensor arm.
  for (const std::string& phase : r->phases) {
    const ReportArmPhase* layer = fastest(*r, "layer", phase, true);
    const ReportArmPhase* tensor = fastest(*r, "tensor", phase, true);
    const char* work =
        phase == "prefill" ? "Prefill-heavy work (long prompt, short answer)" : "Decode-heavy work (long generation)";
    if (!layer || !tensor) continue;
    const bool layer_wins = layer->tok_s->median >= tensor->tok_s->median;
    const ReportArmPhase* w = layer_wins ? layer : tensor;
    const ReportArmPhase* l = layer_wins ? tensor : layer;
    m.push_back(fmt::format("{}: {} split wins on this box, {} at {} tok/s is {:.0f}% faster than {} at {} tok/s.",
                            work, layer_wins ? "layer" : "tensor", w->arm, tok(w->tok_s->median),
                            (w->tok_s->median / l->tok_s->median - 1) * 100, l->arm, tok(l->tok_s->median)));
  }
  // Multi-token steps: the same round trips amortised over more tokens.
  for (const ReportArm& a : r->arms) {
    if (a.split != "tensor" || a.tokens_per_step == 1) continue;
    const ReportArmPhase* base = fastest(*r, "tensor", "decode", true);
    const ReportArmPhase* me = armPhase(*r, a.name, "decode");
    if (!base || !me || !me->tok_s) continue;
    m.push_back(
        fmt::format("{} tokens per step ({}) decode {:+.0f}% over {}: fewer AllReduce round trips per token, "
                    "not more bandwidth.",
                    a.tokens_per_step, a.name, (me->tok_s->median / base->tok_s->median - 1) * 100, base->arm));
  }
  if (r->busiest) {
    const BusiestCell& b = *r->busiest;
    const std::string where =
        fmt::format("arm {} {} GPU {} {} {} MB/s", b.arm, b.phase, b.gpu, b.direction, mbps(b.mbps));
    if (b.share < 0.25)
      m.push_back(
          fmt::format("The bus is far from its ceiling: the busiest cell ({}) is {} of {} MB/s per direction. "
                      "A faster bus would buy nothing for these phases.",
                      where, pct(b.share), mbps(b.ceiling_mbps)));
    else if (b.share < 0.7)
      m.push_back(fmt::format("The bus is busy but not saturated: the busiest cell ({}) is {} of its ceiling.", where,
                              pct(b.share)));
    else
      m.push_back(
          fmt::format("The bus is near its ceiling: the busiest cell ({}) is {} of {} MB/s. A faster link "
                      "or a path that avoids it would help.",
                      where, pct(b.share), mbps(b.ceiling_mbps)));
  }
  // Decode: bytes or round trips?
  for (const ReportArmPhase& p : r->arm_phases) {
    const ReportArm* a = armNamed(*r, p.arm);
    if (p.phase != "decode" || !a || a->split != "tensor" || a->tokens_per_step != 1 || !p.allreduce_calls_per_token)
      continue;
    double share = 0;
    for (const ReportCell& c : r->cells)
      if (c.arm == p.arm && c.phase == "decode" && c.share_of_ceiling) share = std::max(share, *c.share_of_ceiling);
    if (share < 0.05)
      m.push_back(
          fmt::format("Decode under tensor split ({}) makes {:.0f} AllReduce calls per token and uses {} of "
                      "the bus: it is limited by round trips, not bytes.",
                      p.arm, *p.allreduce_calls_per_token, pct(share)));
    break;
  }
  // Thin sampling.
  int lo = 1 << 30, hi = 0;
  for (const ReportCell& c : r->cells)
    if (c.phase == "decode")
      for (int s : c.samples) lo = std::min(lo, s), hi = std::max(hi, s);
  if (hi > 0 && lo < 10)
    m.push_back(
        fmt::format("Decode windows hold {}–{} counter reads per repetition: read the decode rates as order "
                    "of magnitude, the prefill rates as citable.",
                    lo, hi));
  if (r->failed.empty())
    m.push_back("Every repetition passed its idle baseline; none was discarded.");
  else
    m.push_back(fmt::format("{} attempt{} failed the idle baseline and {} listed below, excluded from the statistics.",
                            r->failed.size(), r->failed.size() == 1 ? "" : "s", r->failed.size() == 1 ? "is" : "are"));
}

}  // namespace

// The meter's own traffic per GPU: its bytes over the valid phase windows' time.
static void ownTraffic(const RunRecord& run, Report* r) {
  std::map<int, std::array<double, 3>> per_gpu;  // gpu -> own rx bytes, own tx bytes, seconds
  int gross = 0;
  for (const RepetitionResult& rep : run.repetitions) {
    if (!rep.valid) continue;
    for (const PhaseResult& p : rep.phases)
      for (const GpuTraffic& g : p.gpus) {
        if (!g.own_rx_bytes || !g.own_tx_bytes) {
          ++gross;
          continue;
        }
        auto& a = per_gpu[g.gpu];
        a[0] += *g.own_rx_bytes;
        a[1] += *g.own_tx_bytes;
        a[2] += p.seconds();
      }
  }
  for (const auto& [gpu, a] : per_gpu)
    if (a[2] > 0)
      r->own.push_back(fmt::format("the meter's own reads: {:.2f} MB/s rx, {:.2f} MB/s tx on GPU {}", a[0] / a[2] / 1e6,
                                   a[1] / a[2] / 1e6, gpu));
  if (gross > 0 && !per_gpu.empty())
    r->own_note = fmt::format("{} GPU windows were not calibrated and include the meter's own reads.", gross);
  else if (gross > 0)
    r->own_note = "The meter was not calibrated in this run: its figures include the meter's own reads.";
}

namespace {

// "Engine: llama-server (build B), model M (FTYPE), flags `F`", from the first arm's settings; "" for the
// synthetic engine.
std::string engineLine(const Manifest& man) {
  if (man.effective.empty() || man.effective[0].value("engine").empty()) return "";
  const EffectiveSettings& e = man.effective[0];
  std::string s = "Engine: " + e.value("engine");
  if (const std::string b = e.value("server_build_info"); !b.empty()) s += " (build " + b + ")";
  if (const std::string m = e.value("model"); !m.empty()) {
    std::string ftype = e.value("server_model_ftype");
    s += ", model " + m.substr(m.find_last_of('/') + 1) + (ftype.empty() ? "" : " (" + ftype + ")");
  }
  if (const std::string f = e.value("flags"); !f.empty()) s += ", flags `" + f + "`";
  if (const std::string c = e.value("command"); !c.empty()) s += ", command `" + c + "`";
  return s;
}

// Arm `name` as its effective settings describe it (one GPU, no split, no AllReduce without them).
ReportArm reportArm(const Manifest& man, const std::string& name) {
  ReportArm a;
  a.name = name;
  a.devices = "0";
  a.split = "none";
  a.backend = "none";
  for (const EffectiveSettings& e : man.effective)
    if (e.arm == name) {
      a.split = e.value("split");
      a.devices = e.value("devices");
      a.backend = e.value("allreduce_backend");
      if (!e.value("wire").empty()) a.wire = e.value("wire");
      a.tokens_per_step = std::stoi(e.value("tokens_per_step").empty() ? "1" : e.value("tokens_per_step"));
      a.acceptance = std::strtod(e.value("acceptance").empty() ? "1" : e.value("acceptance").c_str(), nullptr);
      const std::string draft = e.value("draft"), type = e.value("spec_type"), n = e.value("draft_max");
      if ((!draft.empty() && draft != "none") || (!type.empty() && type != "none")) {
        a.speculative = !type.empty() && type != "none" ? type : "draft " + (draft == "self" ? draft : "model");
        if (!n.empty() && n != "default") a.speculative += ", up to " + n;
      }
    }
  const std::vector<int> devs = parseDeviceList(a.devices);
  a.positions = static_cast<int>(devs.size());
  a.gpu_count = static_cast<int>(std::set<int>(devs.begin(), devs.end()).size());
  return a;
}

// Arm a's valid repetitions; counts its attempts, lists the invalid ones in r->failed and every phase
// window in r->windows.
std::vector<const RepetitionResult*> validRepetitions(const RunRecord& run, ReportArm* a, Report* r) {
  std::vector<const RepetitionResult*> reps;
  for (const RepetitionResult& rep : run.repetitions) {
    if (rep.arm != a->name) continue;
    ++a->attempts;
    if (rep.valid)
      reps.push_back(&rep);
    else
      r->failed.push_back(fmt::format("arm {} repetition {} attempt {}: {}", a->name, rep.repetition + 1,
                                      rep.attempt + 1,
                                      !rep.disturbed.empty()       ? rep.disturbed
                                      : rep.quiesce.reason.empty() ? "baseline failed"
                                                                   : rep.quiesce.reason));
    for (const PhaseResult& p : rep.phases)
      r->windows.push_back({{"arm", a->name},
                            {"repetition", rep.repetition},
                            {"attempt", rep.attempt},
                            {"valid", rep.valid},
                            {"phase", p.phase},
                            {"start_ns", p.start_ns},
                            {"end_ns", p.end_ns}});
  }
  a->valid_repetitions = static_cast<int>(reps.size());
  return reps;
}

// A number the engine reported (its JSON is kept as it came), or nullopt where it has none.
std::optional<double> engineNumber(const nlohmann::json& engine, const char* key) {
  if (!engine.is_object() || !engine.contains(key) || !engine.at(key).is_number()) return std::nullopt;
  return engine.at(key).get<double>();
}

// An arm's figures in one phase across its valid repetitions: tok/s, step time, the engine's own figures,
// AllReduce calls and paths. The per-card traffic is added from the cells.
ReportArmPhase phaseFigures(const std::string& arm, const std::string& phase,
                            const std::vector<const RepetitionResult*>& reps) {
  ReportArmPhase ap;
  ap.arm = arm;
  ap.phase = phase;
  Values tok_s, step_ms, calls, client_tok_s, engine_ms, window_ms, acceptance;
  bool engine_figures = false;
  std::vector<double> bytes_per_call, calls_per_token;
  for (const RepetitionResult* rep : reps)
    if (const PhaseResult* p = findPhase(*rep, phase)) {
      engine_figures |= p->engine_tok_s.has_value();
      // A command engine reports no tokens: its tok/s is N/A, not 0.
      tok_s.push_back(p->engine_tok_s ? p->engine_tok_s
                      : p->tokens > 0 ? std::optional<double>(p->tok_s)
                                      : std::nullopt);
      client_tok_s.push_back(p->tok_s);
      engine_ms.push_back(p->engine_ms);
      window_ms.push_back(p->seconds() * 1e3);
      if (const auto drafted = engineNumber(p->engine, "draft_n"); drafted && *drafted > 0)
        acceptance.push_back(engineNumber(p->engine, "draft_n_accepted").value_or(0) / *drafted);
      step_ms.push_back(p->step_ms);
      uint64_t c = 0, payload = 0;
      for (const PathCalls& pc : p->allreduce) {
        c += pc.calls;
        payload += pc.payload_bytes;
        if (pc.calls && std::find(ap.paths.begin(), ap.paths.end(), pc.path) == ap.paths.end())
          ap.paths.push_back(pc.path);
      }
      if (!p->allreduce.empty()) calls.push_back(static_cast<double>(c));
      if (c) bytes_per_call.push_back(static_cast<double>(payload) / c);
      if (c && p->tokens) calls_per_token.push_back(static_cast<double>(c) / p->tokens);
    }
  ap.tok_s = meterSpread(tok_s);
  ap.step_ms = meterSpread(step_ms);
  if (engine_figures) {
    ap.client_tok_s = meterSpread(client_tok_s);
    ap.engine_ms = meterSpread(engine_ms);
    ap.window_ms = meterSpread(window_ms);
    ap.draft_acceptance = meterSpread(acceptance);
  }
  ap.allreduce_calls = meterSpread(calls);
  auto median = [](std::vector<double> v) -> std::optional<double> {
    Values o(v.begin(), v.end());
    const auto s = meterSpread(o);
    return s ? std::optional<double>(s->median) : std::nullopt;
  };
  ap.allreduce_bytes_per_call = median(bytes_per_call);
  ap.allreduce_calls_per_token = median(calls_per_token);
  return ap;
}

// One GPU's traffic in one phase of an arm across its valid repetitions; `positions` are the GPU's places
// in the arm's device list (the library's per-GPU accounting is by position; positions that share a
// GPU add up on its link).
ReportCell trafficCell(const std::string& arm, const std::string& phase, int gpu, const std::vector<size_t>& positions,
                       const std::vector<const RepetitionResult*>& reps) {
  ReportCell cell;
  cell.arm = arm;
  cell.phase = phase;
  cell.gpu = gpu;
  Values rx, tx, drx, dtx, nrx, ntx, lrx, ltx;
  for (const RepetitionResult* rep : reps) {
    const PhaseResult* p = findPhase(*rep, phase);
    const GpuTraffic* g = p ? findGpu(*p, cell.gpu) : nullptr;
    if (!g) continue;
    rx.push_back(g->rx_mbps);
    tx.push_back(g->tx_mbps);
    drx.push_back(g->dmon_rx_mbps);
    dtx.push_back(g->dmon_tx_mbps);
    nrx.push_back(g->nvlink_rx_mbps);
    ntx.push_back(g->nvlink_tx_mbps);
    cell.samples.push_back(g->samples);
    cell.dmon_samples.push_back(g->dmon_samples);
    if (g->ceiling_mbps) cell.ceiling_mbps = g->ceiling_mbps;
    if (!p->allreduce.empty() && p->seconds() > 0) {
      double lr = 0, lt = 0;
      for (const PathCalls& pc : p->allreduce)
        for (size_t pos : positions) {
          if (pos < pc.rx_bytes.size()) lr += static_cast<double>(pc.rx_bytes[pos]);
          if (pos < pc.tx_bytes.size()) lt += static_cast<double>(pc.tx_bytes[pos]);
        }
      lrx.push_back(lr / p->seconds() / 1e6);
      ltx.push_back(lt / p->seconds() / 1e6);
    }
  }
  cell.rx_mbps = meterSpread(rx);
  cell.tx_mbps = meterSpread(tx);
  cell.dmon_rx_mbps = meterSpread(drx);
  cell.dmon_tx_mbps = meterSpread(dtx);
  cell.nvlink_rx_mbps = meterSpread(nrx);
  cell.nvlink_tx_mbps = meterSpread(ntx);
  cell.library_rx_mbps = meterSpread(lrx);
  cell.library_tx_mbps = meterSpread(ltx);
  if (cell.ceiling_mbps && *cell.ceiling_mbps > 0 && (cell.rx_mbps || cell.tx_mbps)) {
    const double peak = std::max(cell.rx_mbps ? cell.rx_mbps->median : 0, cell.tx_mbps ? cell.tx_mbps->median : 0);
    cell.share_of_ceiling = peak / *cell.ceiling_mbps;
  }
  return cell;
}

// The cell as the busiest so far when its peak direction beats r->busiest.
void considerBusiest(const ReportCell& cell, Report* r) {
  if (!cell.share_of_ceiling) return;
  const double peak = std::max(cell.rx_mbps ? cell.rx_mbps->median : 0, cell.tx_mbps ? cell.tx_mbps->median : 0);
  const bool tx_wins = cell.tx_mbps && (!cell.rx_mbps || cell.tx_mbps->median > cell.rx_mbps->median);
  if (!r->busiest || peak > r->busiest->mbps)
    r->busiest = BusiestCell{
        cell.arm, cell.phase, tx_wins ? "tx" : "rx", cell.gpu, peak, *cell.share_of_ceiling, *cell.ceiling_mbps};
}

// Net AllReduce cost: every tensor arm against the first layer arm with as many GPUs.
void netCosts(Report* r) {
  for (const std::string& phase : r->phases)
    for (const ReportArm& t : r->arms) {
      if (t.split != "tensor") continue;
      const ReportArm* layer = nullptr;
      for (const ReportArm& l : r->arms)
        if (l.split == "layer" && l.gpu_count == t.gpu_count) {
          layer = &l;
          break;
        }
      if (!layer) continue;
      const ReportArmPhase* tp = armPhase(*r, t.name, phase);
      const ReportArmPhase* lp = armPhase(*r, layer->name, phase);
      if (!tp || !lp || !tp->rx_per_card_mbps || !lp->rx_per_card_mbps) continue;
      NetCost n{phase,
                t.name,
                layer->name,
                *tp->rx_per_card_mbps,
                *lp->rx_per_card_mbps,
                *tp->rx_per_card_mbps - *lp->rx_per_card_mbps,
                0};
      n.ratio = n.layer_rx_mbps > 0 ? n.tensor_rx_mbps / n.layer_rx_mbps : 0;
      r->net.push_back(n);
    }
}

// A step as the runner records it: an interval the meter takes (10 us - 1 s) and edges at most an hour
// apart. Anything else is a corrupt record, reported and not read further.
bool plausibleStep(const PmStep& st) {
  int64_t len = 0;
  return st.interval_us >= 1 && st.interval_us <= 1000000 && !__builtin_sub_overflow(st.end_ns, st.start_ns, &len) &&
         len > 0 && len <= 3600 * int64_t{1000000000};
}

// One GPU's step as meter records (each lasts the interval); records that do not overlap the step
// [0, len_ns) (none the runner writes) are left out.
std::vector<MeterRecord> stepRecords(const PmStepGpu& g, int64_t interval_ns, int64_t len_ns) {
  std::vector<MeterRecord> out;
  for (const PmStepSample& x : g.samples) {
    if (x.t_ns <= -interval_ns || x.t_ns >= len_ns) continue;
    MeterRecord m;
    m.t_start_ns = x.t_ns;
    m.t_end_ns = x.t_ns + interval_ns;
    m.bytes = {x.tx_bytes, x.rx_bytes};
    out.push_back(m);
  }
  return out;
}

// One GPU's step figures of one repetition, across the repetitions: what a ReportPmStep's spreads are of.
struct StepValues {
  Values step_ms, records, tx_bytes, rx_bytes, bursts, calls, bursts_per_call;
  void add(const PmStep& st, const PmStepGpu& g) {
    const int64_t len = st.end_ns - st.start_ns;
    const tpscope::detail::PmStepFigures f = tpscope::detail::pmStepFigures(
        stepRecords(g, st.interval_us * 1000, len), 0, len, st.interval_us, tpscope::detail::kStepBurstRule);
    const double n = f.bursts;
    step_ms.push_back(len * 1e-6);
    records.push_back(f.records);
    tx_bytes.push_back(f.tx_bytes);
    rx_bytes.push_back(f.rx_bytes);
    bursts.push_back(n);
    calls.push_back(st.allreduce_calls_per_step);
    if (st.allreduce_calls_per_step && *st.allreduce_calls_per_step > 0)
      bursts_per_call.push_back(n / *st.allreduce_calls_per_step);
  }
  void spreadInto(ReportPmStep* row) const {
    row->step_ms = meterSpread(step_ms);
    row->records = meterSpread(records);
    row->tx_bytes = meterSpread(tx_bytes);
    row->rx_bytes = meterSpread(rx_bytes);
    row->bursts = meterSpread(bursts);
    row->allreduce_calls = meterSpread(calls);
    row->bursts_per_call = meterSpread(bursts_per_call);
  }
};

// Arm a's decode steps, one row per GPU, from the valid repetitions that recorded one; the first of them
// gives the row its records for the plot.
void pmSteps(const std::string& arm, const std::vector<const RepetitionResult*>& reps, Report* r) {
  std::vector<ReportPmStep> rows;
  std::map<int, StepValues> values;  // by GPU
  std::vector<std::string> corrupt;
  for (const RepetitionResult* rep : reps) {
    const PhaseResult* p = findPhase(*rep, "decode");
    if (!p || !p->pm_step) continue;
    const PmStep& st = *p->pm_step;
    if (!plausibleStep(st)) {
      corrupt.push_back(fmt::format("repetition {}: the recorded step is not one (interval {} us, {} to {} ns)",
                                    rep->repetition + 1, st.interval_us, st.start_ns, st.end_ns));
      continue;
    }
    for (const PmStepGpu& g : st.gpus) {
      auto row = std::find_if(rows.begin(), rows.end(), [&](const ReportPmStep& x) { return x.gpu == g.gpu; });
      if (row == rows.end()) {
        ReportPmStep n;
        n.arm = arm;
        n.gpu = g.gpu;
        n.interval_us = st.interval_us;
        n.repetition = rep->repetition;
        n.step_ns = st.end_ns - st.start_ns;
        n.samples = g.samples;
        row = rows.insert(rows.end(), std::move(n));
      }
      if (!st.complete) row->notes.push_back(fmt::format("repetition {}: {}", rep->repetition + 1, st.note));
      values[g.gpu].add(st, g);
    }
  }
  for (ReportPmStep& row : rows) {
    values[row.gpu].spreadInto(&row);
    row.notes.insert(row.notes.end(), corrupt.begin(), corrupt.end());
    r->pm_steps.push_back(std::move(row));
  }
}

// Whether arms a and b run the same settings but for their wire (what decides which arm's output another
// is measured against). Where an arm has no effective settings both must lack them.
bool sameButWire(const Manifest& man, const std::string& a, const std::string& b) {
  const EffectiveSettings *ea = nullptr, *eb = nullptr;
  for (const EffectiveSettings& e : man.effective) {
    if (e.arm == a) ea = &e;
    if (e.arm == b) eb = &e;
  }
  if (!ea || !eb) return false;
  auto values = [](const EffectiveSettings& e) {
    std::map<std::string, std::string> v;
    for (const Setting& s : e.settings)
      if (s.key != "wire") v[s.key] = s.value;
    return v;
  };
  return values(*ea) == values(*eb);
}

// sqrt(sum (y - ref)^2 / sum ref^2); nullopt for outputs of different sizes, none, or a zero reference.
std::optional<double> relativeRms(const std::vector<float>& y, const std::vector<float>& ref) {
  if (y.empty() || y.size() != ref.size()) return std::nullopt;
  double err = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - ref[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  if (!(norm > 0)) return std::nullopt;
  return std::sqrt(err / norm);
}

// Each arm's decode output against its reference arm's (ReportArm::output_error).
void outputErrors(const RunRecord& run, Report* r) {
  const Manifest& man = run.manifest;
  auto decodeOutput = [&](const std::string& arm, int repetition) -> const std::vector<float>* {
    const std::vector<float>* first = nullptr;
    for (const RepetitionResult& rep : run.repetitions) {
      if (rep.arm != arm || !rep.valid) continue;
      const PhaseResult* p = findPhase(rep, "decode");
      if (!p || p->output.empty()) continue;
      if (rep.repetition == repetition) return &p->output;
      if (!first) first = &p->output;
    }
    return first;
  };
  for (ReportArm& a : r->arms) {
    const ReportArm* ref = nullptr;
    for (const ReportArm& c : r->arms)
      if (c.wire == "exact" && sameButWire(man, a.name, c.name)) {
        ref = &c;
        break;
      }
    if (!ref || ref->name == a.name) continue;
    Values errors;
    for (const RepetitionResult& rep : run.repetitions) {
      if (rep.arm != a.name || !rep.valid) continue;
      const PhaseResult* p = findPhase(rep, "decode");
      const std::vector<float>* want = decodeOutput(ref->name, rep.repetition);
      if (p && want) errors.push_back(relativeRms(p->output, *want));
    }
    a.output_error = meterSpread(errors);
    if (a.output_error) a.output_reference = ref->name;
  }
}

}  // namespace

Report buildReport(const RunRecord& run) {
  const Manifest& man = run.manifest;
  Report r;
  r.experiment = man.experiment;
  r.start_time = man.start_time;
  r.recording = man.recording;
  r.machine = man.machine.value("description", man.machine.value("hostname", std::string()));
  r.phases = man.phases;
  r.engine = engineLine(man);
  if (!man.effective.empty()) r.meter_source = man.effective[0].value("meter_source");
  for (const std::string& name : man.arms) {
    ReportArm a = reportArm(man, name);
    const std::vector<const RepetitionResult*> reps = validRepetitions(run, &a, &r);
    // Each GPU once, in the order the arm lists them, with its positions.
    const std::vector<int> devices = parseDeviceList(a.devices);
    std::vector<std::pair<int, std::vector<size_t>>> gpus;
    for (size_t pos = 0; pos < devices.size(); ++pos) {
      auto g = std::find_if(gpus.begin(), gpus.end(), [&](const auto& x) { return x.first == devices[pos]; });
      if (g == gpus.end()) g = gpus.insert(gpus.end(), {devices[pos], {}});
      g->second.push_back(pos);
    }
    for (const std::string& phase : man.phases) {
      ReportArmPhase ap = phaseFigures(name, phase, reps);
      // Per card: the mean over the arm's GPUs of each GPU's median.
      double rx_sum = 0, tx_sum = 0;
      int rx_n = 0, tx_n = 0;
      for (const auto& [gpu, positions] : gpus) {
        ReportCell cell = trafficCell(name, phase, gpu, positions, reps);
        if (cell.rx_mbps) rx_sum += cell.rx_mbps->median, ++rx_n;
        if (cell.tx_mbps) tx_sum += cell.tx_mbps->median, ++tx_n;
        considerBusiest(cell, &r);
        r.cells.push_back(std::move(cell));
      }
      if (rx_n) ap.rx_per_card_mbps = rx_sum / rx_n;
      if (tx_n) ap.tx_per_card_mbps = tx_sum / tx_n;
      r.arm_phases.push_back(std::move(ap));
    }
    pmSteps(name, reps, &r);
    r.arms.push_back(a);
  }
  outputErrors(run, &r);
  netCosts(&r);
  ownTraffic(run, &r);
  explain(&r);
  return r;
}

Report withRecordedArms(Report r, const RunRecord& recording, const std::vector<std::string>& arms,
                        const std::string& source) {
  RunRecord only = recording;
  only.manifest.arms.clear();
  for (const std::string& a : recording.manifest.arms)
    if (std::find(arms.begin(), arms.end(), a) != arms.end()) only.manifest.arms.push_back(a);
  const Report rec = buildReport(only);
  const std::string machine = !rec.recording.empty() ? rec.recording : "recorded on " + rec.machine;
  r.recorded_from = source + ": " + machine;
  for (ReportArm a : rec.arms) {
    a.recorded_on = rec.machine.empty() ? machine : rec.machine;
    r.arms.push_back(std::move(a));
  }
  r.arm_phases.insert(r.arm_phases.end(), rec.arm_phases.begin(), rec.arm_phases.end());
  r.cells.insert(r.cells.end(), rec.cells.begin(), rec.cells.end());
  r.net.insert(r.net.end(), rec.net.begin(), rec.net.end());
  r.pm_steps.insert(r.pm_steps.end(), rec.pm_steps.begin(), rec.pm_steps.end());
  for (const std::string& f : rec.failed) r.failed.push_back("recorded: " + f);
  for (const std::string& m : rec.meaning) r.meaning.push_back("Recorded arms (" + machine + "): " + m);
  return r;
}

}  // namespace tpscope::experiment
