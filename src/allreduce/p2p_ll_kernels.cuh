// SPDX-License-Identifier: Apache-2.0
// p2p_ll_kernels.cuh - backend `p2p`: the LL one-shot (each 8 bytes travel with their own flag) and the
// reduction fused with the residual add and RMSNorm after it. Used by algorithms/p2p_ll.cu.
#pragma once

#include "allreduce/p2p_kernels.cuh"
#include "allreduce/push.cuh"
#include "common/pdl.cuh"

namespace tpscope::detail {
// ---- one-shot with the flags carried in the data (LL, as NCCL's low-latency protocol) ---------------
// Each 8 bytes of payload travel as one LLLine (push.cuh, which states the atomicity it relies on): no
// barrier and no separate flag store, the receiver polls the lines themselves, in its own memory. Half
// the line is flags, which costs nothing at decode sizes.

struct P2pLLHandle {
  LLLine* recv[TPS_MAX_DEVICES];  // each rank's lines: [2 slots][nranks][lines]
  // recv[rank], for the receiving side: recv[] indexed by a runtime rank makes the compiler copy the
  // handle to the stack (ptxas -v: a 104-byte frame; none with this), while recv[q] with q from an
  // unrolled loop stays in parameter space. Both forms run equally fast; this one needs no stack.
  LLLine* own;
  unsigned long long* counters;  // this rank's sequence per block
  unsigned* status;              // mapped host: [nranks]
  unsigned* norm_done;           // fused add + norm: blocks of each row done, [blocks]; back to 0 after
  float* norm_part;              // fused add + norm: each block's sum of squares, [blocks]
  size_t lines;                  // lines per (slot, sender)
  unsigned long long timeout_ns;
  int rank;
  int nranks;

  // The lines that rank `from` writes into rank `owner`'s memory in sequence slot `slot`; call it with
  // an `owner` from an unrolled loop (a constant), as recv[] wants.
  __device__ __forceinline__ LLLine* sendLines(int owner, int slot, int from) const {
    return recv[owner] + (static_cast<size_t>(slot) * nranks + from) * lines;
  }
  // The lines this rank received from rank `from` in slot `slot` (its own memory).
  __device__ __forceinline__ const LLLine* receivedLines(int slot, int from) const {
    return own + (static_cast<size_t>(slot) * nranks + from) * lines;
  }
};

// Words w0 + k * stride (k < n <= kWords) of an LL call summed over the ranks in rank order into acc[k]
// (zero on entry): this rank's part from `own`, each peer's from the lines it wrote into this rank's
// memory, polled until both flags read s. A peer's n lines are requested together and only the ones
// not there yet are requested again, so a thread with several words waits one memory latency per
// round, not one per word. False when a peer's line has not come within the timeout (counted from t0).
// Every kernel that sums LL lines does it here, so the order of the sum, and so the bits of the result,
// are the same in all of them.
template <typename T, int kWords>
__device__ __forceinline__ bool sumLLWords(const P2pLLHandle& h, int slot, unsigned s, size_t w0, size_t stride, int n,
                                           const uint2 (&own)[kWords], unsigned long long t0,
                                           float (&acc)[kWords][8 / sizeof(T)]) {
  constexpr int kPerWord = 8 / sizeof(T);
  union Word {
    uint2 u;
    T e[kPerWord];
  };
  auto add = [&](int k, uint2 v) {
    Word in;
    in.u = v;
#pragma unroll
    for (int e = 0; e < kPerWord; ++e) acc[k][e] += Elem<T>::toFloat(in.e[e]);
  };
#pragma unroll
  for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
    if (q >= h.nranks) break;
    if (q == h.rank) {
#pragma unroll
      for (int k = 0; k < kWords; ++k)
        if (k < n) add(k, own[k]);
      continue;
    }
    const LLLine* p = h.receivedLines(slot, q) + w0;
    LLLine line[kWords];
#pragma unroll
    for (int k = 0; k < kWords; ++k)
      if (k < n) line[k] = loadLLLine(p + k * stride);
    auto missing = [&](int k) { return k < n && !line[k].of(s); };
    for (;;) {
      bool ready = true;
#pragma unroll
      for (int k = 0; k < kWords; ++k) ready = ready && !missing(k);
      if (ready) break;
      if (globalTimerNs() - t0 > h.timeout_ns) return false;
#pragma unroll
      for (int k = 0; k < kWords; ++k)
        if (missing(k)) line[k] = loadLLLine(p + k * stride);
    }
#pragma unroll
    for (int k = 0; k < kWords; ++k)
      if (k < n) add(k, line[k].data());
  }
  return true;
}

