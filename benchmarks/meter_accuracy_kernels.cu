// SPDX-License-Identifier: Apache-2.0
// meter_accuracy_kernels.cu - the launch-bound workload for the meter's overhead measurement: empty
// kernels, one block of one thread, back to back on one stream. Their rate is set by the host's
// launch path, which is what an NVML polling thread could slow down (driver locks, CPU time).
#include <cuda_runtime_api.h>

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

}  // namespace tpscope::bench
