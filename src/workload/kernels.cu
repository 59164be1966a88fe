// SPDX-License-Identifier: Apache-2.0
// kernels.cu - the synthetic transformer's kernels other than the GEMMs (those are cuBLAS).
//
// Simple, correct kernels first: the GEMMs dominate decode and prefill at the preset sizes, except
// attention at long context, which uses a split-K (flash-decoding style) pass so that a decode step's
// few heads still fill the GPU. Only bf16 conversions and warp shuffles: builds for sm_75..sm_90.
#include "workload/kernels.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>

#include "common/pdl.cuh"
#include "workload/rope.cuh"

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

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
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

// x (+)= p and y = RMSNorm(x) * w for one row per block, width % 8 == 0 and width <= 8 * kNormThreads *
// kNormVec: each thread keeps its 16-byte pieces of the row in registers between the two passes. The
// sum is rounded to bf16 before it is stored and normed, exactly as an add kernel followed by a norm
// kernel would. p null: no add; w null: no norm (x += p only).
constexpr int kNormThreads = 256, kNormVec = 4;

__global__ void __launch_bounds__(kNormThreads)
    addRmsNormKernel(bf16_t* x, const bf16_t* p, const bf16_t* w, bf16_t* y, int width, float eps) {
  __shared__ float partial[kNormThreads / 32];
  pdlTrigger();  // the next kernel is a GEMV: it may start loading its weights
  pdlWait();     // x and p are the previous kernels' output
  const int vecs = width / 8;
  uint4* xr = reinterpret_cast<uint4*>(x + static_cast<int64_t>(blockIdx.x) * width);
  const uint4* pr = reinterpret_cast<const uint4*>(p + static_cast<int64_t>(blockIdx.x) * width);
  uint4 v[kNormVec];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int at = threadIdx.x + i * kNormThreads;
    if (at >= vecs) break;
    v[i] = xr[at];
    __nv_bfloat162* a = reinterpret_cast<__nv_bfloat162*>(&v[i]);
    if (p) {
      uint4 q = pr[at];
      const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&q);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float2 fa = __bfloat1622float2(a[u]), fb = __bfloat1622float2(b[u]);
        a[u] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
      }
      xr[at] = v[i];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float2 f = __bfloat1622float2(a[u]);
      ss += f.x * f.x + f.y * f.y;
    }
  }
  if (!w) return;
  ss = warpSum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) total += partial[i];
  const float inv = rsqrtf(total / width + eps);
  uint4* yr = reinterpret_cast<uint4*>(y + static_cast<int64_t>(blockIdx.x) * width);
  const uint4* wr = reinterpret_cast<const uint4*>(w);
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int at = threadIdx.x + i * kNormThreads;
    if (at >= vecs) break;
    uint4 q = wr[at], o;
    const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&v[i]);
    const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&q);
    __nv_bfloat162* c = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float2 fa = __bfloat1622float2(a[u]), fb = __bfloat1622float2(b[u]);
      c[u] = __floats2bfloat162_rn(fa.x * inv * fb.x, fa.y * inv * fb.y);
    }
    yr[at] = o;
  }
}

