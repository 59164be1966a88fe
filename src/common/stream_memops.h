// SPDX-License-Identifier: Apache-2.0
// stream_memops.h - the driver's stream memory operations (cuStreamWaitValue32, cuStreamWriteValue32),
// reached through the runtime's driver entry points, so nothing links libcuda.
//
// A wait is done by the GPU's front end, not by a kernel: it takes no SM and adds no launch to the
// stream. The host backend's copy-engine path orders its copies across GPUs with them
// (allreduce/algorithms/host_copy.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tpscope/tpscope.h"

namespace tpscope {

// Whether the driver offers both operations (its entry points were found; drivers of CUDA 12 and later
// support the 32-bit operations on every device). Looked up once; any thread.
bool streamMemOpsAvailable();

// Enqueues on `stream`: wait until the 32-bit word at `device_address` (device memory, or mapped host
// memory through its device pointer) is `value` or later: (int32_t)(word - value) >= 0, a cyclic
// comparison, so a counter may wrap as long as its waiters stay within 2^31 of it. Ordering through it is
// invisible to CUDA: the word must be written by work enqueued before this wait, in host order, or by a
// kernel that is already running. tpsUnavailable where streamMemOpsAvailable is false, else tpsCudaError
// on failure.
tpsResult_t streamWaitAtLeast(cudaStream_t stream, void* device_address, uint32_t value);
// Enqueues on `stream`: store `value` into the word at `device_address` once the stream's earlier work
// is done, after a fence that makes that work's memory writes visible first.
tpsResult_t streamWrite(cudaStream_t stream, void* device_address, uint32_t value);

}  // namespace tpscope
