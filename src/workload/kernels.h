// SPDX-License-Identifier: Apache-2.0
// kernels.h - launchers for the synthetic transformer's element-wise and attention kernels.
//
// Host-only declarations; the kernels live in kernels.cu. Activations are bf16 and row-major
// [tokens][width]; every reduction inside a kernel is in fp32. Each launcher enqueues on `stream`
// and returns the launch error (cudaSuccess when enqueued), so callers can capture them in graphs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "allreduce/push.h"
#include "tpscope/tpscope.h"

namespace tpscope::workload {

using bf16_t = uint16_t;  // storage type on the host side: the kernels use __nv_bfloat16

// Deterministic values hash(seed, tensor, global index) -> offset + scale * U(-1, 1), written to a
// rows x cols block of a [*][full_cols] row-major tensor starting at (row_off, col_off). A shard
// gets exactly the values of its slice of the full tensor, so splits compute the same model.
cudaError_t launchFillHash(bf16_t* dst, int rows, int cols, int ld_dst, int64_t row_off, int64_t col_off,
                           int64_t full_cols, uint64_t seed, uint64_t tensor, float scale, float offset,
                           cudaStream_t stream);

// y[i] = x[i] * rsqrt(mean(x[i]^2) + eps) * w, for `rows` rows of `width`.
cudaError_t launchRmsNorm(const bf16_t* x, const bf16_t* w, bf16_t* y, int rows, int width, float eps,
                          cudaStream_t stream);

// x[rows][width] += p (bf16-rounded), then y = RMSNorm(x) * w; w null: the add alone. One kernel
// where width % 8 == 0 and width <= 8192 (16-byte aligned rows), else an add and a norm kernel.
cudaError_t launchAddRmsNorm(bf16_t* x, const bf16_t* p, const bf16_t* w, bf16_t* y, int rows, int width, float eps,
                             cudaStream_t stream);

// out[t][j] = silu(gu[t][j]) * gu[t][ffn + j]: gu holds gate|up side by side, row stride 2*ffn.
cudaError_t launchSiluMul(const bf16_t* gu, bf16_t* out, int tokens, int ffn, cudaStream_t stream);

// Attention geometry on one GPU: local heads, the KV cache [kv_heads][capacity][head_dim] for K and V.
struct AttnShape {
  int tokens = 0;  // query tokens in this forward, at positions pos0 .. pos0 + tokens - 1
  int pos0 = 0;
  int q_heads = 0;   // local query heads
  int kv_heads = 0;  // local KV heads; q head h reads KV head h / (q_heads / kv_heads)
  int head_dim = 0;
  int capacity = 0;                           // positions the cache holds
  int q_head_offset = 0, kv_head_offset = 0;  // global index of the first local head (RoPE is per position only)
  bool rope = true;
  // The decode attention kernel launched as a programmatic dependent of the kernel before it (common/pdl.cuh).
  bool pdl = true;
  // The decode attention kernel applies RoPE itself (to Q, and to this step's K) and stores this step's
  // K and V into the cache: no launchRopeAndStore before it, and qkv is left unrotated. Only where
  // attentionDecodeApplies; launchAttention refuses it otherwise.
  bool store_kv = false;
};

// Applies RoPE to the Q and K parts of qkv ([tokens][(q_heads + 2 kv_heads) head_dim]), then copies K and
// V of every token into the cache at its position.
cudaError_t launchRopeAndStore(bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, const AttnShape& s, cudaStream_t stream);

// The arithmetic of one causal attention: Q.K and P.V, 2 x 2 x head_dim FLOP per (query head, visible key).
inline double attentionFlops(const AttnShape& s) {
  const double keys = double(s.tokens) * s.pos0 + double(s.tokens) * (s.tokens + 1) / 2;
  return 4.0 * s.head_dim * s.q_heads * keys;
}

// The K and V bytes one attention reads from the cache at least once: every visible position of every
// local KV head (the measure of a decode step's attention, which streams the cache).
inline uint64_t attentionCacheBytes(const AttnShape& s) {
  return uint64_t(2) * s.kv_heads * uint64_t(s.pos0 + s.tokens) * s.head_dim * 2;
}

// Causal grouped-query attention: query token t (position pos0 + t) attends cache positions 0..pos0 + t.
// out is [tokens][q_heads head_dim]. `partial` is fp32 scratch of attentionScratchFloats(...) floats.
cudaError_t launchAttention(const bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, bf16_t* out, float* partial,
                            const AttnShape& s, cudaStream_t stream);

// Decode projections (gemv.cu): y[t][n] = sum_k w[n][k] * x[t][k] for 1..kGemvMaxTokens tokens, x
// [tokens][k], y [tokens][n]; fp32 accumulation. gemvApplies says whether the shape and alignment
// (k % 8 == 0, 16-byte aligned w and x) allow it; otherwise launchGemv returns cudaErrorInvalidValue.
constexpr int kGemvMaxTokens = 8;
bool gemvApplies(const bf16_t* w, const bf16_t* x, int k, int tokens);
cudaError_t launchGemv(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens, cudaStream_t stream);
// The same, y being the partial of a pushed reduction (allreduce/push.cuh): each block also sends its
// four outputs of each token to the peers as one word as soon as they are computed, so the reduction
// after it only waits for them (allReducePushedAddRmsNorm). gemvPushApplies: gemvApplies, n % 4 == 0
// and the call within the channel's rows, width and words.
bool gemvPushApplies(const bf16_t* w, const bf16_t* x, int n, int k, int tokens, const detail::PushChannel& push);
cudaError_t launchGemvPush(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens,
                           const detail::PushChannel& push, cudaStream_t stream);
// The FFN's first projection with its activation: w is [2 * ffn][k] (gate rows, then up rows);
// act[t][j] = silu(gate_j . x_t) * (up_j . x_t), with both dot products rounded to bf16 first.
cudaError_t launchGemvSwiGlu(const bf16_t* w, const bf16_t* x, bf16_t* act, int ffn, int k, int tokens,
                             cudaStream_t stream);

// One thread that spins for `ns` nanoseconds of GPU time: holds a stream while the host enqueues the
// work after it, so that work then runs back to back (the step profile's timing without launch gaps).
cudaError_t launchSpin(uint64_t ns, cudaStream_t stream);

// Key splits per query head (split-K over the cache so that a decode step fills the GPU).
int attentionSplits(int tokens, int q_heads, int keys);

// The decode path (attention_decode.cu), taken by launchAttention when tokens x (q_heads / kv_heads)
// <= kDecodeRows and head_dim is 32, 64 or 128: one block per (KV head, cache slice) reads each K/V
// row once for its whole query group. It splits the cache into attentionDecodeSplits(...) slices.
constexpr int kDecodeRows = 16;
constexpr int kMaxDecodeSplits = 128;
bool attentionDecodeApplies(const AttnShape& s);
int attentionDecodeSplits(int kv_heads, int keys);
cudaError_t launchAttentionDecode(const bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, float* partial,
                                  const AttnShape& s, int splits, cudaStream_t stream);

// Scratch floats launchAttention needs for up to `tokens` query tokens, each (token, head, split)
// holding head_dim + 2 floats: the general path has splits * tokens * q_heads <= 256 + tokens * q_heads
// (attentionSplits), the decode path at most kMaxDecodeSplits splits of kDecodeRows-bounded tokens.
inline int64_t attentionScratchFloats(int tokens, int q_heads, int head_dim) {
  const int64_t general = 256 + static_cast<int64_t>(tokens) * q_heads;
  const int64_t decode = static_cast<int64_t>(tokens < kDecodeRows ? tokens : kDecodeRows) * q_heads * kMaxDecodeSplits;
  return (general > decode ? general : decode) * (head_dim + 2);
}

}  // namespace tpscope::workload
