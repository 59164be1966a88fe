// SPDX-License-Identifier: Apache-2.0
// host_kernels.cuh - the host backend's kernels: the one-kernel path through mapped host memory, and
// the add kernel that ends the copy-engine path.
//
// Kernel path (small messages), one launch per GPU, `blocks` blocks each owning a contiguous range:
//   1. write: the block copies its range of this GPU's buffer into this rank's staging region of slot
//      (s mod 2) in pinned, mapped host memory, with 16-byte stores;
//   2. publish: after __syncthreads, thread 0 release-stores s into this rank's flag for (slot, block),
//      one 64-byte line per flag so writers never share a line. The release is cumulative over the
//      other threads' stores, which the barrier ordered before it (the pattern of vLLM's barrier);
//   3. wait: thread q (q != rank) acquire-loads peer q's flag for (slot, block) until it reaches s,
//      sleeping briefly between polls, and gives up after timeout_ns, or as soon as any kernel of the
//      communicator has recorded an error (errorRecorded): the block then records tpsTimeout in the host
//      status word and returns, so a missing peer never hangs the GPU, and the later pieces of a call
//      whose first piece timed out end at once;
//   4. reduce: after a second barrier every thread reads the peers' ranges with cache-volatile loads
//      (the lines are rewritten every second call) and sums in rank order, in place.
// s is the call's sequence number, read from a per-block counter in device memory and stored back at
// the end, so CUDA-graph replays advance it too. Two slots suffice: a rank that reaches call s+2 has
// seen every peer publish s+1, which each peer does only after its kernel for call s has finished
// (kernels on one stream do not overlap), so nobody still reads slot s mod 2.
#pragma once

#include "allreduce/reduce_ops.cuh"

