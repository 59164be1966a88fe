// SPDX-License-Identifier: Apache-2.0
// workload_phases.cc - an arm's effective settings -> workload::Model, runPrefill, runDecode.
#include "experiment/workload_phases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "allreduce/wire.h"
#include "meter/meter.h"
#include "workload/attention_cudnn.h"
#include "workload/model.h"
#include "workload/phases.h"

namespace tpscope::experiment {

namespace {

constexpr int kUbatch = 512;

tpsBackend_t backendOf(const std::string& name) {
  if (name == "host") return tpsBackendHost;
  if (name == "p2p") return tpsBackendP2p;
  if (name == "nccl") return tpsBackendNccl;
  return tpsBackendAuto;
}

// The library's accounting per path that carried calls, summed over size classes, scaled by `k`.
std::vector<PathCalls> pathCalls(const std::vector<PathStats>& stats, int ndev, uint64_t k) {
  std::vector<PathCalls> out;
  for (const PathStats& path : stats) {
    PathCalls pc;
    pc.path = path.name;
    pc.tx_bytes.assign(ndev, 0);
    pc.rx_bytes.assign(ndev, 0);
    for (const tpsStatsCell_t& c : path.cells) {
      pc.calls += c.calls * k;
      pc.payload_bytes += c.payload_bytes * k;
      for (int g = 0; g < ndev; ++g) {
        pc.tx_bytes[g] += c.tx_bytes[g] * k;
        pc.rx_bytes[g] += c.rx_bytes[g] * k;
      }
    }
    if (pc.calls) out.push_back(pc);
  }
  return out;
}

// The arm's decode kernel choices (its settings reduction, rope_kernel, attention_pdl; effectiveSettings
// writes all three). false with *reason for a value the workload does not know.
bool decodeKernels(const EffectiveSettings& arm, workload::DecodeKernels* k, std::string* reason) {
  const std::optional<workload::Reduction> reduction = workload::parseReduction(arm.value("reduction"));
  const std::optional<workload::RopeKernel> rope = workload::parseRopeKernel(arm.value("rope_kernel"));
  const std::optional<workload::AttentionPdl> pdl = workload::parseAttentionPdl(arm.value("attention_pdl"));
  if (!reduction || !rope || !pdl) {
    *reason = fmt::format(
        "decode kernels reduction = \"{}\", rope_kernel = \"{}\", attention_pdl = \"{}\": not all "
        "are the workload's",
        arm.value("reduction"), arm.value("rope_kernel"), arm.value("attention_pdl"));
    return false;
  }
  *k = {*reduction, *rope, *pdl};
  return true;
}

// The arm's wire (its setting "wire", exact by default) for its tensor split's communicator. TPSCOPE_WIRE
// would turn an arm's exact wire into another (the communicator reads it when the config says exact), so
// it must not be set: every arm declares its wire in the spec. false with *reason otherwise.
bool wireOf(const EffectiveSettings& arm, workload::ModelOptions* mo, std::string* reason) {
  if (const char* env = std::getenv("TPSCOPE_WIRE"); env && *env) {
    *reason =
        fmt::format("TPSCOPE_WIRE={} would set every arm's wire: unset it and give each arm's wire in the spec", env);
    return false;
  }
  const std::string text = arm.value("wire").empty() ? "exact" : arm.value("wire");
  tpscope::detail::WirePolicy policy;
  if (!tpscope::detail::parseWirePolicy(text, &policy, reason)) return false;
  mo->wire = policy.automatic ? tpsWireAuto : static_cast<tpsWire_t>(policy.wire);
  mo->wire_error_budget = static_cast<float>(policy.budget);
  return true;
}

class WorkloadArmPhases : public ArmPhases {
 public:
  tpsResult_t prepare(const EffectiveSettings& arm, std::vector<Setting>* decisions, std::string* reason) override {
    try {
      std::optional<workload::ModelConfig> cfg = workload::presetConfig(arm.value("preset"));
      if (!cfg) {
        *reason = "unknown preset \"" + arm.value("preset") + "\"";
        return tpsInvalidArgument;
      }
      std::optional<workload::SplitMode> split = workload::parseSplitMode(arm.value("split"));
      if (!split) {
        *reason = "split mode \"" + arm.value("split") + "\" is not implemented by the workload";
        return tpsUnavailable;
      }
      prefill_.prompt = std::stoi(arm.value("prompt_tokens"));
      prefill_.ubatch = kUbatch;
      decode_.tokens = std::stoi(arm.value("decode_tokens"));
      decode_.ctx = std::stoi(arm.value("context"));
      decode_.tokens_per_step = std::stoi(arm.value("tokens_per_step"));
      decode_.accept = std::stod(arm.value("acceptance"));
      // Tensor positions that share a GPU (devices 0,0) decode eagerly: one CUDA graph need not run the
      // positions' branches at once (Model::captureForward refuses it); the model cuts its AllReduce
      // grids so that they fit the GPU together (ModelOptions::shared_devices).
      decode_.graph = !sharesGpu(arm.devices());
      decode_.allreduce_share = false;  // the window must hold the measured steps only
      workload::ModelOptions mo;
      mo.config = *cfg;
      mo.split = *split;
      mo.devices = arm.devices();
      mo.shared_devices = sharesGpu(mo.devices);
      mo.backend = backendOf(arm.value("allreduce_backend"));
      if (!wireOf(arm, &mo, reason)) return tpsInvalidArgument;
      if (!decodeKernels(arm, &mo.kernels, reason)) return tpsInvalidArgument;
      // One KV capacity for every arm: the spec's context (plus the tokens a step verifies).
      mo.shape.ctx_capacity = std::max(prefill_.prompt, decode_.ctx + decode_.tokens_per_step);
      mo.shape.max_tokens = std::max(std::min(prefill_.ubatch, prefill_.prompt), decode_.tokens_per_step);
      if (const std::string bad = workload::validateConfig(mo.config, mo.split, static_cast<int>(mo.devices.size()));
          !bad.empty()) {
        *reason = bad;
        return tpsInvalidArgument;
      }
      model_.reset();
      if (tpsResult_t r = workload::Model::create(mo, &model_, reason); r != tpsSuccess) return r;
      *decisions = workloadDecisions(arm);
      for (Setting& d : *decisions)  // what the model runs, not what was foreseen
        if (d.key == "prefill_attention") d.value = workload::prefillAttentionName(model_->options().prefill_attention);
      return tpsSuccess;
    } catch (const std::exception& e) {
      *reason = std::string("bad effective setting: ") + e.what();
      return tpsInvalidArgument;
    }
  }

