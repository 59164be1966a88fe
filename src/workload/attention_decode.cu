// SPDX-License-Identifier: Apache-2.0
// attention_decode.cu - grouped-query attention for a decode step (a few query tokens, long context).
//
// One block per (KV head, slice of the cache): it stages 64 keys and values at a time in shared
// memory with 16-byte loads, so each K/V row is read from memory once for all the query heads that
// share it (the GQA group) and every token of the step, instead of once per query head. A thread's
// rows (query heads x tokens) are a compile-time count, so their dot products and output sums run as
// independent chains over one load of each K / V element, which keeps more loads in flight than one
// chain per row would (docs/PERFORMANCE.md, "Workload (tp)", has the step times). Scores go through an online softmax
// per query row; the block leaves (max, sum, unnormalised output) per row for attnCombineKernel, as the general kernel
// does. Rows = tokens x group <= kDecodeRows.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "common/pdl.cuh"
#include "workload/kernels.h"
#include "workload/rope.cuh"

namespace tpscope::workload {

namespace {

constexpr int kTile = 64;      // keys per shared-memory tile
constexpr int kThreads = 128;  // 4 warps

__device__ __forceinline__ float bf(const bf16_t* p) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}
__device__ __forceinline__ void store(bf16_t* p, float v) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16(v);
}
__device__ __forceinline__ float roundBf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// R: a bound on rows (4, 8 or 16), so that each thread's rows are a compile-time count and their
// accumulations interleave (independent chains, each K / V element loaded once for all of them).
// Blocks per SM the register budget is cut for: 4 (what the shared memory allows at D = 128; <= 128
// registers) where that does not spill, else 3 (<= 168 registers). ptxas at 4: D = 128, R = 4 spills
// 48 bytes, D = 64, R = 16 spills 16, and a spilling kernel is slower at 4 blocks than the same kernel
// at 3 without the spill (and than the R = 8 kernel for those rows).
constexpr int attnMinBlocks(int d, int r) { return (d == 128 && r == 4) || (d == 64 && r == 16) ? 3 : 4; }

// The kernel's shapes for head size D and a bound of R rows.
template <int D, int R>
struct Geometry {
  static constexpr int kKStride = D + 8;             // padded K rows: conflict-free 16-byte reads across rows
  static constexpr int kPairs = D / 2;               // V columns are handled in bf16 pairs
  static constexpr int kGroups = kThreads / kPairs;  // row groups in the V pass
  static constexpr int kRowsPerThread = (R + kGroups - 1) / kGroups;        // V-pass rows per thread
  static constexpr int kScoreGroups = kThreads / kTile;                     // row groups in the score pass
  static constexpr int kScoreRows = (R + kScoreGroups - 1) / kScoreGroups;  // score rows per thread
  static constexpr int kPieces = kTile * (D / 8) / kThreads;                // 16-byte pieces of K (and of V) per thread
};

// This step's K (rotated where `rope`) and V rows that fall in the block's slice [k0, k1) go into the
// cache, as ropeStoreKernel would write them; only this block reads them, after the caller's barrier.
template <int D>
__device__ __forceinline__ void storeStepKv(const bf16_t* __restrict__ qkv, bf16_t* k_cache, bf16_t* v_cache,
                                            const AttnShape& s, int g, int k0, int k1, int width, bool rope, int tid) {
  constexpr int kHalf = D / 2;
  const int p0 = max(k0, s.pos0), kcol = (s.q_heads + g) * D, vcol = (s.q_heads + s.kv_heads + g) * D;
  for (int i = tid; i < (k1 - p0) * kHalf; i += kThreads) {
    const int p = p0 + i / kHalf, e = i % kHalf;
    const bf16_t* row = qkv + static_cast<int64_t>(p - s.pos0) * width;
    const int64_t at = (static_cast<int64_t>(g) * s.capacity + p) * D + e;
    float2 kp = make_float2(bf(row + kcol + e), bf(row + kcol + e + kHalf));
    if (rope) kp = ropePair(kp.x, kp.y, p, e, D);
    store(k_cache + at, kp.x), store(k_cache + at + kHalf, kp.y);
    v_cache[at] = row[vcol + e], v_cache[at + kHalf] = row[vcol + e + kHalf];
  }
}

