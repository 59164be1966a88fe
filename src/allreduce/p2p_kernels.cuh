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
// The LL one-shot and the fused kernels are in p2p_ll_kernels.cuh.
#pragma once

#include "allreduce/reduce_ops.cuh"

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

}  // namespace tpscope::detail