// One word w: sumLLWords for a thread with a single word.
template <typename T>
__device__ __forceinline__ bool sumLLWord(const P2pLLHandle& h, int slot, unsigned s, size_t w, uint2 own,
                                          unsigned long long t0, float (&acc)[8 / sizeof(T)]) {
  const uint2 mine[1] = {own};
  float sum[1][8 / sizeof(T)] = {};
  const bool ok = sumLLWords<T, 1>(h, slot, s, w, 0, 1, mine, t0, sum);
#pragma unroll
  for (int e = 0; e < static_cast<int>(8 / sizeof(T)); ++e) acc[e] += sum[0][e];
  return ok;
}

// This rank's word w of an LL call, sent as one LLLine into every peer's memory (as pushWord does from
// callers' kernels that push a call's words themselves).
__device__ __forceinline__ void sendLLWord(const P2pLLHandle& h, int slot, unsigned s, size_t w, uint2 v) {
#pragma unroll
  for (int q = 0; q < TPS_MAX_DEVICES; ++q)
    if (q < h.nranks && q != h.rank) storeLLLine(h.sendLines(q, slot, h.rank) + w, v, s);
}

// Four bf16 values, one LL word, for the fused kernels.
union Bf16Word {
  uint2 u;
  __nv_bfloat16 e[4];
};

// The fused kernels' residual add of one word: x = bf16(x + bf16(sum)) element by element, the
// roundings of the unfused AllReduce and add; returns the new word's sum of squares.
__device__ __forceinline__ float addResidualWord(Bf16Word& x, const float (&sum)[4]) {
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    x.e[e] = __float2bfloat16(__bfloat162float(x.e[e]) + __bfloat162float(__float2bfloat16(sum[e])));
    const float f = __bfloat162float(x.e[e]);
    ss += f * f;
  }
  return ss;
}

// One word of the norm's output: bf16(x * inv * g).
__device__ __forceinline__ uint2 normWord(const Bf16Word& x, const Bf16Word& g, float inv) {
  Bf16Word o;
#pragma unroll
  for (int e = 0; e < 4; ++e) o.e[e] = __float2bfloat16(__bfloat162float(x.e[e]) * inv * __bfloat162float(g.e[e]));
  return o.u;
}

// `count` elements whose bytes are a multiple of 8, buffers 8-byte aligned; words of 8 bytes.
template <typename T>
__global__ void __launch_bounds__(kP2pThreads) p2pOneShotLL(P2pLLHandle h, T* buf, size_t count) {
  constexpr int kPerWord = 8 / sizeof(T);
  __shared__ unsigned long long seq;
  pdlTrigger();  // a programmatic dependent (the norm after a decode AllReduce) may be scheduled now
  pdlWait();     // launched as one (algorithms/p2p_ll.cu): the input and the counters are earlier kernels' writes
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  const size_t words = count / kPerWord, per = (words + nb - 1) / nb;
  const size_t w0 = min(words, per * b), w1 = min(words, w0 + per);
  uint2* io = reinterpret_cast<uint2*>(buf);
  // The first word's load is issued before the sequence number's, so the two latencies overlap.
  const uint2 first = w0 + tid < w1 ? io[w0 + tid] : make_uint2(0, 0);
  if (tid == 0) seq = h.counters[b] + 1;
  __syncthreads();
  const unsigned s = static_cast<unsigned>(seq);
  const int slot = static_cast<int>(seq & 1);

  for (size_t w = w0 + tid; w < w1; w += blockDim.x) {
    sendLLWord(h, slot, s, w, w == w0 + tid ? first : io[w]);
  }
  bool timed_out = false;
  const unsigned long long t0 = globalTimerNs();
  for (size_t w = w0 + tid; w < w1; w += blockDim.x) {
    union {
      uint2 u;
      T e[kPerWord];
    } own;
    own.u = io[w];
    float acc[kPerWord] = {};
    if (!sumLLWord<T>(h, slot, s, w, own.u, t0, acc)) {
      timed_out = true;
      break;
    }
#pragma unroll
    for (int k = 0; k < kPerWord; ++k) own.e[k] = Elem<T>::fromFloat(acc[k]);
    io[w] = own.u;
  }
  if (timed_out) reportTimeout(h.status, h.rank);
  __syncthreads();
  if (tid == 0) h.counters[b] = seq;
}

// ---- LL one-shot fused with the residual add and RMSNorm that follow it (tpsAllReduceAddRmsNorm) ----
// Rows are spread over the whole LL grid (blocks per row = blocks / rows), and each block does what
// p2pOneShotLL does for its slice of its row: sends it as LL lines to every peer and waits only for
// the peers' lines of that slice. It then adds the residual to its slice (residual_out, bit for bit
// the unfused bf16(residual_in + bf16(sum))) and leaves its slice's sum of squares in norm_part. The
// row's last block to finish (a counter per row) sums those in block order, so every GPU derives the
// same scale, and writes the whole row's normed = bf16(residual_out * rsqrt(mean(residual_out^2) +
// eps) * weight). No block waits for another; the norm costs one block's pass over the row instead
// of a second kernel. With a norm, residual_in must not be residual_out (the last block reads the
// whole new row); partial may be. Without one (weight null) each element is read, then written, by
// one thread, so residual_out may be residual_in (the residual updated in place).
constexpr int kFusedThreads = 256;  // most threads per block

