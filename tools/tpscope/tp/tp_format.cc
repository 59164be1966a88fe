// SPDX-License-Identifier: Apache-2.0
// tp/tp_format.cc - `tpscope tp` table and JSON.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "tp/tp_command.h"
#include "tpscope/tpscope.h"
#include "tpscope/version.h"

namespace tpscope::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string deviceText(const std::vector<int>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s;
}

// The op-by-op table of one phase's profiled forward: a column group per GPU.
std::string formatProfile(const workload::PhaseResult& r, const std::vector<int>& devices) {
  const auto& gpus = r.profile;
  std::string s = fmt::format(
      "# {} profile: one forward of {} token(s) at position {}, eager, ops back to back behind a spin kernel; per "
      "op the GPU time summed over its calls (CUDA events); GB/s = weights (projections) or K and V "
      "(attention) read / time, TF/s = attention TFLOP/s\n",
      r.phase, r.tokens_per_forward, r.profile_pos0);
  s += fmt::format("{:<24} {:>6}", "op", "calls");
  for (size_t g = 0; g < gpus.size(); ++g)
    s += fmt::format(" {:>11} {:>6} {:>6} {:>5}", fmt::format("GPU{} us", g < devices.size() ? devices[g] : int(g)),
                     "share", "GB/s", "TF/s");
  s += "\n";
  std::vector<double> total(gpus.size(), 0.0);
  for (size_t g = 0; g < gpus.size(); ++g)
    for (const workload::OpTime& t : gpus[g]) total[g] += t.us;
  // Rows in GPU 0's order, then any op only a later GPU has (a layer split's hand-off).
  std::vector<std::string> ops;
  for (const auto& list : gpus)
    for (const workload::OpTime& t : list)
      if (std::find(ops.begin(), ops.end(), t.op) == ops.end()) ops.push_back(t.op);
  for (const std::string& op : ops) {
    int calls = 0;
    std::string cells;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const workload::OpTime* t = nullptr;
      for (const workload::OpTime& x : gpus[g])
        if (x.op == op) t = &x;
      if (!t) {
        cells += fmt::format(" {:>11} {:>6} {:>6} {:>5}", "-", "-", "-", "-");
        continue;
      }
      calls = std::max(calls, t->calls);
      cells += fmt::format(" {:>11.1f} {:>5.1f}% {:>6} {:>5}", t->us, total[g] > 0 ? 100.0 * t->us / total[g] : 0.0,
                           t->bytes && t->us > 0 ? fmt::format("{:.0f}", t->bytes / (t->us * 1e3)) : "-",
                           t->flops > 0 && t->us > 0 ? fmt::format("{:.0f}", t->flops / (t->us * 1e6)) : "-");
    }
    s += fmt::format("{:<24} {:>6}{}\n", op, calls, cells);
  }
  s += fmt::format("{:<24} {:>6}", "total", "");
  for (double t : total) s += fmt::format(" {:>11.1f} {:>6} {:>6} {:>5}", t, "", "", "");
  s += "\n";
  return s;
}

nlohmann::json profileJson(const workload::PhaseResult& r, const std::vector<int>& devices) {
  if (r.profile.empty()) return nullptr;
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t g = 0; g < r.profile.size(); ++g) {
    nlohmann::json ops = nlohmann::json::array();
    double total = 0;
    for (const workload::OpTime& t : r.profile[g]) {
      total += t.us;
      ops.push_back(
          {{"op", t.op},
           {"calls", t.calls},
           {"us", t.us},
           {"weight_bytes", t.bytes},
           {"gbps", t.bytes && t.us > 0 ? nlohmann::json(t.bytes / (t.us * 1e3)) : nlohmann::json(nullptr)},
           {"tflops", t.flops > 0 && t.us > 0 ? nlohmann::json(t.flops / (t.us * 1e6)) : nlohmann::json(nullptr)}});
    }
    gpus.push_back({{"device", g < devices.size() ? devices[g] : static_cast<int>(g)},
                    {"position", r.profile_pos0},
                    {"total_us", total},
                    {"ops", ops}});
  }
  return gpus;
}

}  // namespace

