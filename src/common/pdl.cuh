// SPDX-License-Identifier: Apache-2.0
// pdl.cuh - programmatic dependent launch (sm_90+), shared by the AllReduce kernels and the workload.
//
// A kernel launched with programmatic = true may be scheduled while the kernel before it on the
// stream is still running, once that kernel's blocks have all called pdlTrigger() (or ended). Such a
// kernel calls pdlWait() before it reads anything the earlier kernels wrote: pdlWait returns once the
// previous grid has completed and its memory is visible, so results are those of plain stream order.
// Before sm_90 both device calls are no-ops; for an ordinary launch pdlWait returns at once.
//
// The decode kernels of the workload use it so: a GEMV launched with launchPdl requests its first weights
// (which no earlier kernel writes) before pdlWait, and the kernels before a GEMV call pdlTrigger early so
// that its blocks may be scheduled beside their last wave.
#pragma once

#include <cuda_runtime.h>

namespace tpscope {

__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` on `stream`, as a programmatic dependent of the stream's previous kernel when
// `programmatic` (the caller decides whether the device takes it: compute capability 9.0 or later).
template <typename... Params, typename... Args>
cudaError_t launchKernel(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                         Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid, config.blockDim = block, config.stream = stream;
  config.attrs = attr, config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// Whether the current device takes programmatic launches (compute capability 9.0 or later).
bool pdlEnabled();

// A programmatic launch where `want` and pdlEnabled(), else an ordinary one.
template <typename... Params, typename... Args>
cudaError_t launchPdlIf(bool want, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                        Args... args) {
  return launchKernel(want && pdlEnabled(), kernel, grid, block, stream, args...);
}

template <typename... Params, typename... Args>
cudaError_t launchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  return launchPdlIf(true, kernel, grid, block, stream, args...);
}

}  // namespace tpscope
