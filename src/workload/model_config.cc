// SPDX-License-Identifier: Apache-2.0
// model_config.cc - presets, validation and the per-GPU memory estimate.
#include "workload/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/param.h"
#include "workload/kernels.h"
#include "workload/presets_json.h"

namespace tpscope::workload {

namespace {

constexpr uint64_t kBf16 = 2;
// cuBLAS workspace per handle (set explicitly so graph capture never allocates) and a fixed
// allowance for small buffers (norm outputs, events, the attention partials).
constexpr uint64_t kCublasWorkspace = 32ull << 20;
constexpr uint64_t kFixedSlack = 16ull << 20;

struct Local {  // one GPU's share of a layer
  uint64_t q_heads, kv_heads, ffn;
};

Local localShare(const ModelConfig& c, SplitMode mode, int ngpu) {
  const uint64_t n = mode == SplitMode::kTensor ? static_cast<uint64_t>(ngpu) : 1;
  return {c.q_heads / n, c.kv_heads / n, c.ffn / n};
}

// Weight elements of one layer on one GPU: two norms (replicated), the fused QKV and output
// projections (column- and row-split by heads), the fused gate/up and down projections (by FFN columns).
uint64_t layerElements(const ModelConfig& c, const Local& l) {
  const uint64_t h = c.hidden, d = c.head_dim;
  const uint64_t qkv = (l.q_heads + 2 * l.kv_heads) * d;
  return 2 * h + h * qkv + l.q_heads * d * h + 3 * h * l.ffn;
}

}  // namespace

namespace {

// Each enum's printed names, one table per enum, read both ways.
constexpr std::pair<SplitMode, const char*> kSplitModes[] = {
    {SplitMode::kNone, "none"}, {SplitMode::kLayer, "layer"}, {SplitMode::kTensor, "tensor"}};
constexpr std::pair<PrefillAttention, const char*> kPrefillAttentions[] = {
    {PrefillAttention::kAuto, "auto"}, {PrefillAttention::kCudnn, "cudnn"}, {PrefillAttention::kKernel, "kernel"}};
constexpr std::pair<Reduction, const char*> kReductions[] = {
    {Reduction::kPushed, "pushed"}, {Reduction::kFused, "fused"}, {Reduction::kPlain, "plain"}};
constexpr std::pair<RopeKernel, const char*> kRopeKernels[] = {{RopeKernel::kAttention, "attention"},
                                                               {RopeKernel::kKernel, "kernel"}};
constexpr std::pair<AttentionPdl, const char*> kAttentionPdls[] = {
    {AttentionPdl::kAuto, "auto"}, {AttentionPdl::kOn, "on"}, {AttentionPdl::kOff, "off"}};

template <typename E, size_t N>
const char* nameIn(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

template <typename E, size_t N>
std::optional<E> parseIn(const std::pair<E, const char*> (&table)[N], const std::string& name) {
  for (const auto& [e, n] : table)
    if (name == n) return e;
  return std::nullopt;
}

}  // namespace

const char* splitModeName(SplitMode mode) { return nameIn(kSplitModes, mode); }
std::optional<SplitMode> parseSplitMode(const std::string& name) { return parseIn(kSplitModes, name); }
const char* prefillAttentionName(PrefillAttention a) { return nameIn(kPrefillAttentions, a); }
std::optional<PrefillAttention> parsePrefillAttention(const std::string& name) {
  return parseIn(kPrefillAttentions, name);
}
const char* reductionName(Reduction r) { return nameIn(kReductions, r); }
std::optional<Reduction> parseReduction(const std::string& name) { return parseIn(kReductions, name); }
const char* ropeKernelName(RopeKernel r) { return nameIn(kRopeKernels, r); }
std::optional<RopeKernel> parseRopeKernel(const std::string& name) { return parseIn(kRopeKernels, name); }
const char* attentionPdlName(AttentionPdl a) { return nameIn(kAttentionPdls, a); }
std::optional<AttentionPdl> parseAttentionPdl(const std::string& name) { return parseIn(kAttentionPdls, name); }

AttentionPdl resolveAttentionPdl(AttentionPdl a, const ModelConfig& config, SplitMode mode, int ngpu) {
  if (a != AttentionPdl::kAuto) return a;
  // A GPU's slice of a tensor split holds q_heads / ngpu query heads over kv_heads / ngpu KV heads: the
  // GQA group size is the model's either way, and only a tensor slice (fewer heads per GPU) turns it off.
  const bool slice = mode == SplitMode::kTensor && ngpu > 1;
  const bool big_groups = config.kv_heads > 0 && config.q_heads / config.kv_heads >= 8;
  return slice && big_groups ? AttentionPdl::kOff : AttentionPdl::kOn;
}

// The presets in src/workload/presets.json's order (its "about" says where each shape comes from),
// parsed once from the copy the build embedded.
const std::vector<ModelConfig>& presets() {
  static const std::vector<ModelConfig> all = [] {
    std::vector<ModelConfig> out;
    const nlohmann::json doc = nlohmann::json::parse(kPresetsJson);
    for (const nlohmann::json& p : doc.at("presets")) {
      ModelConfig c;
      c.preset = p.at("name").get<std::string>();
      c.hidden = p.at("hidden").get<int>();
      c.ffn = p.at("ffn").get<int>();
      c.layers = p.at("layers").get<int>();
      c.q_heads = p.at("q_heads").get<int>();
      c.kv_heads = p.at("kv_heads").get<int>();
      c.head_dim = p.at("head_dim").get<int>();
      out.push_back(c);
    }
    return out;
  }();
  return all;
}

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const ModelConfig& c : presets()) names.push_back(c.preset);
  return names;
}

