// SPDX-License-Identifier: Apache-2.0
// push.h - pushed reductions, host side: the producing kernel sends, the reduction only waits and sums.
//
// At decode sizes a reduction's cost is its kernel boundary: the kernel that makes the partial ends,
// the reduction's kernel starts, sends, waits for the peers. A kernel of tpscope's own study layer that
// makes the partial (a projection) can instead send each finished 8-byte word of it to the peers as it
// is computed, through a push channel (pushWord, push.cuh); the reduction it then enqueues
// (allReducePushedAddRmsNorm) only polls for the peers' words in its own memory and sums. The lines and
// sequence numbers are those of the p2p backend's LL one-shot, so pushed and ordinary calls may
// alternate on one communicator.
//
// Internal, not part of the C API: the channel exposes the LL line layout (push.cuh), which is the p2p
// backend's to change. Callers are src/workload's decode projections and the tests.
#pragma once

#include <cstddef>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

// The device-side address book of one GPU's pushes, passed by value to the producing kernel.
struct PushChannel {
  void* lines[TPS_MAX_DEVICES] = {};             // each rank's receive lines (LLLine, device memory of that rank)
  const unsigned long long* counters = nullptr;  // this rank's sequence number per row (device memory)
  unsigned long long lines_per_sender = 0;       // lines per (slot, sender)
  int rank = 0;                                  // this GPU's position in the communicator
  int nranks = 0;
  int max_rows = 0;                  // rows per pushed call
  int max_width = 0;                 // elements per row (bf16), a multiple of 4
  unsigned long long max_words = 0;  // 8-byte words per pushed call: rows x width / 4 at most
};

// The push channel of the GPU at position `rank`: tpsUnavailable when the communicator has no p2p
// backend, tpsInvalidArgument for a NULL pointer or a rank outside 0..N-1.
tpsResult_t commPushChannel(tpsComm_t comm, int rank, PushChannel* channel);

// As tpsAllReduceAddRmsNorm on the p2p backend, for a call whose partials every GPU has already sent
// through its push channel, word w = row x width / 4 + i holding elements 4i..4i+3 of row `row`, each
// word of every row exactly once, from a kernel enqueued on streams[i] before this call with nothing of
// this communicator between them. partial[i] must hold the same values (the GPU's own part is read from
// it). bf16 only; rows <= max_rows, width a multiple of 4 <= max_width; residual_out may be residual_in
// (the residual updated in place) or partial. Arguments as tpsAllReduceAddRmsNorm; tpsUnavailable when
// the communicator has no p2p backend. A GPU whose peer never pushes reports tpsTimeout as any p2p call.
tpsResult_t allReducePushedAddRmsNorm(tpsComm_t comm, void* const* partial, const void* const* residual_in,
                                      void* const* residual_out, const void* const* weight, void* const* normed,
                                      size_t rows, size_t width, float eps, tpsDataType_t dtype,
                                      const tpsStream_t* streams);

}  // namespace tpscope::detail