// Query rows r = t * group + j (query head g * group + j of token t), pre-scaled, as floats; rotated here
// (rounded to bf16, as the RoPE kernel stores them) when the kernel applies RoPE itself.
template <int D>
__device__ __forceinline__ void loadQueries(float (*qs)[D], const bf16_t* __restrict__ qkv, const AttnShape& s, int g,
                                            int rows, int group, int width, float scale, bool rope, int tid) {
  for (int i = tid; i < rows * D; i += kThreads) {
    const int r = i / D, e = i % D, t = r / group, h = g * group + r % group;
    const bf16_t* q = qkv + static_cast<int64_t>(t) * width + h * D;
    float v;
    if (rope) {
      const int j = e % (D / 2);
      const float2 rot = ropePair(bf(q + j), bf(q + j + D / 2), s.pos0 + t, j, D);
      v = roundBf16(e < D / 2 ? rot.x : rot.y);
    } else {
      v = bf(q + e);
    }
    qs[r][e] = v * scale;
  }
}

// The tile held in registers (n keys) into shared memory.
template <int D, int R>
__device__ __forceinline__ void stageTile(bf16_t* ks, bf16_t* vs, const uint4 (&kreg)[Geometry<D, R>::kPieces],
                                          const uint4 (&vreg)[Geometry<D, R>::kPieces], int n, int tid) {
  using G = Geometry<D, R>;
#pragma unroll
  for (int p = 0; p < G::kPieces; ++p) {
    const int i = tid + p * kThreads, j = i / (D / 8), c = i % (D / 8);
    if (j < n) {
      *reinterpret_cast<uint4*>(ks + j * G::kKStride + c * 8) = kreg[p];
      *reinterpret_cast<uint4*>(vs + j * D + c * 8) = vreg[p];
    }
  }
}