// static: the one kernel here that is not a template, in a header.
static __global__ void __launch_bounds__(kFusedThreads)
    p2pOneShotLLAddNorm(P2pLLHandle h, const __nv_bfloat16* partial, const __nv_bfloat16* residual_in,
                        __nv_bfloat16* residual_out, const __nv_bfloat16* weight, __nv_bfloat16* normed, int rows,
                        int width, float eps) {
  __shared__ unsigned long long seq;
  __shared__ float red[kFusedThreads / 32];
  __shared__ bool last;
  pdlTrigger();  // a programmatic dependent (the projection after the norm) may be scheduled now
  pdlWait();     // launched as one (algorithms/p2p_ll.cu): the input and the counters are earlier kernels' writes
  const int b = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  if (tid == 0) seq = h.counters[b] + 1;
  __syncthreads();
  const unsigned s = static_cast<unsigned>(seq);
  const int slot = static_cast<int>(seq & 1);
  const int per_row = max(1, static_cast<int>(gridDim.x) / rows);
  const int row = b / per_row, part = b % per_row;
  const bool active = row < rows;
  const int words = width / 4;
  const int slice = (words + per_row - 1) / per_row;
  const int s0 = min(words, part * slice), s1 = min(words, s0 + slice);  // this block's words of the row
  const size_t base = static_cast<size_t>(row) * words;
  bool timed_out = false;
  float ss = 0.0f;
  if (active) {
    const uint2* in = reinterpret_cast<const uint2*>(partial) + base;
    for (int i = s0 + tid; i < s1; i += nt) sendLLWord(h, slot, s, base + i, in[i]);
    const uint2* res = reinterpret_cast<const uint2*>(residual_in) + base;
    uint2* out = reinterpret_cast<uint2*>(residual_out) + base;
    const unsigned long long t0 = globalTimerNs();
    for (int i = s0 + tid; i < s1; i += nt) {
      float acc[4] = {};
      if (!sumLLWord<__nv_bfloat16>(h, slot, s, base + i, in[i], t0, acc)) {
        timed_out = true;
        break;
      }
      Bf16Word x;
      x.u = res[i];
      ss += addResidualWord(x, acc);
      out[i] = x.u;
    }
  }
  if (weight == nullptr) {  // the add alone (uniform across the block): no sums of squares, no counter
    if (timed_out) reportTimeout(h.status, h.rank);
    __syncthreads();
    if (tid == 0) h.counters[b] = seq;
    return;
  }
  // Every thread reaches the block's barriers, timed out or not; every block of a row counts itself
  // done, so the row's counter always returns to 0.
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((tid & 31) == 0) red[tid >> 5] = ss;
  const bool failed = __syncthreads_or(timed_out);
  if (tid == 0 && active) {
    float total = 0.0f;
    for (int w = 0; w < (nt + 31) / 32; ++w) total += red[w];
    h.norm_part[b] = total;
  }
  __threadfence();  // this block's residual_out and norm_part before its count
  __syncthreads();  // (also: red[] is free again for the last block's reduction)
  if (tid == 0) last = active && atomicAdd(&h.norm_done[row], 1u) == static_cast<unsigned>(per_row - 1);
  __syncthreads();
  if (last) {
    __threadfence();
    // The row's total: thread p takes block p's sum, then a fixed reduction tree (the same on every
    // GPU, so every GPU gets the same scale).
    float t = 0.0f;
    for (int p = tid; p < per_row; p += nt) t += __ldcg(h.norm_part + row * per_row + p);
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    __syncwarp();
    if ((tid & 31) == 0) red[tid >> 5] = t;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (nt + 31) / 32; ++w) total += red[w];
    const float inv = rsqrtf(total / width + eps);
    if (!failed) {  // (weight is set: the add alone returned above)
      const uint2* out = reinterpret_cast<const uint2*>(residual_out) + base;
      const uint2* wt = reinterpret_cast<const uint2*>(weight);
      uint2* nrm = reinterpret_cast<uint2*>(normed) + base;
      // Eight words per thread per round, all loads first (one wait on L2, not eight).
      for (int i0 = tid; i0 < words; i0 += 8 * nt) {
        Bf16Word x[8], g[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (i0 + k * nt < words) x[k].u = __ldcg(out + i0 + k * nt), g[k].u = wt[i0 + k * nt];  // past L1
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          if (i0 + k * nt >= words) break;
          nrm[i0 + k * nt] = normWord(x[k], g[k], inv);
        }
      }
    }
    if (tid == 0) h.norm_done[row] = 0;
  }
  if (timed_out) reportTimeout(h.status, h.rank);
  __syncthreads();
  if (tid == 0) h.counters[b] = seq;
}

