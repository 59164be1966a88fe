// SPDX-License-Identifier: Apache-2.0
// kernels.cu - the synthetic transformer's kernels other than the GEMMs (those are cuBLAS).
//
// Simple, correct kernels first: the GEMMs dominate decode and prefill at the preset sizes, except
// attention at long context, which uses a split-K (flash-decoding style) pass so that a decode step's
// few heads still fill the GPU. Only bf16 conversions and warp shuffles: builds for sm_75..sm_90.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "workload/kernels.h"

namespace tpscope::workload {

namespace {

__device__ __forceinline__ float load(const bf16_t* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ void store(bf16_t* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16(v);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fillHashKernel(bf16_t* dst, int rows, int cols, int ld, int64_t row_off, int64_t col_off,
                               int64_t full_cols, uint64_t seed, uint64_t tensor, float scale, float offset) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  const uint64_t key = splitmix64(seed ^ splitmix64(tensor + 0x1234567ull));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const uint64_t global = static_cast<uint64_t>((row_off + r) * full_cols + col_off + c);
    const uint64_t h = splitmix64(key ^ splitmix64(global));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // 24 bits -> [-1, 1)
    store(dst + r * ld + c, offset + scale * u);
  }
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One block per row; blockDim.x is a multiple of 32, at most 1024.
__global__ void rmsNormKernel(const bf16_t* x, const bf16_t* w, bf16_t* y, int width, float eps) {
  __shared__ float partial[32];
  const bf16_t* row = x + static_cast<int64_t>(blockIdx.x) * width;
  float ss = 0;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    const float v = load(row + i);
    ss += v * v;
  }
  ss = warpSum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    t = warpSum(t);
    if (threadIdx.x == 0) partial[0] = t;
  }
  __syncthreads();
  const float inv = rsqrtf(partial[0] / width + eps);
  bf16_t* out = y + static_cast<int64_t>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) store(out + i, load(row + i) * inv * load(w + i));
}

__global__ void addKernel(bf16_t* x, const bf16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(x + i, load(x + i) + load(y + i));
}

__global__ void siluMulKernel(const bf16_t* gu, bf16_t* out, int tokens, int ffn) {
  const int64_t n = static_cast<int64_t>(tokens) * ffn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / ffn, j = i % ffn;
    const float g = load(gu + t * 2 * ffn + j), u = load(gu + t * 2 * ffn + ffn + j);
    store(out + i, g / (1.0f + __expf(-g)) * u);
  }
}

// One block per token. RoPE rotates pairs (i, i + head_dim/2) of every Q and K head (GPT-NeoX
// layout) by pos * 10000^(-2i/head_dim); then K and V go to the cache.
__global__ void ropeStoreKernel(bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, AttnShape s) {
  const int t = blockIdx.x, pos = s.pos0 + t, d = s.head_dim, half = d / 2;
  const int width = (s.q_heads + 2 * s.kv_heads) * d;
  bf16_t* row = qkv + static_cast<int64_t>(t) * width;
  if (s.rope) {
    for (int p = threadIdx.x; p < (s.q_heads + s.kv_heads) * half; p += blockDim.x) {
      const int head = p / half, i = p % half;
      const float freq = powf(10000.0f, -2.0f * i / d);
      float sn, cs;
      sincosf(pos * freq, &sn, &cs);
      bf16_t* h = row + head * d;
      const float a = load(h + i), b = load(h + i + half);
      store(h + i, a * cs - b * sn);
      store(h + i + half, a * sn + b * cs);
    }
    __syncthreads();
  }
  for (int e = threadIdx.x; e < s.kv_heads * d; e += blockDim.x) {
    const int head = e / d, i = e % d;
    const int64_t at = (static_cast<int64_t>(head) * s.capacity + pos) * d + i;
    k_cache[at] = row[(s.q_heads + head) * d + i];
    v_cache[at] = row[(s.q_heads + s.kv_heads + head) * d + i];
  }
}

constexpr int kAttnWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

