// SPDX-License-Identifier: Apache-2.0
// gemv.cu - the decode GEMM for a few tokens: y[t][n] = sum_k w[n][k] * x[t][k], bf16 in and out.
//
// At 1-8 tokens a projection is a pass over its weights (bytes, not FLOPs), so the kernel is built
// for the memory system: one warp per output row, 16-byte streaming loads of the weight row with eight
// in flight per lane (split between the gate and up rows in the SwiGLU variant), the token vectors (a few KiB,
// L1-resident) read beside them, fp32 accumulation and one warp reduction per token at the end. cuBLAS remains the path
// for prefill-sized batches.
#include <cuda_bf16.h>

#include <array>
#include <utility>

#include "allreduce/push.cuh"
#include "common/pdl.cuh"
#include "workload/kernels.h"

namespace tpscope::workload {

namespace {

constexpr int kGemvWarps = 4;
constexpr int kGemvLoads = 8;  // 16-byte weight loads in flight per lane

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

__device__ __forceinline__ float roundBf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// grid ceil(n / kGemvWarps), kGemvWarps warps; k % 8 == 0 and 16-byte aligned w and x (checked by the
// launcher). R = 1: warp j computes row j. R = 2 (SwiGLU): warp j computes gate row j and up row n + j
// and writes silu(gate) * up, both rounded to bf16 first as the separate kernels would.
// kPush (R = 1, n % kGemvWarps == 0): y is the partial of a pushed reduction; the block's kGemvWarps
// outputs of each token, one 8-byte word, also go to the peers through `push` (allreduce/push.cuh).
template <int T, int R, bool kPush>
__global__ void __launch_bounds__(32 * kGemvWarps)
    gemvKernel(const bf16_t* __restrict__ w, const bf16_t* __restrict__ x, bf16_t* __restrict__ y, int n, int k,
               detail::PushChannel push) {
  static_assert(!kPush || (R == 1 && kGemvWarps == 4), "a pushed word is one block's four rows of one token");
  constexpr int U = kGemvLoads / R;                                       // 16-byte loads in flight per row and lane
  __shared__ __align__(8) __nv_bfloat16 word[kPush ? T : 1][kGemvWarps];  // kPush: token t's four outputs
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (row >= n) return;
  const int k8 = k / 8;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w) + (static_cast<int64_t>(row) + r * n) * k8;
  const uint4* xr = reinterpret_cast<const uint4*>(x);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
  // The first batch of weights is requested before waiting for the previous kernel (pdl.cuh): the
  // weights are constant, only x is that kernel's output.
  uint4 wv[R][U];
  auto fetch = [&](int at) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u) wv[r][u] = __ldcs(wr[r] + at + 32 * u);  // streamed: read once per step
  };
  int i = lane;
  if (i + 32 * (U - 1) < k8) fetch(i);
  pdlTrigger();
  pdlWait();
  for (; i + 32 * (U - 1) < k8; i += 32 * U) {
    // Each slot is refilled with the next batch's load as soon as it has been used, so loads stay in
    // flight while the rest of the batch is computed, not only between batches: decode is bound by
    // these weight loads.
    const bool more = i + 32 * U + 32 * (U - 1) < k8;
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const uint4 xv = __ldg(xr + static_cast<int64_t>(t) * k8 + i + 32 * u);
#pragma unroll
        for (int r = 0; r < R; ++r) fma8(acc[r][t], wv[r][u], xv);
      }
      if (more)
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r][u] = __ldcs(wr[r] + i + 32 * U + 32 * u);
    }
  }
  for (; i < k8; i += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = __ldcs(wr[r] + i);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const uint4 xv = __ldg(xr + static_cast<int64_t>(t) * k8 + i);
#pragma unroll
      for (int r = 0; r < R; ++r) fma8(acc[r][t], wv[r], xv);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
  if (lane < T) {
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      v[r] = acc[r][0];
#pragma unroll
      for (int t = 1; t < T; ++t)
        if (lane == t) v[r] = acc[r][t];
    }
    float out = v[0];
    if constexpr (R == 2) {
      const float g = roundBf16(v[0]), u = roundBf16(v[1]);
      out = g / (1.0f + __expf(-g)) * u;
    }
    reinterpret_cast<__nv_bfloat16*>(y)[static_cast<int64_t>(lane) * n + row] = __float2bfloat16(out);
    if constexpr (kPush) word[lane][threadIdx.x >> 5] = __float2bfloat16(out);
  }
  if constexpr (kPush) {
    __syncthreads();  // (no warp returned early: n % kGemvWarps == 0)
    if (threadIdx.x < T)
      detail::pushWord(push, threadIdx.x, static_cast<size_t>(threadIdx.x) * (n / kGemvWarps) + blockIdx.x,
                       *reinterpret_cast<const uint2*>(word[threadIdx.x]));
  }
}

// gemvKernel<tokens, R, kPush> for tokens 1..kGemvMaxTokens, indexed by tokens - 1.
template <int R, bool kPush, int... I>
constexpr auto kernelsByTokens(std::integer_sequence<int, I...>) {
  return std::array{gemvKernel<I + 1, R, kPush>...};
}

template <int R, bool kPush = false>
cudaError_t launchRows(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens, cudaStream_t stream,
                       const detail::PushChannel& push = {}) {
  static constexpr auto kKernels = kernelsByTokens<R, kPush>(std::make_integer_sequence<int, kGemvMaxTokens>());
  const dim3 grid((n + kGemvWarps - 1) / kGemvWarps), block(32 * kGemvWarps);
  return launchPdl(kKernels[tokens - 1], grid, block, stream, w, x, y, n, k, push);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool gemvApplies(const bf16_t* w, const bf16_t* x, int k, int tokens) {
  return tokens >= 1 && tokens <= kGemvMaxTokens && k % 8 == 0 && aligned16(w) && aligned16(x);
}

cudaError_t launchGemv(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens, cudaStream_t stream) {
  if (!gemvApplies(w, x, k, tokens) || n < 1) return cudaErrorInvalidValue;
  return launchRows<1>(w, x, y, n, k, tokens, stream);
}

bool gemvPushApplies(const bf16_t* w, const bf16_t* x, int n, int k, int tokens, const detail::PushChannel& push) {
  return gemvApplies(w, x, k, tokens) && n % kGemvWarps == 0 && tokens <= push.max_rows && n <= push.max_width &&
         static_cast<unsigned long long>(tokens) * n / 4 <= push.max_words;
}

cudaError_t launchGemvPush(const bf16_t* w, const bf16_t* x, bf16_t* y, int n, int k, int tokens,
                           const detail::PushChannel& push, cudaStream_t stream) {
  if (!gemvPushApplies(w, x, n, k, tokens, push) || n < 1) return cudaErrorInvalidValue;
  return launchRows<1, true>(w, x, y, n, k, tokens, stream, push);
}

cudaError_t launchGemvSwiGlu(const bf16_t* w, const bf16_t* x, bf16_t* act, int ffn, int k, int tokens,
                             cudaStream_t stream) {
  if (!gemvApplies(w, x, k, tokens) || ffn < 1) return cudaErrorInvalidValue;
  return launchRows<2>(w, x, act, ffn, k, tokens, stream);
}

}  // namespace tpscope::workload