bool vecNormApplies(const void* x, const void* p, const void* w, const void* y, int width) {
  auto ok = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return width % 8 == 0 && width <= 8 * kNormThreads * kNormVec && ok(x) && ok(p) && ok(w) && ok(y);
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

// grid (tokens, ceil(heads x head_dim / 2 / 256)), 256 threads; one thread per pair (i, i + head_dim/2)
// of one head of one token, over the Q, K and V heads of the QKV row. RoPE (ropePair) rotates the Q
// and K pairs in place; the K and V pairs then go to the cache.
// One pair per thread keeps every load independent (a loop over pairs would wait out each load).
__global__ void ropeStoreKernel(bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, AttnShape s) {
  pdlTrigger();
  pdlWait();  // qkv is the QKV projection's output
  const int t = blockIdx.x, pos = s.pos0 + t, d = s.head_dim, half = d / 2;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  if (p >= (s.q_heads + 2 * s.kv_heads) * half) return;
  const int head = p / half, i = p % half;
  bf16_t* h = qkv + static_cast<int64_t>(t) * (s.q_heads + 2 * s.kv_heads) * d + head * d;
  float x0 = load(h + i), x1 = load(h + i + half);
  if (s.rope && head < s.q_heads + s.kv_heads) {
    const float2 r = ropePair(x0, x1, pos, i, d);
    store(h + i, r.x);
    store(h + i + half, r.y);
    x0 = __bfloat162float(__float2bfloat16(r.x)), x1 = __bfloat162float(__float2bfloat16(r.y));  // as stored
  }
  if (head < s.q_heads) return;
  const bool is_k = head < s.q_heads + s.kv_heads;
  const int kvh = head - s.q_heads - (is_k ? 0 : s.kv_heads);
  bf16_t* cache = (is_k ? k_cache : v_cache) + (static_cast<int64_t>(kvh) * s.capacity + pos) * d;
  store(cache + i, x0);
  store(cache + i + half, x1);
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

// grid (tokens, q_heads), head_dim threads: merges the splits' partials into the output. The splits'
// (max, sum) pairs are read in parallel into shared memory first and the outputs with independent,
// unrolled loads: a loop of dependent loads over the splits costs one memory latency per split.
constexpr int kMaxCombineSplits = 256;  // attentionSplits and attentionDecodeSplits stay within it
constexpr int kCombineGroups = 8;       // thread groups that share a head's splits (blockDim = d x groups)

__global__ void attnCombineKernel(const float* partial, bf16_t* out, int q_heads, int d, int splits) {
  __shared__ float weight[kMaxCombineSplits], sums[kMaxCombineSplits];
  __shared__ float reduced[kCombineGroups][256];  // head_dim <= 256
  __shared__ float total;
  pdlTrigger();  // the next kernel is the output projection's GEMV
  pdlWait();
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int e = tid % d, group = tid / d, groups = blockDim.x / d;
  const float* p = partial + (static_cast<int64_t>(t) * q_heads + h) * splits * (d + 2);
  for (int s = tid; s < splits; s += blockDim.x) {
    const float m = p[s * (d + 2)], l = p[s * (d + 2) + 1];
    weight[s] = l > 0 ? m : -FLT_MAX, sums[s] = l;
  }
  __syncthreads();
  if (tid < 32) {  // one warp: the largest max, the weights exp(max_s - M), and L = sum of weighted sums
    float M = -FLT_MAX;
    for (int s = tid; s < splits; s += 32) M = fmaxf(M, weight[s]);
    M = warpMax(M);
    float L = 0.0f;
    for (int s = tid; s < splits; s += 32) {
      const float w = sums[s] > 0 ? __expf(weight[s] - M) : 0.0f;
      weight[s] = w;
      L += sums[s] * w;
    }
    L = warpSum(L);
    if (tid == 0) total = L;
  }
  __syncthreads();
  // Each group sums every groups-th split: the loads of a thread are few and independent.
  float a = 0.0f;
#pragma unroll 4
  for (int s = group; s < splits; s += groups) {
    const float w = weight[s], v = p[s * (d + 2) + 2 + e];
    a += w != 0.0f ? w * v : 0.0f;  // an empty split's outputs are never used
  }
  reduced[group][e] = a;
  __syncthreads();
  if (group == 0) {
    for (int g = 1; g < groups; ++g) a += reduced[g][e];
    store(out + (static_cast<int64_t>(t) * q_heads + h) * d + e, a / total);
  }
}

__global__ void spinKernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Thread groups of the combine kernel: about 8 splits per group, up to kCombineGroups and 1024 threads.
int combineGroups(int head_dim, int splits) {
  const int most = head_dim * kCombineGroups <= 1024 ? kCombineGroups : 1024 / head_dim;
  return std::max(1, std::min(most, (splits + 7) / 8));
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
  if (vecNormApplies(x, nullptr, w, y, width))
    return launchPdl(addRmsNormKernel, dim3(rows), dim3(kNormThreads), stream, const_cast<bf16_t*>(x),
                     static_cast<const bf16_t*>(nullptr), w, y, width, eps);
  rmsNormKernel<<<rows, 256, 0, stream>>>(x, w, y, width, eps);
  return cudaGetLastError();
}

cudaError_t launchAddRmsNorm(bf16_t* x, const bf16_t* p, const bf16_t* w, bf16_t* y, int rows, int width, float eps,
                             cudaStream_t stream) {
  if (vecNormApplies(x, p, w, y, width)) {
    return launchPdl(addRmsNormKernel, dim3(rows), dim3(kNormThreads), stream, x, p, w, y, width, eps);
  }
  const int64_t n = static_cast<int64_t>(rows) * width;
  addKernel<<<gridFor(n), 256, 0, stream>>>(x, p, n);
  if (w) rmsNormKernel<<<rows, 256, 0, stream>>>(x, w, y, width, eps);
  return cudaGetLastError();
}

cudaError_t launchSiluMul(const bf16_t* gu, bf16_t* out, int tokens, int ffn, cudaStream_t stream) {
  siluMulKernel<<<gridFor(int64_t(tokens) * ffn), 256, 0, stream>>>(gu, out, tokens, ffn);
  return cudaGetLastError();
}

cudaError_t launchRopeAndStore(bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, const AttnShape& s, cudaStream_t stream) {
  const int pairs = (s.q_heads + 2 * s.kv_heads) * (s.head_dim / 2);
  return launchPdl(ropeStoreKernel, dim3(s.tokens, (pairs + 255) / 256), dim3(256), stream, qkv, k_cache, v_cache, s);
}

cudaError_t launchAttention(const bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, bf16_t* out, float* partial,
                            const AttnShape& s, cudaStream_t stream) {
  if (s.store_kv && !attentionDecodeApplies(s)) return cudaErrorInvalidValue;
  if (attentionDecodeApplies(s)) {
    const int splits = attentionDecodeSplits(s.kv_heads, s.pos0 + s.tokens);
    if (cudaError_t e = launchAttentionDecode(qkv, k_cache, v_cache, partial, s, splits, stream); e != cudaSuccess)
      return e;
    return launchPdl(attnCombineKernel, dim3(s.tokens, s.q_heads), dim3(s.head_dim * combineGroups(s.head_dim, splits)),
                     stream, static_cast<const float*>(partial), out, s.q_heads, s.head_dim, splits);
  }
  const int splits = attentionSplits(s.tokens, s.q_heads, s.pos0 + s.tokens);
  attnPartialKernel<<<dim3(s.tokens, s.q_heads, splits), 32 * kAttnWarps, 0, stream>>>(qkv, k_cache, v_cache, partial,
                                                                                       s);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launchPdl(attnCombineKernel, dim3(s.tokens, s.q_heads), dim3(s.head_dim * combineGroups(s.head_dim, splits)),
                   stream, static_cast<const float*>(partial), out, s.q_heads, s.head_dim, splits);
}

cudaError_t launchSpin(uint64_t ns, cudaStream_t stream) {
  spinKernel<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace tpscope::workload
