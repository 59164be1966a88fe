// SPDX-License-Identifier: Apache-2.0
// guards.cc - effective settings, undeclared differences, availability.
#include "experiment/guards.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "allreduce/selector.h"

namespace tpscope::experiment {

const char* settingSourceName(SettingSource s) {
  switch (s) {
    case SettingSource::kDefault: return "default";
    case SettingSource::kShared: return "shared";
    case SettingSource::kArm: return "arm";
    case SettingSource::kDerived: return "derived";
    case SettingSource::kAuto: return "auto";
    case SettingSource::kEngine: return "engine";
  }
  return "?";
}

const Setting* EffectiveSettings::find(const std::string& key) const {
  for (const Setting& s : settings)
    if (s.key == key) return &s;
  return nullptr;
}

std::string EffectiveSettings::value(const std::string& key) const {
  const Setting* s = find(key);
  return s ? s->value : "";
}

std::vector<int> EffectiveSettings::devices() const { return parseDeviceList(value("devices")); }

void EffectiveSettings::set(const Setting& s) {
  for (Setting& old : settings)
    if (old.key == s.key) {
      old = s;
      return;
    }
  settings.push_back(s);
}

bool sharesGpu(const std::vector<int>& devices) {
  return std::set<int>(devices.begin(), devices.end()).size() != devices.size();
}

std::vector<int> parseDeviceList(const std::string& csv) {
  std::vector<int> out;
  for (size_t i = 0; i < csv.size();) {
    const size_t j = std::min(csv.find(',', i), csv.size());
    if (j > i) out.push_back(std::stoi(csv.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

const std::vector<std::string>& deltaKeys() {
  static const std::vector<std::string> k = {"devices",         "split",      "backend",         "wire",
                                             "tokens_per_step", "acceptance", "reduction",       "rope_kernel",
                                             "attention_pdl",   "allreduce",  "tpscope_backend", "draft",
                                             "spec_type",       "draft_max"};
  return k;
}
const std::vector<std::string>& derivedKeys() {
  static const std::vector<std::string> k = {"gpu_count", "allreduce_backend", "expected_tokens_per_step",
                                             "speculative_in_effect", "server_args"};
  return k;
}

namespace {

std::string num(double v) { return fmt::format("{:g}", v); }

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

template <typename T>
SettingSource sourceOf(const std::optional<T>& arm, const std::optional<T>& shared) {
  return arm ? SettingSource::kArm : shared ? SettingSource::kShared : SettingSource::kDefault;
}

bool isDeltaOrDerived(const std::string& key) {
  const auto& d = deltaKeys();
  const auto& v = derivedKeys();
  return std::find(d.begin(), d.end(), key) != d.end() || std::find(v.begin(), v.end(), key) != v.end();
}

}  // namespace

std::vector<EffectiveSettings> effectiveSettings(const ExperimentSpec& spec, const AutoDecider& decide) {
  const SharedSettings& sh = spec.shared;
  const SharedSettings defaults;
  const EngineSettings& en = sh.engine;
  const Engine engine = en.engine;
  auto shared = [&](bool differs) { return differs ? SettingSource::kShared : SettingSource::kDefault; };
  std::vector<EffectiveSettings> out;
  for (const ArmSpec& arm : spec.arms) {
    EffectiveSettings e;
    e.arm = arm.name;
    const ArmDelta& d = arm.delta;
    const ArmDelta& b = sh.base;
    const std::vector<int> devices = d.devices ? *d.devices : b.devices ? *b.devices : std::vector<int>{0};
    const SplitMode split = d.split ? *d.split : b.split.value_or(SplitMode::kNone);
    auto& S = e.settings;
    // Shared settings first, in spec order; each engine has its own.
    if (engine != Engine::kSynthetic) S.push_back({"engine", engineName(engine), SettingSource::kShared});
    if (engine == Engine::kSynthetic) S.push_back({"preset", sh.preset, shared(sh.preset != defaults.preset)});
    if (engine == Engine::kLlamaServer) {
      S.push_back({"server", en.server, SettingSource::kShared});
      S.push_back({"model", en.model, SettingSource::kShared});
      S.push_back({"flags", en.flags, shared(!en.flags.empty())});
      S.push_back({"start_timeout_s", num(en.start_timeout_s), shared(en.start_timeout_s != 600)});
      S.push_back({"request_timeout_s", num(en.request_timeout_s), shared(en.request_timeout_s != 300)});
    }
    if (engine == Engine::kCommand)
      S.push_back({"command", fmt::format("{}", fmt::join(en.command, " ")), SettingSource::kShared});
    if (engine != Engine::kCommand) {
      S.push_back(
          {"prompt_tokens", std::to_string(sh.prompt_tokens), shared(sh.prompt_tokens != defaults.prompt_tokens)});
      S.push_back(
          {"decode_tokens", std::to_string(sh.decode_tokens), shared(sh.decode_tokens != defaults.decode_tokens)});
    }
    if (engine == Engine::kSynthetic)
      S.push_back({"context", std::to_string(sh.context), shared(sh.context != defaults.context)});
    S.insert(S.end(),
             {
                 {"phases", fmt::format("{}", fmt::join(sh.phases, ",")), shared(sh.phases != defaults.phases)},
                 {"repetitions", std::to_string(sh.repetitions), shared(sh.repetitions != defaults.repetitions)},
                 {"idle_seconds", num(sh.idle_seconds), shared(sh.idle_seconds != defaults.idle_seconds)},
                 {"baseline_threshold_mbps", num(sh.baseline_threshold_mbps),
                  shared(sh.baseline_threshold_mbps != defaults.baseline_threshold_mbps)},
                 {"baseline_retries", std::to_string(sh.baseline_retries),
                  shared(sh.baseline_retries != defaults.baseline_retries)},
                 {"meter_period_ms", num(sh.meter_period_ms), shared(sh.meter_period_ms != defaults.meter_period_ms)},
                 {"meter_idle_period_ms", num(std::max(sh.meter_idle_period_ms, sh.meter_period_ms)),
                  shared(sh.meter_idle_period_ms != defaults.meter_idle_period_ms)},
                 {"meter_source", sh.meter_source, shared(sh.meter_source != defaults.meter_source)},
             });
    // PM's interval where PM samples: a run without it has no interval to compare.
    const std::optional<std::vector<std::string>> sources = parseMeterSources(sh.meter_source, nullptr);
    if (sources && std::find(sources->begin(), sources->end(), "pm") != sources->end())
      S.push_back(
          {"pm_interval_us", std::to_string(sh.pm_interval_us), shared(sh.pm_interval_us != defaults.pm_interval_us)});
    S.insert(S.end(), {
                          // The delta.
                          {"devices", joinInts(devices), sourceOf(d.devices, b.devices)},
                          {"split", splitModeName(split), sourceOf(d.split, b.split)},
                      });
    if (engine == Engine::kSynthetic) {
      const std::string backend = d.backend ? *d.backend : b.backend.value_or("auto");
      const int tps = d.tokens_per_step ? *d.tokens_per_step : b.tokens_per_step.value_or(1);
      const double acc = d.acceptance ? *d.acceptance : b.acceptance.value_or(1.0);
      const workload::DecodeKernels k;  // the model's defaults
      const workload::Reduction reduction = d.reduction ? *d.reduction : b.reduction.value_or(k.reduction);
      const workload::RopeKernel rope = d.rope_kernel ? *d.rope_kernel : b.rope_kernel.value_or(k.rope);
      const workload::AttentionPdl pdl = d.attention_pdl ? *d.attention_pdl : b.attention_pdl.value_or(k.attention_pdl);
      S.insert(S.end(),
               {
                   {"backend", backend, sourceOf(d.backend, b.backend)},
                   // What the tensor split's AllReduce travels as (the spec refuses a lossy wire elsewhere).
                   {"wire", d.wire ? *d.wire : b.wire.value_or("exact"), sourceOf(d.wire, b.wire)},
                   {"tokens_per_step", std::to_string(tps), sourceOf(d.tokens_per_step, b.tokens_per_step)},
                   {"acceptance", num(acc), sourceOf(d.acceptance, b.acceptance)},
                   // Which decode kernels run (attention_pdl's auto is one rule for every arm).
                   {"reduction", workload::reductionName(reduction), sourceOf(d.reduction, b.reduction)},
                   {"rope_kernel", workload::ropeKernelName(rope), sourceOf(d.rope_kernel, b.rope_kernel)},
                   {"attention_pdl", workload::attentionPdlName(pdl), sourceOf(d.attention_pdl, b.attention_pdl)},
                   // What follows from it. Only tensor split reduces across GPUs; the others carry activations.
                   {"gpu_count", std::to_string(devices.size()), SettingSource::kDerived},
                   {"allreduce_backend", split == SplitMode::kTensor ? backend : "none", SettingSource::kDerived},
                   {"expected_tokens_per_step", num(1 + (tps - 1) * acc), SettingSource::kDerived},
               });
    } else if (engine == Engine::kLlamaServer) {
      // "default": GGML_CUDA_ALLREDUCE is removed from the server's environment, so llama.cpp's own
      // default runs (nccl on Linux), never whatever the user's shell had set.
      const std::string allreduce = d.allreduce ? *d.allreduce : b.allreduce.value_or("default");
      // tpscope's backend (TPSCOPE_ALLREDUCE) under allreduce = "tpscope"; "none" under any other.
      const std::string tpscope_backend =
          allreduce == "tpscope" ? (d.tpscope_backend ? *d.tpscope_backend : b.tpscope_backend.value_or("auto"))
                                 : "none";
      const std::string reduction = allreduce == "tpscope" ? "tpscope-" + tpscope_backend : allreduce;
      const std::string draft = d.draft ? *d.draft : b.draft.value_or("none");
      const std::string type = d.spec_type ? *d.spec_type : b.spec_type.value_or("none");
      const auto draft_max = d.draft_max ? d.draft_max : b.draft_max;
      S.insert(
          S.end(),
          {
              {"allreduce", allreduce, sourceOf(d.allreduce, b.allreduce)},
              {"tpscope_backend", tpscope_backend, sourceOf(d.tpscope_backend, b.tpscope_backend)},
              // TPSCOPE_WIRE under allreduce = "tpscope"; "none" under any other.
              {"wire", allreduce == "tpscope" ? (d.wire ? *d.wire : b.wire.value_or("exact")) : "none",
               sourceOf(d.wire, b.wire)},
              {"draft", draft, sourceOf(d.draft, b.draft)},
              {"spec_type", type, sourceOf(d.spec_type, b.spec_type)},
              {"draft_max", draft_max ? std::to_string(*draft_max) : "default", sourceOf(d.draft_max, b.draft_max)},
              {"gpu_count", std::to_string(devices.size()), SettingSource::kDerived},
              {"allreduce_backend", split == SplitMode::kTensor ? reduction : "none", SettingSource::kDerived},
          });
    } else {
      S.push_back({"gpu_count", std::to_string(devices.size()), SettingSource::kDerived});
      S.push_back({"allreduce_backend", "none", SettingSource::kDerived});
    }
    if (decide)
      for (Setting s : decide(e)) {
        if (s.source != SettingSource::kEngine) s.source = SettingSource::kAuto;
        e.set(s);
      }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<Difference> undeclaredDifferences(const std::vector<EffectiveSettings>& arms) {
  std::vector<Difference> diffs;
  if (arms.size() < 2) return diffs;
  // Every key any arm has, in first-seen order: a setting one arm lacks is a difference too.
  std::vector<std::string> keys;
  for (const EffectiveSettings& e : arms)
    for (const Setting& s : e.settings)
      if (std::find(keys.begin(), keys.end(), s.key) == keys.end()) keys.push_back(s.key);
  for (const std::string& key : keys) {
    if (isDeltaOrDerived(key)) {
      // A delta key may differ, but not by an automatic decision (backend "auto" resolved per arm is
      // fine only when the decider reports it under allreduce_backend, which is derived).
      bool auto_decided = false;
      for (const EffectiveSettings& e : arms)
        if (const Setting* s = e.find(key); s && s->source == SettingSource::kAuto) auto_decided = true;
      if (!auto_decided) continue;
    }
    Difference d{key, {}, {}};
    bool differ = false;
    const Setting* first = arms[0].find(key);
    for (const EffectiveSettings& e : arms) {
      const Setting* s = e.find(key);
      d.values.emplace_back(e.arm, s ? s->value : "(unset)");
      d.sources.push_back(s ? settingSourceName(s->source) : "-");
      if ((s == nullptr) != (first == nullptr) || (s && first && s->value != first->value)) differ = true;
    }
    if (differ) diffs.push_back(std::move(d));
  }
  return diffs;
}

std::string formatDifferences(const std::vector<Difference>& diffs) {
  size_t w0 = 7, w1 = 3, w2 = 5;
  for (const Difference& d : diffs) {
    w0 = std::max(w0, d.setting.size());
    for (const auto& [arm, value] : d.values) {
      w1 = std::max(w1, arm.size());
      w2 = std::max(w2, value.size());
    }
  }
  std::string s = fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", "setting", w0, "arm", w1, "value", w2, "source");
  for (const Difference& d : diffs)
    for (size_t i = 0; i < d.values.size(); ++i)
      s += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", i == 0 ? d.setting : "", w0, d.values[i].first, w1,
                       d.values[i].second, w2, d.sources[i]);
  bool engine = false;
  for (const Difference& d : diffs)
    for (const std::string& src : d.sources) engine |= src == settingSourceName(SettingSource::kEngine);
  if (engine)
    s += "Arms must differ only in what they declare (devices, split, allreduce, wire, draft, spec_type, draft_max): "
         "the "
         "engine decided the settings above for itself; set them explicitly in the shared flags (and turn off what "
         "decides per arm, e.g. -fit off) so every arm runs them the same way.\n";
  else
    s += "Arms must differ only in what they declare (devices, split, backend, wire, tokens_per_step, acceptance, "
         "reduction, rope_kernel, attention_pdl): set the differing settings explicitly in [experiment] so every "
         "arm runs them the same way.\n";
  return s;
}

namespace {

// Why an arm whose positions share a GPU cannot run here ("" when it can, or when none share).
std::string sharedGpuRefusal(const EffectiveSettings& e, const Availability& box) {
  if (!sharesGpu(e.devices())) return "";
  const std::string ar = e.value("allreduce_backend");
  if (ar != "host")
    return fmt::format(
        "devices {} share a GPU, which runs AllReduce backend \"host\" only (not \"{}\"): its AllReduce then "
        "crosses PCIe through pinned host memory, where the meter sees it; p2p between positions of one GPU stays "
        "in its memory, and NCCL takes one rank per GPU",
        e.value("devices"), ar);
  const bool host = std::find(box.backends.begin(), box.backends.end(), tpsBackendHost) != box.backends.end();
  if (!host && !box.host_on_shared_gpu)
    return fmt::format("AllReduce backend \"host\" cannot run positions that share a GPU here{}",
                       box.backend_reasons.count(tpsBackendHost) ? ": " + box.backend_reasons.at(tpsBackendHost) : "");
  return "";
}

}  // namespace

std::vector<Refusal> checkAvailability(const std::vector<EffectiveSettings>& arms, const Availability& box) {
  auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  std::vector<Refusal> out;
  for (const EffectiveSettings& e : arms) {
    const std::string split = e.value("split");
    if (!has(box.split_modes, split)) {
      out.push_back({e.arm, fmt::format("split mode \"{}\" is not implemented in this build (implemented: {})", split,
                                        fmt::join(box.split_modes, ", "))});
      continue;
    }
    int max_dev = -1;
    const std::string devs = e.value("devices");
    for (int d : e.devices()) max_dev = std::max(max_dev, d);
    if (max_dev >= box.gpu_count) {
      out.push_back({e.arm,
                     fmt::format("devices {} need GPU {}, this box has {} GPU{}", devs, max_dev, box.gpu_count,
                                 box.gpu_count == 1 ? "" : "s"),
                     true});
      continue;
    }
    // A server's AllReduce is its own; the server's log says which ran (engine/llama_server.h).
    if (e.value("engine") == "llama-server" || e.value("engine") == "command") continue;
    if (const std::string no = sharedGpuRefusal(e, box); !no.empty()) {
      out.push_back({e.arm, no});
      continue;
    }
    const std::string ar = e.value("allreduce_backend");
    const bool shares = sharesGpu(e.devices());
    tpsBackend_t backend = tpsBackendAuto;
    const bool named = ar != "none" && ar != "auto";
    // Positions sharing a GPU on host staging passed sharedGpuRefusal(), which knows that case.
    if (named && !shares &&
        (!::tpscope::detail::parseBackendName(ar, &backend) ||
         std::find(box.backends.begin(), box.backends.end(), backend) == box.backends.end())) {
      const auto why = box.backend_reasons.find(backend);
      out.push_back({e.arm, fmt::format("AllReduce backend \"{}\" is not available here{}", ar,
                                        why != box.backend_reasons.end() ? ": " + why->second : "")});
      continue;
    }
    if (ar == "auto" && box.backends.empty()) {
      out.push_back({e.arm, "no AllReduce backend is available here for tensor split"});
      continue;
    }
    if (!box.presets.empty() && !has(box.presets, e.value("preset")))
      out.push_back({e.arm, fmt::format("preset \"{}\" is unknown (known: {})", e.value("preset"),
                                        fmt::join(box.presets, ", "))});
  }
  return out;
}

}  // namespace tpscope::experiment
