// SPDX-License-Identifier: Apache-2.0
// backend.h - the internal interface every AllReduce backend implements (one backend per file).
//
// The communicator validates arguments, picks the backend and records statistics; a backend only
// enqueues work. Backends own their resources (created eagerly in their factory, so failures happen
// at tpsCommCreate) and see the call through CallArgs.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

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
  bool pushed = false;  // the partials were sent by the caller's kernels (tpsAllReducePushedAddRmsNorm)
};

// Bytes one GPU moved for one call over the path's medium (see tpsStatsCell_t).
struct Traffic {
  size_t tx = 0;
  size_t rx = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual tpsBackend_t kind() const = 0;
  // The path a call of `bytes` per GPU takes; fixed per size so statistics can be attributed before
  // the call is enqueued.
  virtual tpsPath_t pathFor(size_t bytes) const = 0;
  // Per-GPU traffic of one call of `bytes` over `path`, identical for every GPU in these algorithms.
  virtual Traffic trafficFor(tpsPath_t path, size_t bytes) const = 0;
  // Enqueues the reduction. Arguments are already validated.
  virtual tpsResult_t allReduce(const CallArgs& args) = 0;
  // The reduction fused with NormArgs' residual add and RMSNorm, where this backend has such a kernel
  // for the call; tpsUnavailable (nothing enqueued) where it has not, and the caller runs them apart.
  virtual tpsResult_t allReduceAddRmsNorm(const CallArgs&, const NormArgs&) { return tpsUnavailable; }
  // The device-side address book for pushes from rank `rank` (tpsCommGetPushChannel), where this
  // backend takes pushed calls; tpsUnavailable where it does not.
  virtual tpsResult_t pushChannel(int /*rank*/, tpsPushChannel_t*) const { return tpsUnavailable; }
  // tpsSuccess, or an error a kernel reported after its call returned (tpsTimeout).
  virtual tpsResult_t asyncError() const { return tpsSuccess; }
};

}  // namespace tpscope::detail
