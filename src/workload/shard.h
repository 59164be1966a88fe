// SPDX-License-Identifier: Apache-2.0
// shard.h - one GPU's part of the synthetic transformer: its weights, KV cache, buffers and the
// per-layer operations the split runners (model.cc) sequence.
//
// A shard holds layers [first_layer, last_layer) and, within each, a contiguous range of query heads,
// KV heads and FFN columns (all of them unless the split is `tensor`). Weights are generated on the
// GPU from (seed, tensor, global index), so a shard holds exactly its slice of the unsplit model.
// All operations enqueue on the shard's stream and return without synchronising.
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <utility>

#include "common/cuda_raii.h"
#include "workload/attention_cudnn.h"
#include "workload/kernels.h"
#include "workload/model_config.h"
#include "workload/profile.h"

namespace tpscope::workload {

struct ShardDims {
  int first_layer = 0, last_layer = 0;
  int q_heads = 0, kv_heads = 0, ffn = 0;            // local counts
  int q_head_off = 0, kv_head_off = 0, ffn_off = 0;  // global index of the first local one
};

class Shard {
 public:
  ~Shard();
  // Allocates and generates everything; *reason says what failed.
  // cudnn_attention: prefill micro-batches take cuDNN's flash attention (attention_cudnn.h). kernels:
  // the decode kernel choices, attention_pdl resolved (never kAuto).
  static tpsResult_t create(const ModelConfig& config, const ShardDims& dims, const RunShape& shape, int device,
                            uint64_t seed, bool cudnn_attention, const DecodeKernels& kernels,
                            std::unique_ptr<Shard>* out, std::string* reason);

  // x = the model input for `tokens` tokens at positions pos0.. (generated from the seed); with token >= 0
  // (one token), the embedding of token id `token` instead: row `token` of a generated table, so a
  // sequence of tokens, not positions, decides the inputs.
  tpsResult_t fillInput(int tokens, int pos0, int token = -1);
  // Fills cache positions [0, positions) of every local layer with generated K and V: the context
  // a decode step attends to, without running a prefill first.
  tpsResult_t fillContext(int positions);
  // partial = Wo . attention(xn) for global layer `layer` (a partial sum in `tensor` split). xn is
  // RMSNorm(x), computed here for the shard's first layer and by residual() before every other.
  tpsResult_t attentionBlock(int layer, int tokens, int pos0);
  // partial = Wdown . (silu(Wgate . xn) * (Wup . xn)), xn from residual(layer, kAfterAttention).
  tpsResult_t ffnBlock(int layer, int tokens);
  // x += partial (the residual add, after the AllReduce in `tensor` split), fused with the RMSNorm
  // that comes next: the FFN norm after attention; after the FFN the next layer's attention norm, or
  // the final norm after the model's last layer (xn is then the output), or none at a stage boundary.
  enum After { kAfterAttention, kAfterFfn };
  tpsResult_t residual(int layer, int tokens, After after);
  // The norm weight residual(layer, ., after) applies, or null at a stage boundary (no norm there).
  const bf16_t* nextNorm(int layer, After after) const;
  bf16_t* xn() const { return xn_.as<bf16_t>(); }
  // After a fused reduction that wrote the new residual into the partial buffer: the two buffers trade
  // roles (x() is then that buffer). Every forward swaps an even number of times.
  void swapResidualAndPartial() { std::swap(x_, partial_); }

  // Pushed reductions (tensor split, decode): while a channel is set, the two projections that make
  // the partial (attentionBlock's and ffnBlock's last) send it to the peers as they compute it
  // (launchGemvPush); the caller then reduces with allReducePushedAddRmsNorm instead of
  // tpsAllReduce + residual(). Set only for forwards of `tokens` that canPush(tokens, channel).
  void setPush(const detail::PushChannel* channel) { push_ = channel; }
  bool canPush(int tokens, const detail::PushChannel& channel) const;

  // Step profile: while set, every op records an event after itself (profile.h). Not during a capture.
  void setProfile(StepProfile* p) { profile_ = p; }
  // Records the end of op `op` when a profile is set (also for ops the model enqueues on this stream).
  tpsResult_t mark(const char* op, uint64_t bytes = 0, double flops = 0) {
    return profile_ ? profile_->mark(op, bytes, stream(), flops) : tpsSuccess;
  }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  bf16_t* x() const { return x_.as<bf16_t>(); }
  bf16_t* partial() const { return partial_.as<bf16_t>(); }
  const bf16_t* out() const { return xn_.as<bf16_t>(); }
  const ShardDims& dims() const { return dims_; }
  uint64_t weightBytes() const { return weights_.bytes(); }

 private:
  struct LayerWeights {
    bf16_t *attn_norm, *wqkv, *wo, *ffn_norm, *wgu, *wdown;
  };
  Shard() = default;
  tpsResult_t generateWeights();
  tpsResult_t gemm(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens);
  // partial = w . x (hidden rows): pushed while a push channel is set, else gemm().
  tpsResult_t projectPartial(const bf16_t* w, const bf16_t* x, int k, int tokens);
  int local(int layer) const { return layer - dims_.first_layer; }

  ModelConfig config_;
  ShardDims dims_;
  RunShape shape_;
  int device_ = -1;
  uint64_t seed_ = 0;
  DecodeKernels kernels_;
  Stream stream_;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<CudnnAttention> cudnn_;  // prefill attention, when cuDNN runs it
  DeviceBuffer weights_, k_cache_, v_cache_, workspace_;
  DeviceBuffer x_, xn_, partial_, qkv_, attn_, gu_, act_, scratch_;
  std::vector<LayerWeights> layers_;
  bf16_t* final_norm_ = nullptr;
  StepProfile* profile_ = nullptr;
  const detail::PushChannel* push_ = nullptr;
};

// Tensor ids for the hash: per layer, and two outside the layers.
constexpr uint64_t kTensorsPerLayer = 16;
constexpr uint64_t kFinalNormTensor = 1ull << 40;
constexpr uint64_t kInputTensor = (1ull << 40) + 1;
constexpr uint64_t kEmbeddingTensor = (1ull << 40) + 2;
constexpr uint64_t kLmHeadTensor = (1ull << 40) + 3;

}  // namespace tpscope::workload
