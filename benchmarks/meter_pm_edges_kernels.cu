// SPDX-License-Identifier: Apache-2.0
// meter_pm_edges_kernels.cu - the GPU's clock for meter_pm_edges: a kernel that stamps %globaltimer
// into device memory (the marker around a copy), kernels that move bytes over PCIe with the SMs and
// stamp their own first and last access (the traffic and its markers in one), and a kernel that
// answers the host's pings through mapped host memory with a stamp each (the map from the GPU's
// clock to the host's).
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

// Each block stamps its start before its first access (the earliest stamp is the traffic's start)
// and, after its last access is visible system-wide, its end (the latest is the traffic's end).
// `stamps` holds {first, last}: ~0 and 0 before the launch.
__device__ __forceinline__ void stampStart(unsigned long long* stamps) {
  if (threadIdx.x == 0) atomicMin(&stamps[0], globalTimer());
  __syncthreads();
}
__device__ __forceinline__ void stampEnd(unsigned long long* stamps) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&stamps[1], globalTimer());
}

// D2H by the SMs: 16-byte stores into mapped host memory.
__global__ void smStoreKernel(uint4* host, size_t n, unsigned long long* stamps) {
  stampStart(stamps);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    host[i] = make_uint4(static_cast<unsigned>(i), 1u, 2u, 3u);
  stampEnd(stamps);
}

// H2D by the SMs: 16-byte loads from mapped host memory, folded into one word per thread so that
// the loads cannot be dropped.
__global__ void smLoadKernel(const uint4* host, size_t n, unsigned* sink, unsigned long long* stamps) {
  stampStart(stamps);
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = host[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  stampEnd(stamps);
}

}  // namespace

// Blocks that are all resident at once on an H100/H200-sized GPU (132 SMs), so that every block
// starts with the launch and the earliest stamp is the traffic's start.
constexpr int kSmBlocks = 132 * 4, kSmThreads = 256;

size_t smSinkWords() { return size_t{kSmBlocks} * kSmThreads; }

cudaError_t launchSmMove(bool h2d, void* host_mapped, size_t bytes, unsigned* sink, unsigned long long* stamps,
                         cudaStream_t stream) {
  if (h2d)
    smLoadKernel<<<kSmBlocks, kSmThreads, 0, stream>>>(static_cast<const uint4*>(host_mapped), bytes / 16, sink,
                                                       stamps);
  else
    smStoreKernel<<<kSmBlocks, kSmThreads, 0, stream>>>(static_cast<uint4*>(host_mapped), bytes / 16, stamps);
  return cudaGetLastError();
}

cudaError_t launchStamp(unsigned long long* out, cudaStream_t stream) {
  stampKernel<<<1, 1, 0, stream>>>(out);
  return cudaGetLastError();
}

cudaError_t launchPing(const int* flag, unsigned long long* stamps, int n, cudaStream_t stream) {
  pingKernel<<<1, 1, 0, stream>>>(flag, stamps, n);
  return cudaGetLastError();
}

}  // namespace tpscope::bench
