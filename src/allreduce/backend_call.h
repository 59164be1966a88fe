// SPDX-License-Identifier: Apache-2.0
// backend_call.h - one AllReduce call as the backends and algorithms see it, and the grid rule for ranks
// that share a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "allreduce/push.h"
#include "allreduce/wire_codec.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct CallArgs {
  void* const* bufs;  // [local ranks] device buffers, in place
  size_t count;       // elements per buffer
  tpsDataType_t dtype;
  const cudaStream_t* streams;       // [local ranks] caller streams, one per rank, on its GPU
  WireCode wire = WireCode::kExact;  // the wire the call asks for: its own (tpsAllReduceWire), else the communicator's
  size_t bytes() const { return count * tpsDataTypeSize(dtype); }
};

// The residual add and RMSNorm fused after a reduction (tpsAllReduceAddRmsNorm); bufs are the partials.
struct NormArgs {
  const void* const* residual_in;  // [local ranks] rows x width
  void* const* residual_out;       // [local ranks] rows x width: residual_in + the sum (may be the partials)
  const void* const* weight;       // [local ranks] width elements, or null: the add alone
  void* const* normed;             // [local ranks] rows x width, written when weight is given
  size_t rows = 0, width = 0;
  float eps = 0;
  bool pushed = false;  // the partials were sent by the caller's kernels (allReducePushedAddRmsNorm)
};

// Bytes one GPU moved for one call over the path's medium (see tpsStatsCell_t).
struct Traffic {
  size_t tx = 0;
  size_t rx = 0;
};

// The most ranks any one GPU carries: 1 unless the communicator lets ranks share a GPU
// (tpsConfig_t.shared_devices).
inline int ranksPerGpu(const std::vector<int>& devices) {
  int most = 1;
  for (int d : devices) most = std::max(most, static_cast<int>(std::count(devices.begin(), devices.end(), d)));
  return most;
}

// Ranks that share a GPU spin on each other inside their kernels, so the grids of all of them must be
// resident on it at once. A kernel of 512-thread blocks may hold a whole SM each (the two-shot kernel's
// 82 registers x 512 threads do), so the ranks on one GPU together launch at most this many such
// blocks: fewer than an H100's or H200's 132 SMs.
constexpr int kSharedGpuBlocks = 64;

// `blocks` cut to the shared budget where `ranks_per_gpu` ranks share each GPU.
inline int sharedGpuGrid(int blocks, int ranks_per_gpu) {
  return ranks_per_gpu <= 1 ? blocks : std::min(blocks, std::max(1, kSharedGpuBlocks / ranks_per_gpu));
}

// Whether every local rank's buffer of the call is `align`-byte aligned.
inline bool buffersAligned(const CallArgs& a, int local_ranks, size_t align) {
  for (int r = 0; r < local_ranks; ++r)
    if (reinterpret_cast<uintptr_t>(a.bufs[r]) % align != 0) return false;
  return true;
}

}  // namespace tpscope::detail
