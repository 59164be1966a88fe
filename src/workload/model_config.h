// SPDX-License-Identifier: Apache-2.0
// model_config.h - the synthetic transformer's shape: presets, overrides, validation, memory estimate.
//
// Host-only and GPU-free, so every rule here is unit-tested on any machine. The GPU model
// (model.h) is built from a validated ModelConfig and RunShape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpscope::workload {

// A decoder-only transformer with grouped-query attention and a gated FFN, bf16 weights.
struct ModelConfig {
  std::string preset;  // "tiny", "8b", "32b" or "custom" after an override
  int hidden = 0;      // model width (n_embd)
  int ffn = 0;         // FFN inner width
  int layers = 0;
  int q_heads = 0;   // query heads
  int kv_heads = 0;  // key/value heads (grouped-query attention: q_heads is a multiple)
  int head_dim = 0;
  bool rope = true;
  float rms_eps = 1e-5f;
};

enum class SplitMode { kNone, kLayer, kTensor };

// Which attention runs a prefill's micro-batches: cuDNN's fused flash attention (attention_cudnn.h) or
// tpscope's own kernel (kernels.h). kAuto: cuDNN where it loads and takes the shape, else the kernel;
// kCudnn refuses to run without it. Decode steps always take the decode kernel.
enum class PrefillAttention { kAuto, kCudnn, kKernel };
const char* prefillAttentionName(PrefillAttention a);  // "auto", "cudnn", "kernel"
std::optional<PrefillAttention> parsePrefillAttention(const std::string& name);
// How `tensor` reduces each layer's partials and applies the residual add and next RMSNorm after them:
//   kPushed  the projections that make the partials send them to the peers as they finish (p2p push
//            channels, allreduce/push.h), and the reduction only waits and sums, fused with the add and
//            norm; where a forward cannot push (not p2p, or a shape the channel does not take): kPlain.
//            The default: the fastest for tensor decode (docs/PERFORMANCE.md, "Workload (tp)").
//   kFused   tpsAllReduceAddRmsNorm, one library kernel for the reduction, add and norm, where the
//            library has it (p2p LL sizes); elsewhere kPlain.
//   kPlain   tpsAllReduce, then the add + norm kernel.
enum class Reduction { kPushed, kFused, kPlain };
const char* reductionName(Reduction r);  // "pushed", "fused", "plain"
std::optional<Reduction> parseReduction(const std::string& name);

// Where decode applies RoPE and stores the step's K and V: inside the decode attention kernel (kAttention,
// one kernel fewer per layer; the default) or in a kernel of its own before it (kKernel, as prefill does).
enum class RopeKernel { kAttention, kKernel };
const char* ropeKernelName(RopeKernel r);  // "attention", "kernel"
std::optional<RopeKernel> parseRopeKernel(const std::string& name);

// Whether the decode attention kernel is launched as a programmatic dependent of the kernel before it.
// kAuto: on, except for a tensor-parallel slice with GQA groups of 8 or more, where it measured slower
// (docs/PERFORMANCE.md, "Workload (tp)"); resolveAttentionPdl says which.
enum class AttentionPdl { kAuto, kOn, kOff };
const char* attentionPdlName(AttentionPdl a);  // "auto", "on", "off"
std::optional<AttentionPdl> parseAttentionPdl(const std::string& name);

// The choices that decide which decode kernels run, beyond the split and the backend. Every record
// carries them (`tpscope tp` JSON, the arms' settings).
struct DecodeKernels {
  Reduction reduction = Reduction::kPushed;
  RopeKernel rope = RopeKernel::kAttention;
  AttentionPdl attention_pdl = AttentionPdl::kAuto;
};

// `a`, with kAuto resolved for `config` split `mode` over `ngpu` GPUs: kOn or kOff.
AttentionPdl resolveAttentionPdl(AttentionPdl a, const ModelConfig& config, SplitMode mode, int ngpu);

const char* splitModeName(SplitMode mode);  // "none", "layer", "tensor"
std::optional<SplitMode> parseSplitMode(const std::string& name);

// The presets by name; nullopt for an unknown name. presetNames() lists them for error messages.
std::optional<ModelConfig> presetConfig(const std::string& name);
std::vector<std::string> presetNames();

// The sizes one run needs from the model: the KV cache holds ctx_capacity positions and a forward
// pass sees at most max_tokens tokens (the prefill micro-batch or the tokens verified per step).
struct RunShape {
  int ctx_capacity = 0;
  int max_tokens = 0;
};

// "" when `config` can run split `mode` over `ngpu` GPUs, else one sentence saying what to change.
// Rules: every dimension positive; q_heads a multiple of kv_heads; head_dim even (RoPE rotates
// pairs) and at most 256 (the attention kernel's register tile); `none` needs exactly 1 GPU and
// the others at least 2; `tensor` needs q_heads, kv_heads and ffn divisible by ngpu; `layer` needs
// at least one layer per GPU.
std::string validateConfig(const ModelConfig& config, SplitMode mode, int ngpu);

// Parameter counts (elements, not bytes) of the whole model.
uint64_t layerWeightElements(const ModelConfig& config);
uint64_t modelWeightElements(const ModelConfig& config);
// Weight bytes a decode step streams from memory once per forward: all bf16 weights.
uint64_t weightBytesPerForward(const ModelConfig& config);

// What one GPU holds in a split, in bytes.
struct GpuMemory {
  uint64_t weights = 0;
  uint64_t kv_cache = 0;
  uint64_t activations = 0;  // forward buffers for max_tokens plus the cuBLAS workspace
  uint64_t total() const { return weights + kv_cache + activations; }
  GpuMemory& operator+=(const GpuMemory& o) {
    weights += o.weights, kv_cache += o.kv_cache, activations += o.activations;
    return *this;
  }
};
// One entry per GPU position in the split. Layers of a `layer` split go to GPUs as layerRange says.
std::vector<GpuMemory> estimateMemory(const ModelConfig& config, SplitMode mode, int ngpu, const RunShape& shape);

// The contiguous layer range [first, last) of GPU `rank` in a `layer` split over ngpu GPUs: the
// remainder goes to the first GPUs, one layer each.
struct LayerRange {
  int first = 0, last = 0;
};
LayerRange layerRange(int layers, int ngpu, int rank);

// "" when every GPU's estimate fits its free memory (free_bytes[i] for GPU position i, with a 5 %
// margin for the CUDA context and fragmentation), else one sentence: "preset 32b needs 70.1 GiB per
// GPU in split none; GPU 0 has 60.0 GiB free". `device_ids` name the GPUs in the message.
std::string checkFit(const ModelConfig& config, SplitMode mode, const std::vector<GpuMemory>& need,
                     const std::vector<uint64_t>& free_bytes, const std::vector<int>& device_ids);

// Parses "hidden=4096,ffn=12288,layers=2,q_heads=32,kv_heads=8,head_dim=128,rope=0" into `config`
// (preset becomes "<preset>+custom"); "" on success, else one sentence naming the bad item.
std::string applyOverrides(const std::string& text, ModelConfig* config);

}  // namespace tpscope::workload
