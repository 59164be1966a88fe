// SPDX-License-Identifier: Apache-2.0
// p2p_kernels.cuh - backend `p2p`: kernels that load and store peer GPU memory directly (NVLink, or
// PCIe P2P), with per-block flags and device-resident sequence numbers as in host_kernels.cuh.
//
// Requirements: peer access enabled between every pair (all of a process's cudaMalloc memory is then
// addressable from every GPU), sm_70+. Never uses NVLink multicast.
//
// One-shot (small messages): each block pushes its range of this GPU's data into every peer's receive
// buffer, release-stores its flag in the peer's memory, waits for the peers' flags in its own memory
// (local polling: no round trip per poll), and sums its range in rank order from local memory.
//
// Two-shot (large messages): the message is cut into N slices, slice q owned by rank q, each slice cut
// among the blocks. Phase 1 (reduce-scatter): block b pushes its part of every peer's slice to that
// peer and flags it; once every peer's flag arrives, it sums its part of its own slice. Phase 2
// (all-gather): it stores the sum into its own buffer and into every peer's buffer, flags again, and
// waits until every peer's part has arrived in its own buffer. A peer's buffer is written only after
// that peer's phase-1 flag for the same call and block, which the peer sets after reading the same
// ranges of its buffer, so in-place is safe. Slots alternate as in the host kernel: a rank that
// reaches call s+2 has seen every peer start call s+1, so nobody still reads slot s mod 2.
#pragma once

#include "allreduce/push.cuh"
#include "allreduce/reduce_ops.cuh"
#include "common/pdl.cuh"

namespace tpscope::detail {

constexpr int kP2pThreads = 512;
constexpr int kP2pFlagStride = 8;  // u64 per flag: 64 bytes

struct P2pHandle {
  char* recv[TPS_MAX_DEVICES];                 // each rank's receive buffer: [2][nranks][recv_stride]
  unsigned long long* flags[TPS_MAX_DEVICES];  // each rank's flags: [2 phases][2 slots][nranks][blocks]
  void* bufs[TPS_MAX_DEVICES];                 // this call's user buffers (two-shot writes peers')
  unsigned long long* counters;                // this rank's sequence per block (device memory)
  unsigned* status;                            // mapped host: [nranks], nonzero after a timeout
  size_t recv_stride;
  unsigned long long timeout_ns;
  int rank;
  int nranks;
};

__device__ inline unsigned long long* p2pFlag(const P2pHandle& h, int owner, int phase, int slot, int from, int b) {
  return h.flags[owner] + ((((size_t)phase * 2 + slot) * h.nranks + from) * gridDim.x + b) * kP2pFlagStride;
}

// Threads q < nranks, q != rank, wait for their peer's flag in this rank's memory; returns false (after
// recording tpsTimeout) when a peer did not arrive in time, or an error was recorded already (a
// two-shot piece after one that timed out). Ends with a block barrier.
__device__ inline bool p2pWait(const P2pHandle& h, int phase, int slot, unsigned long long s, int* aborted) {
  const int tid = threadIdx.x;
  if (tid < h.nranks && tid != h.rank) {
    const unsigned long long* f = p2pFlag(h, h.rank, phase, slot, tid, blockIdx.x);
    const unsigned long long t0 = globalTimerNs();
    for (unsigned polls = 1; loadAcquire(f) < s; ++polls) {
      if (globalTimerNs() - t0 > h.timeout_ns ||
          (polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks))) {
        *aborted = 1;
        break;
      }
      __nanosleep(32);
    }
  }
  __syncthreads();
  if (*aborted) {
    if (tid == 0) reportTimeout(h.status, h.rank);
    return false;
  }
  return true;
}

// Barrier, then thread q (q != rank) release-stores s into peer q's flag for (phase, slot, this rank).
__device__ inline void p2pSignal(const P2pHandle& h, int phase, int slot, unsigned long long s) {
  __syncthreads();
  const int tid = threadIdx.x;
  if (tid < h.nranks && tid != h.rank) storeRelease(p2pFlag(h, tid, phase, slot, h.rank, blockIdx.x), s);
}

