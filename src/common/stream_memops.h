// SPDX-License-Identifier: Apache-2.0
// stream_memops.h - the driver's stream memory write (cuStreamWriteValue32), reached through the runtime's
// driver entry points, so nothing links libcuda.
//
// The write is done by the GPU's front end when the stream's earlier work is done: no kernel, no launch.
// The host backend's copy-engine path opens its gate with it (allreduce/algorithms/host_copy.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tpscope/tpscope.h"

namespace tpscope {

// Whether the driver offers the operation (its entry point was found; drivers of CUDA 12 and later support
// the 32-bit operations on every device). Looked up once; any thread.
bool streamMemOpsAvailable();

// Enqueues on `stream`: store `value` into the 32-bit word at `device_address` (device memory, or mapped
// host memory through its device pointer) once the stream's earlier work is done, after a fence that makes
// that work's memory writes visible first. tpsUnavailable where streamMemOpsAvailable is false, else
// tpsCudaError on failure.
tpsResult_t streamWrite(cudaStream_t stream, void* device_address, uint32_t value);

}  // namespace tpscope
