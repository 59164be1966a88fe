// SPDX-License-Identifier: Apache-2.0
// model.h - the synthetic transformer over its GPUs in one split mode, and the forward passes.
//
//   none    one shard with everything.
//   layer   one shard per GPU with a contiguous layer range; the activation is handed to the next GPU
//           by cudaMemcpyPeerAsync (direct over NVLink/P2P where enabled, else staged by the driver).
//           prefill() pipelines micro-batches: GPU s works on micro-batch u while GPU s+1 works on u-1.
//   tensor  one shard per GPU with a slice of every layer's heads and FFN columns; two tpsAllReduce
//           calls per layer (after the attention output projection and after the FFN down projection).
// Every call enqueues on the shards' streams and returns; synchronize() waits.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"
#include "workload/model_config.h"
#include "workload/profile.h"
#include "workload/shard.h"

namespace tpscope::workload {

class Shard;

// Sees each `tensor` AllReduce's inputs before the reduction runs (capture.h's writer, through the token
// decode): every GPU position's partial sums, tokens x hidden bf16 on its GPU, after the model has waited
// for every position's stream. While a tap is set the forwards run eagerly as before, one host wait more
// per reduction; without one, nothing is added to a forward.
class AllReduceTap {
 public:
  virtual ~AllReduceTap() = default;
  // `after_attention`: the reduction after the attention output projection, else after the FFN down
  // projection. partials[i] is GPU position i's buffer. An error stops the forward.
  virtual tpsResult_t onAllReduce(int layer, bool after_attention, int tokens,
                                  const std::vector<const bf16_t*>& partials, const std::vector<int>& devices) = 0;
};

struct ModelOptions {
  ModelConfig config;
  SplitMode split = SplitMode::kNone;
  std::vector<int> devices;               // CUDA ordinals: one for `none`, two or more otherwise
  tpsBackend_t backend = tpsBackendAuto;  // `tensor` only
  // `tensor` only: the communicator's wire (tpsConfig_t.wire, wire_error_budget for tpsWireAuto).
  // tpsWireExact leaves TPSCOPE_WIRE in charge, as for any communicator.
  tpsWire_t wire = tpsWireExact;
  float wire_error_budget = 0;
  uint64_t seed = 1;
  RunShape shape;
  PrefillAttention prefill_attention = PrefillAttention::kAuto;
  DecodeKernels kernels;  // after create(): attention_pdl resolved (never kAuto)
  // A GPU may appear more than once in `devices`, its positions then sharing it (tensor's communicator
  // gets tpsConfig_t.shared_devices, which cuts the AllReduce grids): for checking the split code paths
  // on fewer GPUs, as tests do, and for watching the split's AllReduces on one GPU's PCIe link (PM
  // sampling), never for timing the split. Otherwise a repeated GPU is tpsInvalidArgument.
  bool shared_devices = false;
};

class Model {
 public:
  ~Model();
  // Validates, checks free memory, allocates and generates the weights. Errors with *reason set to
  // one sentence: tpsInvalidArgument (config or devices), tpsUnavailable (does not fit, backend
  // unavailable), tpsCudaError.
  static tpsResult_t create(const ModelOptions& options, std::unique_ptr<Model>* out, std::string* reason);

  // One forward pass over `tokens` tokens at positions pos0.. from the generated input.
  tpsResult_t forward(int tokens, int pos0);
  // One forward pass of one token at position `pos`, its input the generated embedding of token id
  // `token` (Shard::fillInput), for decoding a token sequence.
  tpsResult_t forwardToken(int token, int pos);
  // The prompt of `prompt` tokens in micro-batches of `ubatch` (pipelined across GPUs in `layer`).
  tpsResult_t prefill(int prompt, int ubatch);
  // Cache positions [0, positions) of every layer filled with generated K/V (decode's context).
  tpsResult_t fillContext(int positions);
  tpsResult_t synchronize();
  // The final hidden states of the last forward (after the final RMSNorm), tokens x hidden, as floats.
  tpsResult_t readOutput(int tokens, std::vector<float>* out);

  // forward(tokens, pos0) captured as one CUDA graph over every GPU. *why says why not when it fails;
  // tpsUnavailable in split tensor with shared_devices (one graph need not run its branches at once).
  tpsResult_t captureForward(int tokens, int pos0, cudaGraphExec_t* exec, std::string* why);
  tpsResult_t launch(cudaGraphExec_t exec);

  // One eager forward(tokens, pos0) with every op timed on every GPU, after the GPUs were held by a
  // spin kernel so that the ops run back to back (profile.h); (*ops)[i] is GPU position i's.
  tpsResult_t profileForward(int tokens, int pos0, std::vector<std::vector<OpTime>>* ops);

  // Measurement aid: while set, `tensor` forwards skip their AllReduces (the result is wrong, the
  // compute is the same), so the step time without them shows the AllReduces' share of a step.
  void setSkipAllReduce(bool skip) { skip_allreduce_ = skip; }
  // `tensor`: the tap that sees every AllReduce's inputs from now on (null: none). Not during a capture.
  void setAllReduceTap(AllReduceTap* tap) { tap_ = tap; }

  // The GPU positions' shards: output() holds the final hidden states of the last forward (the last
  // stage's in `layer`, every position's in `tensor`, where they are equal).
  size_t shardCount() const { return shards_.size(); }
  const Shard& shard(size_t i) const { return *shards_[i]; }
  const Shard& output() const;

  const ModelOptions& options() const { return options_; }
  tpsComm_t comm() const { return comm_; }  // null unless `tensor`
  int allReducesPerForward() const;
  uint64_t weightBytes() const;  // all shards together

 private:
  Model() = default;
  tpsResult_t forwardFrom(int tokens, int pos0, int token);  // token >= 0: its embedding is the input
  tpsResult_t forwardTensor(int tokens, int pos0, int token);
  tpsResult_t forwardStage(size_t stage, int tokens, int pos0);  // layer split: one stage and its hand-off
  tpsResult_t allReduce(int tokens);
  // `tensor`: the AllReduce of the partials and the residual add + next RMSNorm: pushed (the
  // projections sent the partials, allReducePushedAddRmsNorm) when `pushed`, else fused into one
  // library call where the backend has that kernel (tpsAllReduceAddRmsNorm), else one after the other.
  tpsResult_t reduceThenResidual(int layer, int tokens, Shard::After after, bool pushed);
  // Whether a `tensor` forward of `tokens` pushes its partials (push channels exist and every shard's
  // projections can push them); sets or clears every shard's channel to match.
  bool preparePush(int tokens);

  ModelOptions options_;
  std::vector<std::unique_ptr<Shard>> shards_;
  tpsComm_t comm_ = nullptr;
  std::vector<cudaEvent_t> ready_, consumed_, join_;  // per shard: hand-off and capture events
  bool capturing_ = false;
  bool skip_allreduce_ = false;
  AllReduceTap* tap_ = nullptr;
  std::vector<detail::PushChannel> push_;  // `tensor` with p2p: each shard's push channel (empty: no pushes)
};

}  // namespace tpscope::workload
