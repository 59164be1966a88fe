// SPDX-License-Identifier: Apache-2.0
// backend.h - the internal interface every AllReduce backend implements (one backend per file).
//
// The communicator validates arguments, picks the backend and records statistics; a backend only
// enqueues work. Backends own their resources (created eagerly in their factory, so failures happen
// at tpsCommCreate) and see the call through CallArgs.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "allreduce/push.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct CallArgs {
  void* const* bufs;  // [ndev] device buffers, in place
  size_t count;       // elements per buffer
  tpsDataType_t dtype;
  const cudaStream_t* streams;  // [ndev] caller streams, one per device
  size_t bytes() const { return count * tpsDataTypeSize(dtype); }
};

// The residual add and RMSNorm fused after a reduction (tpsAllReduceAddRmsNorm); bufs are the partials.
struct NormArgs {
  const void* const* residual_in;  // [ndev] rows x width
  void* const* residual_out;       // [ndev] rows x width: residual_in + the sum (may be the partials)
  const void* const* weight;       // [ndev] width elements, or null: the add alone
  void* const* normed;             // [ndev] rows x width, written when weight is given
  size_t rows = 0, width = 0;
  float eps = 0;
  bool pushed = false;  // the partials were sent by the caller's kernels (allReducePushedAddRmsNorm)
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

// Bytes one GPU moved for one call over the path's medium (see tpsStatsCell_t).
struct Traffic {
  size_t tx = 0;
  size_t rx = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual tpsBackend_t kind() const = 0;
  // The path a call takes (by its size, and for p2p the buffers' alignment), so that statistics can be
  // attributed before the call is enqueued.
  virtual tpsPath_t pathFor(const CallArgs& args) const = 0;
  // Per-GPU traffic of one call of `bytes` over `path`, identical for every GPU in these algorithms.
  virtual Traffic trafficFor(tpsPath_t path, size_t bytes) const = 0;
  // Enqueues the reduction. Arguments are already validated.
  virtual tpsResult_t allReduce(const CallArgs& args) = 0;
  // The reduction fused with NormArgs' residual add and RMSNorm, where this backend has such a kernel
  // for the call; tpsUnavailable (nothing enqueued) where it has not, and the caller runs them apart.
  virtual tpsResult_t allReduceAddRmsNorm(const CallArgs&, const NormArgs&) { return tpsUnavailable; }
  // The device-side address book for pushes from rank `rank` (commPushChannel, push.h), where this
  // backend takes pushed calls; tpsUnavailable where it does not.
  virtual tpsResult_t pushChannel(int /*rank*/, PushChannel*) const { return tpsUnavailable; }
  // tpsSuccess, or an error a kernel reported after its call returned (tpsTimeout).
  virtual tpsResult_t asyncError() const { return tpsSuccess; }
};

}  // namespace tpscope::detail