  tpsResult_t runPhases(const std::vector<std::string>& phases, std::vector<PhaseOutcome>* out,
                        std::string* reason) override {
    if (!model_) {
      *reason = "runPhases before prepare";
      return tpsInvalidUsage;
    }
    for (const std::string& p : phases) {
      if (p != "prefill" && p != "decode") {
        *reason = "unknown phase \"" + p + "\"";
        return tpsInvalidArgument;
      }
      workload::PhaseResult r;
      const int64_t called = Meter::now();
      // The workload marks the timed window on the meter (begin/end around synchronised edges) and
      // resets the library's statistics right before it.
      tpsResult_t rc = p == "prefill" ? workload::runPrefill(*model_, prefill_, meter_, &r, reason)
                                      : workload::runDecode(*model_, decode_, meter_, &r, reason);
      if (rc != tpsSuccess) return rc;
      const int64_t returned = Meter::now();
      PhaseOutcome o;
      o.phase = p;
      // The window the workload marked; without a meter: the timed length ending when the call returned.
      o.end_ns = returned;
      o.start_ns = returned - static_cast<int64_t>(r.seconds * 1e9);
      if (meter_) {
        const std::vector<MeterWindow> ws = meter_->windows();
        for (auto w = ws.rbegin(); w != ws.rend(); ++w)
          if (w->name == p && w->start_ns >= called && w->end_ns <= returned) {
            o.start_ns = w->start_ns, o.end_ns = w->end_ns;
            break;
          }
      }
      o.tokens = static_cast<int64_t>(r.tokens + 0.5);
      o.steps = r.steps;
      if (model_->comm()) {
        // The workload's statistics for its window; a decode graph's are one step's, scaled here.
        o.allreduce =
            pathCalls(r.allreduce_stats, r.allreduce_ranks, static_cast<uint64_t>(std::max(r.stats_scale, 1)));
      }
      if (p == "decode") {
        // The last step's output, last token: what the report compares between arms (a wire's error).
        std::vector<float> rows;
        if (model_->readOutput(decode_.tokens_per_step, &rows) == tpsSuccess) {
          const size_t hidden = static_cast<size_t>(model_->options().config.hidden);
          if (rows.size() >= hidden) o.output.assign(rows.end() - static_cast<std::ptrdiff_t>(hidden), rows.end());
        }
      }
      out->push_back(o);
    }
    return tpsSuccess;
  }

  void useMeter(Meter* meter) override { meter_ = meter; }

 private:
  Meter* meter_ = nullptr;
  std::unique_ptr<workload::Model> model_;
  workload::PrefillOptions prefill_;
  workload::DecodeOptions decode_;
};

}  // namespace

std::vector<Setting> workloadDecisions(const EffectiveSettings& arm) {
  const bool cudnn = workload::CudnnAttention::available(nullptr);
  return {{"cuda_graph", sharesGpu(arm.devices()) ? "off" : "on", SettingSource::kAuto},
          {"prefill_ubatch", std::to_string(kUbatch), SettingSource::kAuto},
          {"prefill_attention", cudnn ? "cudnn" : "kernel", SettingSource::kAuto}};
}

std::unique_ptr<ArmPhases> makeWorkloadArmPhases() { return std::make_unique<WorkloadArmPhases>(); }

}  // namespace tpscope::experiment