// Scores of the staged tile: thread -> key j, rows r = tid / kTile + kScoreGroups * i. Each row's dot
// product keeps its order (bit for bit the one-row-at-a-time sum); the rows' chains run side by side.
// Keys past n, and keys a token may not see (causal: token t sees positions <= pos0 + t), score -inf.
template <int D, int R>
__device__ __forceinline__ void tileScores(float (*ss)[kTile], const float (*qs)[D], const bf16_t* ks, int n, int base,
                                           int rows, int group, int pos0, int tid) {
  using G = Geometry<D, R>;
  const int j = tid % kTile, r0 = tid / kTile;
  float dot[G::kScoreRows];
#pragma unroll
  for (int i = 0; i < G::kScoreRows; ++i) dot[i] = 0.0f;
  if (j < n) {
    const bf16_t* kr = ks + j * G::kKStride;
#pragma unroll 4  // fully unrolled, D = 128 spills (the next tile's K and V hold 64 registers)
    for (int c = 0; c < D / 8; ++c) {
      const uint4 kv = *reinterpret_cast<const uint4*>(kr + c * 8);
      const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kv);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float2 f = __bfloat1622float2(k2[u]);
#pragma unroll
        for (int i = 0; i < G::kScoreRows; ++i) {
          const int r = r0 + i * G::kScoreGroups;
          if (r < rows) {
            dot[i] = fmaf(qs[r][c * 8 + 2 * u], f.x, dot[i]);
            dot[i] = fmaf(qs[r][c * 8 + 2 * u + 1], f.y, dot[i]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < G::kScoreRows; ++i) {
    const int r = r0 + i * G::kScoreGroups;
    if (r < rows) ss[r][j] = j < n && base + j <= pos0 + r / group ? dot[i] : -INFINITY;
  }
}

// Online softmax over the tile's scores, in place: warp w owns rows w, w + 4, ...; each row's running max
// and sum are updated and its correction factor for the earlier tiles' output left in row_corr.
__device__ __forceinline__ void onlineSoftmax(float (*ss)[kTile], float* row_m, float* row_l, float* row_corr, int rows,
                                              int tid) {
  const int warp = tid >> 5, lane = tid & 31;
  for (int r = warp; r < rows; r += kThreads / 32) {
    const float a = ss[r][lane], b = ss[r][lane + 32];
    float mt = fmaxf(a, b);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    const float m_old = row_m[r], m_new = fmaxf(m_old, mt);
    float pa = 0.0f, pb = 0.0f, corr = 1.0f;
    if (m_new != -INFINITY) {
      pa = __expf(a - m_new), pb = __expf(b - m_new);
      corr = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
    }
    ss[r][lane] = pa, ss[r][lane + 32] = pb;
    float sum = pa + pb;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    __syncwarp();
    if (lane == 0) row_l[r] = row_l[r] * corr + sum, row_m[r] = m_new, row_corr[r] = corr;
  }
}

template <int D, int R>
__global__ void __launch_bounds__(kThreads, attnMinBlocks(D, R))
    attnDecodeKernel(const bf16_t* __restrict__ qkv, bf16_t* k_cache, bf16_t* v_cache, float* __restrict__ partial,
                     AttnShape s) {
  static_assert(R <= kDecodeRows, "rows bound");
  using G = Geometry<D, R>;
  __shared__ __align__(16) bf16_t ks[kTile * G::kKStride];
  __shared__ __align__(16) bf16_t vs[kTile * D];
  __shared__ float qs[kDecodeRows][D];
  __shared__ float ss[kDecodeRows][kTile];
  __shared__ float row_m[kDecodeRows], row_l[kDecodeRows], row_corr[kDecodeRows];

  const int g = blockIdx.x, split = blockIdx.y, splits = gridDim.y, tid = threadIdx.x;
  const int group = s.q_heads / s.kv_heads, rows = s.tokens * group;
  const int width = (s.q_heads + 2 * s.kv_heads) * D;
  const int total = s.pos0 + s.tokens;
  const int tiles = (total + kTile - 1) / kTile;
  const int chunk = (tiles + splits - 1) / splits * kTile;  // whole tiles per split
  const int k0 = split * chunk, k1 = min(total, k0 + chunk);
  const float scale = rsqrtf(static_cast<float>(D));

  const bf16_t* kb = k_cache + static_cast<int64_t>(g) * s.capacity * D;
  const bf16_t* vb = v_cache + static_cast<int64_t>(g) * s.capacity * D;
  // The next tile is loaded into registers while the current one is computed: every load of a tile
  // is in flight at once, and the memory latency hides behind the previous tile's arithmetic.
  uint4 kreg[G::kPieces], vreg[G::kPieces];
  auto fetch = [&](int base, int n) {
#pragma unroll
    for (int p = 0; p < G::kPieces; ++p) {
      const int i = tid + p * kThreads, j = i / (D / 8), c = i % (D / 8);
      if (j < n) {
        kreg[p] = __ldcs(reinterpret_cast<const uint4*>(kb + static_cast<int64_t>(base + j) * D) + c);
        vreg[p] = __ldcs(reinterpret_cast<const uint4*>(vb + static_cast<int64_t>(base + j) * D) + c);
      }
    }
  };
  // Launched after the RoPE kernel (common/pdl.cuh): the cache rows of earlier steps (positions below
  // pos0) are constant during this step, so a first tile made of them is requested before the wait.
  pdlTrigger();
  const bool early = k0 < k1 && k0 + min(kTile, k1 - k0) <= s.pos0;
  if (early) fetch(k0, min(kTile, k1 - k0));
  pdlWait();
  const bool rope = s.store_kv && s.rope;
  if (s.store_kv) {
    storeStepKv<D>(qkv, k_cache, v_cache, s, g, k0, k1, width, rope, tid);
    __syncthreads();
  }
  if (!early && k0 < k1) fetch(k0, min(kTile, k1 - k0));
  loadQueries<D>(qs, qkv, s, g, rows, group, width, scale, rope, tid);
  if (tid < kDecodeRows) row_m[tid] = -INFINITY, row_l[tid] = 0.0f;
  float acc[G::kRowsPerThread][2];
#pragma unroll
  for (int i = 0; i < G::kRowsPerThread; ++i) acc[i][0] = acc[i][1] = 0.0f;
  const int pair = tid % G::kPairs, rgroup = tid / G::kPairs;

  for (int base = k0; base < k1; base += kTile) {
    const int n = min(kTile, k1 - base);
    __syncthreads();  // the previous tile's readers are done (and qs / row_m are written, first time)
    stageTile<D, R>(ks, vs, kreg, vreg, n, tid);
    __syncthreads();
    if (base + kTile < k1) fetch(base + kTile, min(kTile, k1 - base - kTile));
    tileScores<D, R>(ss, qs, ks, n, base, rows, group, s.pos0, tid);
    __syncthreads();
    onlineSoftmax(ss, row_m, row_l, row_corr, rows, tid);
    __syncthreads();
    // Output: thread -> V column pair, rows r = rgroup + kGroups * i; each V pair is loaded once for
    // all of the thread's rows, each row's sum keeps its order over the keys. (Here rather than in a
    // function: passing acc to one changes the generated code; in the kernel it is the same as before.)
    {
      float o[G::kRowsPerThread][2];
#pragma unroll
      for (int i = 0; i < G::kRowsPerThread; ++i) {
        const int r = rgroup + i * G::kGroups;
        const float corr = r < rows ? row_corr[r] : 0.0f;
        o[i][0] = acc[i][0] * corr, o[i][1] = acc[i][1] * corr;
      }
#pragma unroll 4
      for (int j = 0; j < n; ++j) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * D + 2 * pair));
#pragma unroll
        for (int i = 0; i < G::kRowsPerThread; ++i) {
          const int r = rgroup + i * G::kGroups;
          if (r < rows) {
            const float p = ss[r][j];
            o[i][0] = fmaf(p, v.x, o[i][0]);
            o[i][1] = fmaf(p, v.y, o[i][1]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < G::kRowsPerThread; ++i) acc[i][0] = o[i][0], acc[i][1] = o[i][1];
    }
  }
  __syncthreads();
  // Partials in the general kernel's layout: [token][q head][split][max, sum, D outputs].
#pragma unroll
  for (int i = 0; i < G::kRowsPerThread; ++i) {
    const int r = rgroup + i * G::kGroups;
    if (r >= rows) break;
    const int t = r / group, h = g * group + r % group;
    float* out = partial + ((static_cast<int64_t>(t) * s.q_heads + h) * splits + split) * (D + 2);
    out[2 + 2 * pair] = acc[i][0], out[3 + 2 * pair] = acc[i][1];
    if (pair == 0) out[0] = row_m[r], out[1] = row_l[r];
  }
}

}  // namespace

int attentionDecodeSplits(int kv_heads, int keys) {
  // Up to ~1024 blocks (a block holds 46 KB of shared memory and 4 warps: 3-4 per SM at once, see
  // attnMinBlocks), at least one tile of keys per split.
  const int want = std::min((1024 + kv_heads - 1) / kv_heads, kMaxDecodeSplits);
  const int tiles = std::max(1, (keys + kTile - 1) / kTile);
  const int per = (tiles + want - 1) / want;  // whole tiles per split, as the kernel divides them
  return (tiles + per - 1) / per;
}

bool attentionDecodeApplies(const AttnShape& s) {
  const int d = s.head_dim;
  return (d == 32 || d == 64 || d == 128) && s.tokens * (s.q_heads / s.kv_heads) <= kDecodeRows;
}

cudaError_t launchAttentionDecode(const bf16_t* qkv, bf16_t* k_cache, bf16_t* v_cache, float* partial,
                                  const AttnShape& s, int splits, cudaStream_t stream) {
  const dim3 grid(s.kv_heads, splits), block(kThreads);
  // A programmatic dependent of the RoPE kernel (common/pdl.cuh) where s.pdl: its first tile of older cache
  // rows is then requested before the RoPE kernel ends.
  const int rows = s.tokens * (s.q_heads / s.kv_heads);
  auto go = [&](auto kernel) {
    return launchPdlIf(s.pdl, kernel, grid, block, stream, qkv, k_cache, v_cache, partial, s);
  };
  auto byRows = [&](auto k4, auto k8, auto k16) { return rows <= 4 ? go(k4) : rows <= 8 ? go(k8) : go(k16); };
  switch (s.head_dim) {
    case 32: return byRows(attnDecodeKernel<32, 4>, attnDecodeKernel<32, 8>, attnDecodeKernel<32, 16>);
    case 64: return byRows(attnDecodeKernel<64, 4>, attnDecodeKernel<64, 8>, attnDecodeKernel<64, 16>);
    case 128: return byRows(attnDecodeKernel<128, 4>, attnDecodeKernel<128, 8>, attnDecodeKernel<128, 16>);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tpscope::workload
