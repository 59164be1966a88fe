// SPDX-License-Identifier: Apache-2.0
// pdl.cuh - programmatic dependent launch (Hopper and later) for the decode kernels.
//
// A kernel launched with launchPdl may start while the kernel before it on the stream is finishing:
// the decode GEMVs use that to start streaming their weights (which no earlier kernel writes) and
// call pdlWait() before they read the activations. pdlWait returns once the previous grid has
// completed and its memory is visible, so results are those of plain stream order. Kernels that
// precede a GEMV call pdlTrigger() early so that the GEMV's blocks may be scheduled beside their
// last wave. Before sm_90, or with TPSCOPE_TP_PDL=0, both are no-ops and launches are plain.
#pragma once

#include <cuda_runtime.h>

namespace tpscope::workload {

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

// Whether the current device takes programmatic launches (compute capability 9.0 or later) and
// TPSCOPE_TP_PDL is not 0.
bool pdlEnabled();

// A programmatic launch where `want` and pdlEnabled(), else an ordinary one.
template <typename... Params, typename... Args>
cudaError_t launchPdlIf(bool want, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                        Args... args) {
  if (!want || !pdlEnabled()) {
    kernel<<<grid, block, 0, stream>>>(args...);
    return cudaGetLastError();
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid, config.blockDim = block, config.stream = stream;
  config.attrs = attr, config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename... Params, typename... Args>
cudaError_t launchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  return launchPdlIf(true, kernel, grid, block, stream, args...);
}

}  // namespace tpscope::workload
