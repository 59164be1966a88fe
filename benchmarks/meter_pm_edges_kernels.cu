// SPDX-License-Identifier: Apache-2.0
// meter_pm_edges_kernels.cu - the GPU's clock for meter_pm_edges: a kernel that stamps %globaltimer
// into device memory (the marker around a copy), and a kernel that answers the host's pings through
// mapped host memory with a stamp each (the map from the GPU's clock to the host's).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpscope::bench {

namespace {

__device__ __forceinline__ unsigned long long globalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stampKernel(unsigned long long* out) { *out = globalTimer(); }

// Ping i (1..n): waits for the host to write i into *flag, stamps, writes the stamp to stamps[i] and
// then i to stamps[0] (the answer the host waits for), fenced so the stamp is visible first.
__global__ void pingKernel(const volatile int* flag, volatile unsigned long long* stamps, int n) {
  for (int i = 1; i <= n; ++i) {
    while (*flag != i) {
    }
    stamps[i] = globalTimer();
    __threadfence_system();
    stamps[0] = static_cast<unsigned long long>(i);
    __threadfence_system();
  }
}

}  // namespace

cudaError_t launchStamp(unsigned long long* out, cudaStream_t stream) {
  stampKernel<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}

cudaError_t launchPing(const int* flag, unsigned long long* stamps, int n, cudaStream_t stream) {
  pingKernel<<<1, 1, 0, stream>>>(flag, stamps, n);
  return cudaGetLastError();
}

}  // namespace tpscope::bench