std::optional<ModelConfig> presetConfig(const std::string& name) {
  for (const ModelConfig& c : presets())
    if (c.preset == name) return c;
  return std::nullopt;
}

std::string validateConfig(const ModelConfig& c, SplitMode mode, int ngpu) {
  const std::pair<const char*, int> dims[] = {{"hidden", c.hidden},     {"ffn", c.ffn},
                                              {"layers", c.layers},     {"q_heads", c.q_heads},
                                              {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}};
  for (const auto& [name, v] : dims)
    if (v <= 0) return fmt::format("{} must be positive (got {})", name, v);
  if (c.q_heads % c.kv_heads != 0)
    return fmt::format("q_heads ({}) must be a multiple of kv_heads ({})", c.q_heads, c.kv_heads);
  if (c.head_dim % 2 != 0 || c.head_dim > 256)
    return fmt::format("head_dim must be even and at most 256 (got {})", c.head_dim);
  if (!(c.rms_eps > 0)) return "rms_eps must be positive";
  if (mode == SplitMode::kNone && ngpu != 1)
    return fmt::format("split none runs on one GPU; give one device (got {})", ngpu);
  if (mode != SplitMode::kNone && ngpu < 2)
    return fmt::format("split {} needs at least 2 devices (got {})", splitModeName(mode), ngpu);
  if (ngpu > 8) return fmt::format("at most 8 devices (got {})", ngpu);
  if (mode == SplitMode::kTensor) {
    if (c.q_heads % ngpu || c.kv_heads % ngpu || c.ffn % ngpu)
      return fmt::format("split tensor over {} GPUs needs q_heads ({}), kv_heads ({}) and ffn ({}) divisible by {}",
                         ngpu, c.q_heads, c.kv_heads, c.ffn, ngpu);
  }
  if (mode == SplitMode::kLayer && c.layers < ngpu)
    return fmt::format("split layer over {} GPUs needs at least {} layers (got {})", ngpu, ngpu, c.layers);
  return "";
}

uint64_t layerWeightElements(const ModelConfig& c) { return layerElements(c, localShare(c, SplitMode::kNone, 1)); }

// The final RMSNorm's weights are counted with the model; there is no embedding or LM head (the
// input hidden states are generated, the output is the final hidden state).
uint64_t modelWeightElements(const ModelConfig& c) { return c.layers * layerWeightElements(c) + c.hidden; }

