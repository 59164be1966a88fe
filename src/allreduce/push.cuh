// SPDX-License-Identifier: Apache-2.0
// push.cuh - the device side of a pushed reduction (tpsCommGetPushChannel, tpsAllReducePushedAddRmsNorm
// in tpscope.h, which also spells out the line format for callers outside tpscope): a producing kernel
// sends each finished 8-byte word of its partial straight into the peers' receive lines, so the
// reduction after it only waits for them and sums. Used by the p2p backend's LL kernels (the same
// line store) and by the workload's decode projections.
//
// Contract, per call: every word of every row is pushed exactly once by every GPU, after the kernel
// has waited for the work before it on its stream (a programmatic dependent: after griddepcontrol.wait,
// since the sequence numbers are the previous reduction's writes); then the caller enqueues
// tpsAllReducePushedAddRmsNorm on the same stream. The wire format is the p2p backend's LL line
// {d0, s, d1, s}: one 16-byte store carries the data and the call's sequence number s together, so
// the receiver knows the line is whole and from this call when both flags read s.
#pragma once

#include <cuda_runtime.h>

#include "tpscope/tpscope.h"

namespace tpscope {

// Stores the line {v.x, s, v.y, s} with one 16-byte volatile store (it reaches the peer whole).
__device__ __forceinline__ void storeLLLine(void* line, uint2 v, unsigned s) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(line), "r"(v.x), "r"(s), "r"(v.y), "r"(s)
               : "memory");
}

// Sends word `word` of the call (row x width / 4 + i for elements 4i..4i+3 of row `row`) to every peer.
__device__ __forceinline__ void pushWord(const tpsPushChannel_t& ch, int row, size_t word, uint2 v) {
  const unsigned long long seq = __ldcg(ch.counters + row) + 1;  // the previous call's counter + 1
  const size_t at = ((seq & 1) * ch.nranks + ch.rank) * ch.lines_per_sender + word;
#pragma unroll
  for (int q = 0; q < TPS_MAX_DEVICES; ++q)
    if (q < ch.nranks && q != ch.rank) storeLLLine(static_cast<uint4*>(ch.lines[q]) + at, v, static_cast<unsigned>(seq));
}

}  // namespace tpscope
