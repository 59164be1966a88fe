// SPDX-License-Identifier: Apache-2.0
// meter_accuracy_kernels.cu - the launch-bound workload for the meter's overhead measurement: empty
// kernels, one block of one thread, back to back on one stream. Their rate is set by the host's
// launch path, which is what an NVML polling thread could slow down (driver locks, CPU time).
// Also the SM side of peer traffic: a copy kernel whose source or destination is a peer's memory,
// 16-byte loads and stores as the p2p AllReduce kernels issue them.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpscope::bench {

__global__ void emptyKernel() {}

cudaError_t launchEmptyKernels(cudaStream_t stream, int count) {
  for (int i = 0; i < count; ++i) {
    emptyKernel<<<1, 1, 0, stream>>>();
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return cudaStreamSynchronize(stream);
}

__global__ void copy16Kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// dst <- src, `bytes` a multiple of 16, by the SMs of the current device (either side may be a peer's).
cudaError_t launchCopy16(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  copy16Kernel<<<132 * 8, 256, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return cudaStreamSynchronize(stream);
}

}  // namespace tpscope::bench