// ---- the same, one block per row (decode rows of up to kRowThreads x kRowWords words) ----------
// Block r sends row r as LL lines, receives the peers' lines of that row, adds the residual and keeps
// the row in registers, so the sum of squares is one block reduction and the norm needs no second
// pass over memory and no other block: no counter, no fence, no last-block tail. Blocks from `rows` on
// only advance their sequence number, so every LL counter stays in step with the other LL kernels
// (launched on the whole LL grid). (A grid of `rows` blocks, block 0 advancing the others' numbers at
// its end, is slower.) Results as
// p2pOneShotLLAddNorm: the new residual bit for bit the unfused one, the same scale on every GPU (the
// block's reduction order is fixed). residual_out may be residual_in or partial (each word is read
// before it is written, by the thread that writes it).
// kPushed: the call's words were sent by the kernel that made the partial (allreduce/push.cuh), and
// this one only waits for the peers' lines and sums (allReducePushedAddRmsNorm).
// 512 x 4: the fastest block shape for 8b tensor decode with pushed reductions, against 256 x 8 and
// 1024 x 2 (docs/PERFORMANCE.md, "Workload (tp)").
constexpr int kRowThreads = 512, kRowWords = 4;  // rows of up to 8192 bf16

template <bool kPushed>
__global__ void __launch_bounds__(kRowThreads)
    p2pOneShotLLAddNormRow(P2pLLHandle h, const __nv_bfloat16* partial, const __nv_bfloat16* residual_in,
                           __nv_bfloat16* residual_out, const __nv_bfloat16* weight, __nv_bfloat16* normed, int rows,
                           int width, float eps) {
  __shared__ unsigned long long seq;
  __shared__ float red[kRowThreads / 32];
  pdlTrigger();  // a programmatic dependent (the projection after the norm) may be scheduled now
  pdlWait();     // launched as one (algorithms/p2p_ll.cu): the input and the counters are earlier kernels' writes
  const int b = blockIdx.x, tid = threadIdx.x;
  if (tid == 0) seq = h.counters[b] + 1;
  __syncthreads();
  const unsigned s = static_cast<unsigned>(seq);
  const int slot = static_cast<int>(seq & 1);
  if (b < rows) {  // uniform in the block
    const int words = width / 4;
    // This thread's words of the row: tid + k * kRowThreads for k < n.
    const int n = tid < words ? min(kRowWords, (words - tid + kRowThreads - 1) / kRowThreads) : 0;
    const size_t base = static_cast<size_t>(b) * words + tid;
    const uint2* in = reinterpret_cast<const uint2*>(partial) + base;
    const uint2* res = reinterpret_cast<const uint2*>(residual_in) + base;
    uint2 own[kRowWords];
    Bf16Word x[kRowWords], g[kRowWords];
#pragma unroll
    for (int k = 0; k < kRowWords && k < n; ++k) {
      own[k] = in[k * kRowThreads];
      if (!kPushed) sendLLWord(h, slot, s, base + k * kRowThreads, own[k]);
    }
    // The residual and the norm weight are loaded while the peers' lines travel.
#pragma unroll
    for (int k = 0; k < kRowWords && k < n; ++k) {
      x[k].u = res[k * kRowThreads];
      if (weight != nullptr) g[k].u = reinterpret_cast<const uint2*>(weight)[tid + k * kRowThreads];
    }
    float ss = 0.0f;
    float acc[kRowWords][4] = {};
    const bool timed_out =
        !sumLLWords<__nv_bfloat16, kRowWords>(h, slot, s, base, kRowThreads, n, own, globalTimerNs(), acc);
    uint2* out = reinterpret_cast<uint2*>(residual_out) + base;
#pragma unroll
    for (int k = 0; k < kRowWords && k < n && !timed_out; ++k) {
      ss += addResidualWord(x[k], acc[k]);
      out[k * kRowThreads] = x[k].u;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((tid & 31) == 0) red[tid >> 5] = ss;
    const bool failed = __syncthreads_or(timed_out);
    if (weight != nullptr && !failed) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kRowThreads / 32; ++w) total += red[w];
      const float inv = rsqrtf(total / width + eps);
      uint2* nrm = reinterpret_cast<uint2*>(normed) + base;
#pragma unroll
      for (int k = 0; k < kRowWords && k < n; ++k) nrm[k * kRowThreads] = normWord(x[k], g[k], inv);
    }
    if (timed_out) reportTimeout(h.status, h.rank);
  }
  __syncthreads();
  if (tid == 0) h.counters[b] = seq;
}

}  // namespace tpscope::detail