uint64_t weightBytesPerForward(const ModelConfig& c) { return modelWeightElements(c) * kBf16; }

LayerRange layerRange(int layers, int ngpu, int rank) {
  const int base = layers / ngpu, extra = layers % ngpu;
  const int first = rank * base + std::min(rank, extra);
  return {first, first + base + (rank < extra ? 1 : 0)};
}

std::vector<GpuMemory> estimateMemory(const ModelConfig& c, SplitMode mode, int ngpu, const RunShape& shape) {
  const Local l = localShare(c, mode, ngpu);
  const uint64_t d = c.head_dim, h = c.hidden, m = std::max(shape.max_tokens, 1);
  std::vector<GpuMemory> out(ngpu);
  for (int r = 0; r < ngpu; ++r) {
    const uint64_t layers =
        mode == SplitMode::kLayer
            ? static_cast<uint64_t>(layerRange(c.layers, ngpu, r).last - layerRange(c.layers, ngpu, r).first)
            : c.layers;
    GpuMemory& g = out[r];
    g.weights = (layers * layerElements(c, l) + h) * kBf16;
    g.kv_cache = 2 * layers * l.kv_heads * d * static_cast<uint64_t>(shape.ctx_capacity) * kBf16;
    // Per token: the residual x, the norm output, the projection partial, QKV, attention output,
    // gate|up and the activated FFN.
    const uint64_t per_token = 3 * h + (l.q_heads + 2 * l.kv_heads) * d + l.q_heads * d + 3 * l.ffn;
    // The attention pass's fp32 split-K partials (kernels.h attentionScratchFloats).
    const uint64_t scratch =
        static_cast<uint64_t>(attentionScratchFloats(static_cast<int>(m), l.q_heads, static_cast<int>(d))) * 4;
    g.activations = m * per_token * kBf16 + scratch + kCublasWorkspace + kFixedSlack;
  }
  return out;
}

std::string checkFit(const ModelConfig& c, SplitMode mode, const std::vector<GpuMemory>& need,
                     const std::vector<uint64_t>& free_bytes, const std::vector<int>& device_ids) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (size_t i = 0; i < need.size() && i < free_bytes.size(); ++i) {
    const double usable = 0.95 * static_cast<double>(free_bytes[i]);
    if (static_cast<double>(need[i].total()) > usable) {
      return fmt::format(
          "preset {} needs {:.1f} GiB per GPU in split {} (weights {:.1f}, KV cache {:.1f}, activations {:.1f}); "
          "GPU {} has {:.1f} GiB free: use fewer layers, a shorter --ctx, or split over more GPUs",
          c.preset, need[i].total() / kGiB, splitModeName(mode), need[i].weights / kGiB, need[i].kv_cache / kGiB,
          need[i].activations / kGiB, i < device_ids.size() ? device_ids[i] : static_cast<int>(i),
          free_bytes[i] / kGiB);
    }
  }
  return "";
}

std::string applyOverrides(const std::string& text, ModelConfig* c) {
  if (text.empty()) return "";
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return fmt::format("bad override '{}': write name=value, e.g. layers=2", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    const std::optional<int64_t> v = parseInt(value);
    if (!v || *v < 0 || *v > (1 << 20)) return fmt::format("bad value '{}' for {}: give a whole number", value, key);
    const int iv = static_cast<int>(*v);
    if (key == "hidden")
      c->hidden = iv;
    else if (key == "ffn")
      c->ffn = iv;
    else if (key == "layers")
      c->layers = iv;
    else if (key == "q_heads")
      c->q_heads = iv;
    else if (key == "kv_heads")
      c->kv_heads = iv;
    else if (key == "head_dim")
      c->head_dim = iv;
    else if (key == "rope")
      c->rope = iv != 0;
    else
      return fmt::format("unknown dimension '{}': use hidden, ffn, layers, q_heads, kv_heads, head_dim or rope", key);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (c->preset.find('+') == std::string::npos) c->preset += "+custom";
  return "";
}

}  // namespace tpscope::workload