// grid (tokens, q_heads, splits), kAttnWarps warps. Each block covers one slice of the keys its query
// may see and leaves (max, sum, unnormalised accumulator) in `partial` for the combine kernel.
__global__ void attnPartialKernel(const bf16_t* qkv, const bf16_t* k_cache, const bf16_t* v_cache, float* partial,
                                  AttnShape s) {
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int d = s.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (s.q_heads / s.kv_heads);
  const int keys = s.pos0 + t + 1;  // causal: positions 0 .. pos0 + t
  const int chunk = (s.pos0 + s.tokens + splits - 1) / splits;
  const int k0 = split * chunk, k1 = min(keys, k0 + chunk);
  const int width = (s.q_heads + 2 * s.kv_heads) * d;
  const bf16_t* q = qkv + static_cast<int64_t>(t) * width + h * d;
  const float scale = rsqrtf(static_cast<float>(d));
  float qr[kMaxPerLane], acc[kMaxPerLane];
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    qr[i] = e < d ? load(q + e) * scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  const bf16_t* kbase = k_cache + static_cast<int64_t>(kvh) * s.capacity * d;
  const bf16_t* vbase = v_cache + static_cast<int64_t>(kvh) * s.capacity * d;
  for (int j = k0 + warp; j < k1; j += kAttnWarps) {
    const bf16_t* kr = kbase + static_cast<int64_t>(j) * d;
    float dot = 0.0f;
    for (int i = 0; i < kMaxPerLane; ++i)
      if (lane + 32 * i < d) dot += qr[i] * load(kr + lane + 32 * i);
    dot = warpSum(dot);
    const float mn = fmaxf(m, dot), corr = __expf(m - mn), p = __expf(dot - mn);
    l = l * corr + p;
    const bf16_t* vr = vbase + static_cast<int64_t>(j) * d;
    for (int i = 0; i < kMaxPerLane; ++i)
      if (lane + 32 * i < d) acc[i] = acc[i] * corr + p * load(vr + lane + 32 * i);
    m = mn;
  }
  // Combine the warps of this block in shared memory.
  __shared__ float sm[kAttnWarps], sl[kAttnWarps], sacc[kAttnWarps][32 * kMaxPerLane];
  if (lane == 0) sm[warp] = m, sl[warp] = l;
  for (int i = 0; i < kMaxPerLane; ++i) sacc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float M = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm[w]);
  float* out = partial + ((static_cast<int64_t>(t) * s.q_heads + h) * splits + split) * (d + 2);
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) a += sl[w] > 0 ? sacc[w][e] * __expf(sm[w] - M) : 0.0f;
    out[2 + e] = a;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) L += sl[w] > 0 ? sl[w] * __expf(sm[w] - M) : 0.0f;
    out[0] = M, out[1] = L;
  }
}

// grid (tokens, q_heads), head_dim threads: merges the splits' partials into the output.
__global__ void attnCombineKernel(const float* partial, bf16_t* out, int q_heads, int d, int splits) {
  const int t = blockIdx.x, h = blockIdx.y, e = threadIdx.x;
  const float* p = partial + (static_cast<int64_t>(t) * q_heads + h) * splits * (d + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < splits; ++s)
    if (p[s * (d + 2) + 1] > 0) M = fmaxf(M, p[s * (d + 2)]);
  float L = 0.0f, a = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* q = p + s * (d + 2);
    if (q[1] > 0) {
      const float f = __expf(q[0] - M);
      L += q[1] * f;
      a += q[2 + e] * f;
    }
  }
  store(out + (static_cast<int64_t>(t) * q_heads + h) * d + e, a / L);
}

int gridFor(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535 * 4)); }

}  // namespace

int attentionSplits(int tokens, int q_heads, int keys) {
  // Enough blocks to cover ~2 waves of a 132-SM GPU, with at least 64 keys per split.
  const int want = (256 + tokens * q_heads - 1) / (tokens * q_heads);
  const int most = (keys + 63) / 64;
  return std::max(1, std::min(want, most));
}

cudaError_t launchFillHash(bf16_t* dst, int rows, int cols, int ld_dst, int64_t row_off, int64_t col_off,
                           int64_t full_cols, uint64_t seed, uint64_t tensor, float scale, float offset,
                           cudaStream_t stream) {
  fillHashKernel<<<gridFor(int64_t(rows) * cols), 256, 0, stream>>>(dst, rows, cols, ld_dst, row_off, col_off,
                                                                    full_cols, seed, tensor, scale, offset);
  return cudaGetLastError();
}

cudaError_t launchRmsNorm(const bf16_t* x, const bf16_t* w, bf16_t* y, int rows, int width, float eps,
                          cudaStream_t stream) {
  rmsNormKernel<<<rows, 256, 0, stream>>>(x, w, y, width, eps);
  return cudaGetLastError();
}

cudaError_t launchAdd(bf16_t* x, const bf16_t* y, int64_t n, cudaStream_t stream) {
  addKernel<<<gridFor(n), 256, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launchSiluMul(const bf16_t* gu, bf16_t* out, int tokens, int ffn, cudaStream_t stream) {
  siluMulKernel<<<gridFor(int64_t(tokens) * ffn), 256, 0, stream>>>(gu, out, tokens, ffn);
  return cudaGetLastError();
}

cudaError_t launchRopeAndStore(bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, const AttnShape& s, cudaStream_t stream) {
  ropeStoreKernel<<<s.tokens, 256, 0, stream>>>(qkv, k_cache, v_cache, s);
  return cudaGetLastError();
}

cudaError_t launchAttention(const bf16_t* qkv, const bf16_t* k_cache, const bf16_t* v_cache, bf16_t* out,
                            float* partial, const AttnShape& s, cudaStream_t stream) {
  const int splits = attentionSplits(s.tokens, s.q_heads, s.pos0 + s.tokens);
  attnPartialKernel<<<dim3(s.tokens, s.q_heads, splits), 32 * kAttnWarps, 0, stream>>>(qkv, k_cache, v_cache, partial,
                                                                                       s);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  attnCombineKernel<<<dim3(s.tokens, s.q_heads), s.head_dim, 0, stream>>>(partial, out, s.q_heads, s.head_dim, splits);
  return cudaGetLastError();
}

}  // namespace tpscope::workload
