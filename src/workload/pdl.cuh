// SPDX-License-Identifier: Apache-2.0
// pdl.cuh - programmatic dependent launch (Hopper and later) for the decode kernels.
//
// A kernel launched with launchPdl may start while the kernel before it on the stream is finishing:
// the decode GEMVs use that to start streaming their weights (which no earlier kernel writes) and
// call pdlWait() before they read the activations (common/pdl.cuh has the semantics). Kernels that
// precede a GEMV call pdlTrigger() early so that the GEMV's blocks may be scheduled beside their
// last wave. Before sm_90 launches are plain.
#pragma once

#include <cuda_runtime.h>

#include "common/pdl.cuh"

namespace tpscope::workload {

using tpscope::pdlTrigger;
using tpscope::pdlWait;

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

}  // namespace tpscope::workload