workload::RunShape runShape(const TpOptions& o) {
  workload::RunShape s;
  const bool prefill = o.phase != "decode", decode = o.phase != "prefill";
  s.ctx_capacity = std::max(prefill ? o.prefill.prompt : 0, decode ? o.decode.ctx + o.decode.tokens_per_step : 0);
  s.max_tokens =
      std::max(prefill ? std::min(o.prefill.ubatch, o.prefill.prompt) : 0, decode ? o.decode.tokens_per_step : 0);
  return s;
}

std::string formatTpTable(const TpOptions& o, const std::vector<workload::GpuMemory>& estimate,
                          const std::vector<workload::PhaseResult>& results) {
  const workload::ModelConfig& c = o.config;
  std::string s = fmt::format("# tpscope tp {} (git {})\n", TPSCOPE_VERSION_STRING, tpsGetGitRevision());
  s += fmt::format(
      "# preset {}: hidden {}, ffn {}, {} layers, {}/{} heads x {}, rope {} | split {} on GPU {} | "
      "backend {} | prefill attention {} | seed {}\n",
      c.preset, c.hidden, c.ffn, c.layers, c.q_heads, c.kv_heads, c.head_dim, c.rope ? "on" : "off",
      workload::splitModeName(o.split), deviceText(o.devices),
      o.split == workload::SplitMode::kTensor ? o.backend : "-", o.prefill_attention, o.seed);
  s += fmt::format("# decode kernels: reduction {} | rope kernel {} | attention pdl {}\n",
                   o.split == workload::SplitMode::kTensor ? o.reduction : "-", o.rope_kernel, o.attention_pdl);
  s += fmt::format("# weights {:.2f} GiB bf16 (bytes streamed per forward)\n",
                   workload::weightBytesPerForward(c) / kGiB);
  for (size_t i = 0; i < estimate.size(); ++i)
    s += fmt::format("# GPU {}: weights {:.2f} GiB, KV cache {:.2f} GiB, activations {:.2f} GiB\n",
                     i < o.devices.size() ? o.devices[i] : static_cast<int>(i), estimate[i].weights / kGiB,
                     estimate[i].kv_cache / kGiB, estimate[i].activations / kGiB);
  s += "# timer: host steady clock from first enqueue to synchronize of every GPU, after 1 untimed warm-up\n";
  if (o.phase != "prefill")
    s += fmt::format(
        "# decode: context {}, {} token(s) verified per step, acceptance {:.2f} -> {:.2f} emitted per step\n",
        o.decode.ctx, o.decode.tokens_per_step, o.decode.accept, workload::emittedPerStep(o.decode));
  s += fmt::format("{:<8} {:>9} {:>7} {:>9} {:>11} {:>10} {:>11} {:>5} {:>10} {:>14}\n", "phase", "tokens", "steps",
                   "tok/fwd", "time(ms)", "ms/step", "tokens/s", "graph", "allreduces", "ar_bytes/GPU");
  for (const workload::PhaseResult& r : results)
    s += fmt::format("{:<8} {:>9.0f} {:>7} {:>9} {:>11.2f} {:>10.3f} {:>11.1f} {:>5} {:>10} {:>14}\n", r.phase,
                     r.tokens, r.steps, r.tokens_per_forward, r.seconds * 1e3, r.ms_per_step, r.tokens_per_s,
                     r.graph ? "yes" : "no", r.allreduce_calls, r.allreduce_bytes);
  for (const workload::PhaseResult& r : results) {
    if (!r.graph_note.empty()) s += fmt::format("# {} ran eagerly: {}\n", r.phase, r.graph_note);
    if (r.ms_per_step_without_allreduce > 0)
      s += fmt::format("# {} without its AllReduces: {:.3f} ms per step; AllReduce share of a step {:.1f} %\n", r.phase,
                       r.ms_per_step_without_allreduce, 100.0 * r.allreduce_share);
    if (r.roofline_ms_per_step > 0)
      s += fmt::format(
          "# {} roofline: weights per GPU / copy rate {:.0f} GB/s = {:.3f} ms per step; measured {:.3f} "
          "ms = {:.1f} % of the roofline\n",
          r.phase, r.copy_gbps, r.roofline_ms_per_step, r.ms_per_step, 100.0 * r.roofline_ms_per_step / r.ms_per_step);
  }
  for (const workload::PhaseResult& r : results)
    if (!r.profile.empty()) s += "\n" + formatProfile(r, o.devices);
  return s;
}