// Vector units [u0, u1) of `count` elements: whole 16-byte vectors, the tail to the last block. With a
// misaligned buffer (kAligned false) every element goes through the scalar tail: correct, not fast.
template <typename T, bool kAligned>
__global__ void __launch_bounds__(kP2pThreads) p2pOneShot(P2pHandle h, T* buf, size_t count) {
  using V = Vec<T>;
  constexpr int kE = V::kElems;
  __shared__ unsigned long long seq;
  __shared__ int aborted;
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  if (tid == 0) seq = h.counters[b] + 1, aborted = 0;
  __syncthreads();
  const unsigned long long s = seq;
  const int slot = static_cast<int>(s & 1);
  const size_t units = kAligned ? count / kE : 0, per = (units + nb - 1) / nb;
  const size_t u0 = min(units, per * b), u1 = min(units, u0 + per);
  const bool tail = b == nb - 1;
  auto slotOf = [&](int owner, int from) { return h.recv[owner] + ((size_t)slot * h.nranks + from) * h.recv_stride; };

  // Push this block's range to every peer.
  for (size_t u = u0 + tid; u < u1; u += blockDim.x) {
    const uint4 v = reinterpret_cast<const uint4*>(buf)[u];
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < h.nranks && q != h.rank) reinterpret_cast<uint4*>(slotOf(q, h.rank))[u] = v;
  }
  if (tail)
    for (size_t i = units * kE + tid; i < count; i += blockDim.x)
      for (int q = 0; q < h.nranks; ++q)
        if (q != h.rank) reinterpret_cast<T*>(slotOf(q, h.rank))[i] = buf[i];
  p2pSignal(h, 0, slot, s);
  if (!p2pWait(h, 0, slot, s, &aborted)) return;
  // Sum in rank order from local memory.
  for (size_t u = u0 + tid; u < u1; u += blockDim.x) {
    V own;
    own.raw = reinterpret_cast<const uint4*>(buf)[u];
    float acc[kE] = {};
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
      if (q >= h.nranks) break;
      if (q == h.rank) {
        accumulate<T>(acc, own);
      } else {
        V in;
        in.raw = __ldcg(reinterpret_cast<const uint4*>(slotOf(h.rank, q)) + u);
        accumulate<T>(acc, in);
      }
    }
    reinterpret_cast<uint4*>(buf)[u] = round<T>(acc).raw;
  }
  if (tail)
    for (size_t i = units * kE + tid; i < count; i += blockDim.x) {
      float acc = 0.f;
      for (int q = 0; q < h.nranks; ++q)
        acc += Elem<T>::toFloat(q == h.rank ? buf[i] : reinterpret_cast<const T*>(slotOf(h.rank, q))[i]);
      buf[i] = Elem<T>::fromFloat(acc);
    }
  if (tid == 0) h.counters[b] = s;
}

// Two-shot over `count` elements; requires 16-byte aligned buffers and count a multiple of
// nranks x kE (the host splits off the rest).
template <typename T>
__global__ void __launch_bounds__(kP2pThreads) p2pTwoShot(P2pHandle h, size_t count) {
  using V = Vec<T>;
  constexpr int kE = V::kElems;
  __shared__ unsigned long long seq;
  __shared__ int aborted;
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  if (tid == 0) seq = h.counters[b] + 1, aborted = 0;
  __syncthreads();
  const unsigned long long s = seq;
  const int slot = static_cast<int>(s & 1);
  const size_t slice_units = count / kE / h.nranks;  // vectors per slice
  const size_t per = (slice_units + nb - 1) / nb;
  const size_t p0 = min(slice_units, per * b), p1 = min(slice_units, p0 + per);
  const uint4* mine = reinterpret_cast<const uint4*>(h.bufs[h.rank]);
  // recv[owner][slot][from] holds `from`'s copy of slice `owner`, indexed by vector within the slice.
  auto recvOf = [&](int owner, int from) {
    return reinterpret_cast<uint4*>(h.recv[owner] + ((size_t)slot * h.nranks + from) * h.recv_stride);
  };

  // Phase 1: push my part of every peer's slice.
  for (size_t u = p0 + tid; u < p1; u += blockDim.x) {
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < h.nranks && q != h.rank) recvOf(q, h.rank)[u] = mine[q * slice_units + u];
  }
  p2pSignal(h, 0, slot, s);
  if (!p2pWait(h, 0, slot, s, &aborted)) return;
  // Sum my slice's part in rank order; store it into every GPU's buffer.
  for (size_t u = p0 + tid; u < p1; u += blockDim.x) {
    const size_t g = h.rank * slice_units + u;
    float acc[kE] = {};
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
      if (q >= h.nranks) break;
      V in;
      in.raw = q == h.rank ? mine[g] : __ldcg(recvOf(h.rank, q) + u);
      accumulate<T>(acc, in);
    }
    const uint4 out = round<T>(acc).raw;
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < h.nranks) reinterpret_cast<uint4*>(h.bufs[q])[g] = out;
  }
  // Phase 2: tell every peer its copy of my part is in place, and wait for theirs.
  p2pSignal(h, 1, slot, s);
  if (!p2pWait(h, 1, slot, s, &aborted)) return;
  if (tid == 0) h.counters[b] = s;
}

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
  pdlWait();     // launched as one (p2p.cu): the input and the counters are earlier kernels' writes
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

// static: the one kernel here that is not a template, and the header has two users (p2p.cu, p2p_ipc.cu).
static __global__ void __launch_bounds__(kFusedThreads)
    p2pOneShotLLAddNorm(P2pLLHandle h, const __nv_bfloat16* partial, const __nv_bfloat16* residual_in,
                        __nv_bfloat16* residual_out, const __nv_bfloat16* weight, __nv_bfloat16* normed, int rows,
                        int width, float eps) {
  __shared__ unsigned long long seq;
  __shared__ float red[kFusedThreads / 32];
  __shared__ bool last;
  pdlTrigger();  // a programmatic dependent (the projection after the norm) may be scheduled now
  pdlWait();     // launched as one (p2p.cu): the input and the counters are earlier kernels' writes
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
  pdlWait();     // launched as one (p2p.cu): the input and the counters are earlier kernels' writes
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
