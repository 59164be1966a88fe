// SPDX-License-Identifier: Apache-2.0
// reduce_ops.cuh - element conversions and 16-byte vector helpers shared by the AllReduce kernels.
//
// Every kernel sums in float and rounds once to the element type, adding the ranks' values in rank
// order 0..N-1 on every GPU: the same operands in the same order give bit-identical results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace tpscope::detail {

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float toFloat(float v) { return v; }
  __device__ static float fromFloat(float v) { return v; }
};
template <>
struct Elem<__half> {
  __device__ static float toFloat(__half v) { return __half2float(v); }
  __device__ static __half fromFloat(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }
};

// 16 bytes of elements, moved as one uint4.
template <typename T>
struct Vec {
  static constexpr int kElems = 16 / sizeof(T);
  union {
    uint4 raw;
    T e[kElems];
  };
};

template <typename T>
__device__ inline void accumulate(float (&acc)[Vec<T>::kElems], const Vec<T>& v) {
#pragma unroll
  for (int k = 0; k < Vec<T>::kElems; ++k) acc[k] += Elem<T>::toFloat(v.e[k]);
}

template <typename T>
__device__ inline Vec<T> round(const float (&acc)[Vec<T>::kElems]) {
  Vec<T> out;
#pragma unroll
  for (int k = 0; k < Vec<T>::kElems; ++k) out.e[k] = Elem<T>::fromFloat(acc[k]);
  return out;
}

// Nanoseconds from the GPU's global timer; used only to bound waits, so its coarse tick is fine.
__device__ inline unsigned long long globalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// System-scope release store and acquire load of a 64-bit flag (sm_70+). Plain stores and loads,
// not atomics: these GPUs have no native atomics on host memory (cudaDevAttrHostNativeAtomicSupported
// is 0 on the H200 and on PCIe consumer cards alike), and none are needed for one writer per flag.
__device__ inline void storeRelease(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ inline unsigned long long loadAcquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Records tpsTimeout for `rank` in the host-mapped status words that tpsCommGetAsyncError reads.
__device__ inline void reportTimeout(unsigned* status, int rank) {
  *reinterpret_cast<volatile unsigned*>(status + rank) = static_cast<unsigned>(tpsTimeout);
  __threadfence_system();
}

// Whether a kernel of this communicator has already recorded an error in the first `nranks` status
// words (in one process every rank's; across processes this process's own). A wait that sees one gives
// up at once: a call cut in pieces then times out once, not once per piece, and a rank that comes late
// does not wait out the timeout for peers that have already left.
__device__ inline bool errorRecorded(const unsigned* status, int nranks) {
  for (int q = 0; q < nranks; ++q)
    if (reinterpret_cast<const volatile unsigned*>(status)[q] != 0) return true;
  return false;
}
// A waiting thread reads the status words once per this many polls of its flag (they live in host
// memory: a read costs a PCIe round trip, so not every poll).
constexpr unsigned kStatusPollInterval = 64;

}  // namespace tpscope::detail