nlohmann::json tpDocument(const TpOptions& o, const std::vector<workload::GpuMemory>& estimate,
                          const std::vector<workload::PhaseResult>& results, const std::vector<std::string>& argv) {
  const workload::ModelConfig& c = o.config;
  char start[32] = {};
  const std::time_t t = std::time(nullptr);
  std::strftime(start, sizeof(start), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  nlohmann::json mem = nlohmann::json::array();
  for (size_t i = 0; i < estimate.size(); ++i)
    mem.push_back({{"device", i < o.devices.size() ? o.devices[i] : static_cast<int>(i)},
                   {"weights_bytes", estimate[i].weights},
                   {"kv_cache_bytes", estimate[i].kv_cache},
                   {"activations_bytes", estimate[i].activations}});
  nlohmann::json res = nlohmann::json::array();
  for (const workload::PhaseResult& r : results)
    res.push_back({{"phase", r.phase},
                   {"tokens", r.tokens},
                   {"steps", r.steps},
                   {"tokens_per_forward", r.tokens_per_forward},
                   {"time_ms", r.seconds * 1e3},
                   {"ms_per_step", r.ms_per_step},
                   {"tokens_per_s", r.tokens_per_s},
                   {"graph", r.graph},
                   {"graph_note", r.graph_note.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.graph_note)},
                   {"allreduce_calls", r.allreduce_calls},
                   {"allreduce_bytes_per_gpu", r.allreduce_bytes},
                   {"ms_per_step_without_allreduce", r.ms_per_step_without_allreduce > 0
                                                         ? nlohmann::json(r.ms_per_step_without_allreduce)
                                                         : nlohmann::json(nullptr)},
                   {"allreduce_share",
                    r.ms_per_step_without_allreduce > 0 ? nlohmann::json(r.allreduce_share) : nlohmann::json(nullptr)},
                   {"copy_gbps", r.copy_gbps > 0 ? nlohmann::json(r.copy_gbps) : nlohmann::json(nullptr)},
                   {"roofline_ms_per_step",
                    r.roofline_ms_per_step > 0 ? nlohmann::json(r.roofline_ms_per_step) : nlohmann::json(nullptr)},
                   {"share_of_roofline", r.roofline_ms_per_step > 0 && r.ms_per_step > 0
                                             ? nlohmann::json(r.roofline_ms_per_step / r.ms_per_step)
                                             : nlohmann::json(nullptr)},
                   {"profile", profileJson(r, o.devices)}});
  return {{"json_schema_version", 1},
          {"context",
           {{"version", TPSCOPE_VERSION_STRING},
            {"git_sha", tpsGetGitRevision()},
            {"argv", argv},
            {"start_time", start},
            {"timer", "host steady clock, enqueue to synchronize, 1 warm-up"}}},
          {"config",
           {{"preset", c.preset},
            {"hidden", c.hidden},
            {"ffn", c.ffn},
            {"layers", c.layers},
            {"q_heads", c.q_heads},
            {"kv_heads", c.kv_heads},
            {"head_dim", c.head_dim},
            {"rope", c.rope},
            {"split", workload::splitModeName(o.split)},
            {"devices", o.devices},
            {"backend", o.backend},
            {"communicator", communicatorJson(o.communicator)},
            {"prefill_attention", o.prefill_attention},
            {"reduction", o.reduction},
            {"rope_kernel", o.rope_kernel},
            {"attention_pdl", o.attention_pdl},
            {"seed", o.seed},
            {"phase", o.phase},
            {"prompt", o.prefill.prompt},
            {"ubatch", o.prefill.ubatch},
            {"decode_tokens", o.decode.tokens},
            {"ctx", o.decode.ctx},
            {"tokens_per_step", o.decode.tokens_per_step},
            {"accept", o.decode.accept},
            {"graph", o.decode.graph},
            {"weight_bytes_per_forward", workload::weightBytesPerForward(c)}}},
          {"memory_estimate", mem},
          {"results", res}};
}

}  // namespace tpscope::cli