namespace tpscope::detail {

constexpr int kFlagStride = 8;  // u64 per flag: 64 bytes, one cache line
constexpr int kKernelThreads = 512;

// Trivially copyable view of one rank's kernel-path resources, passed by value.
struct HostKernelHandle {
  char* stage;                   // mapped host: [2 slots][nranks][stage_stride]
  size_t stage_stride;           // bytes per (slot, rank) region
  unsigned long long* flags;     // mapped host: [2][nranks][blocks] x kFlagStride
  unsigned long long* counters;  // device: [blocks], this rank's sequence per block
  unsigned* status;              // mapped host: [nranks], nonzero after a timeout
  unsigned long long timeout_ns;
  int rank;
  int nranks;
};

template <typename T, bool kAligned>
__global__ void __launch_bounds__(kKernelThreads) hostKernelAllReduce(HostKernelHandle h, T* buf, size_t count) {
  using V = Vec<T>;
  constexpr int kE = V::kElems;
  __shared__ unsigned long long seq;
  __shared__ int aborted;
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  if (tid == 0) {
    seq = h.counters[b] + 1;
    aborted = 0;
  }
  __syncthreads();
  const unsigned long long s = seq;
  const int slot = static_cast<int>(s & 1);

  // This block's element range: whole vectors when aligned, the tail (count % kE) to the last block.
  const size_t unit = kAligned ? kE : 1;
  const size_t units = count / unit;
  const size_t per = (units + nb - 1) / nb;
  const size_t u0 = min(units, per * b), u1 = min(units, u0 + per);
  const bool tail_here = kAligned && b == nb - 1;
  const size_t tail0 = units * unit;

  auto region = [&](int q) { return h.stage + (static_cast<size_t>(slot) * h.nranks + q) * h.stage_stride; };
  // 1. write
  {
    char* mine = region(h.rank);
    if (kAligned) {
      const uint4* src = reinterpret_cast<const uint4*>(buf);
      uint4* dst = reinterpret_cast<uint4*>(mine);
      for (size_t u = u0 + tid; u < u1; u += blockDim.x) dst[u] = src[u];
    } else {
      T* dst = reinterpret_cast<T*>(mine);
      for (size_t u = u0 + tid; u < u1; u += blockDim.x) dst[u] = buf[u];
    }
    if (tail_here)
      for (size_t i = tail0 + tid; i < count; i += blockDim.x) reinterpret_cast<T*>(mine)[i] = buf[i];
  }
  __syncthreads();
  // 2. publish
  auto flag = [&](int q) { return h.flags + ((static_cast<size_t>(slot) * h.nranks + q) * nb + b) * kFlagStride; };
  if (tid == 0) storeRelease(flag(h.rank), s);
  // 3. wait
  if (tid < h.nranks && tid != h.rank) {
    const unsigned long long* f = flag(tid);
    const unsigned long long t0 = globalTimerNs();
    for (unsigned polls = 1; loadAcquire(f) < s; ++polls) {
      if (globalTimerNs() - t0 > h.timeout_ns ||
          (polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks))) {
        aborted = 1;
        break;
      }
      __nanosleep(64);
    }
  }
  __syncthreads();
  if (aborted) {
    if (tid == 0) reportTimeout(h.status, h.rank);
    return;
  }
  // 4. reduce, in rank order
  if (kAligned) {
    uint4* io = reinterpret_cast<uint4*>(buf);
    for (size_t u = u0 + tid; u < u1; u += blockDim.x) {
      V own;
      own.raw = io[u];
      V in[TPS_MAX_DEVICES];
#pragma unroll
      for (int q = 0; q < TPS_MAX_DEVICES; ++q)
        if (q < h.nranks && q != h.rank) in[q].raw = __ldcv(reinterpret_cast<const uint4*>(region(q)) + u);
      float acc[kE] = {};
#pragma unroll
      for (int q = 0; q < TPS_MAX_DEVICES; ++q)
        if (q < h.nranks) accumulate<T>(acc, q == h.rank ? own : in[q]);
      io[u] = round<T>(acc).raw;
    }
  }
  const size_t s0 = kAligned ? (tail_here ? tail0 : count) : u0;
  const size_t s1 = kAligned ? count : u1;
  for (size_t i = s0 + tid; i < s1; i += blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < h.nranks; ++q) {
      T v = q == h.rank ? buf[i] : reinterpret_cast<const volatile T*>(region(q))[i];
      acc += Elem<T>::toFloat(v);
    }
    buf[i] = Elem<T>::fromFloat(acc);
  }
  if (tid == 0) h.counters[b] = s;
}

// Copy-engine path epilogue: buf = sum over ranks in rank order, the peers' data in tmp (one region of
// `stride` elements per peer rank, own rank's region unused). In place, grid-stride, any alignment.
struct AddArgs {
  const void* tmp[TPS_MAX_DEVICES];  // per rank q != rank: q's data for this round
  int rank;
  int nranks;
};

// Vectorised when buf is 16-byte aligned (tmp always is); the scalar loop takes the rest.
template <typename T, bool kAligned>
__global__ void addPeers(AddArgs a, T* buf, size_t count) {
  using V = Vec<T>;
  constexpr int kE = V::kElems;
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_from = 0;
  if (kAligned) {
    const size_t units = count / kE;
    uint4* io = reinterpret_cast<uint4*>(buf);
    for (size_t u = first; u < units; u += stride) {
      V own;
      own.raw = io[u];
      float acc[kE] = {};
#pragma unroll
      for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
        if (q >= a.nranks) break;
        if (q == a.rank) {
          accumulate<T>(acc, own);
        } else {
          V in;
          in.raw = reinterpret_cast<const uint4*>(a.tmp[q])[u];
          accumulate<T>(acc, in);
        }
      }
      io[u] = round<T>(acc).raw;
    }
    scalar_from = units * kE;
  }
  for (size_t i = scalar_from + first; i < count; i += stride) {
    float acc = 0.f;
    for (int q = 0; q < a.nranks; ++q)
      acc += Elem<T>::toFloat(q == a.rank ? buf[i] : static_cast<const T*>(a.tmp[q])[i]);
    buf[i] = Elem<T>::fromFloat(acc);
  }
}

}  // namespace tpscope::detail
