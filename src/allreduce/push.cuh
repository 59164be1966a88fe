// SPDX-License-Identifier: Apache-2.0
// push.cuh - the LL line and the device side of a pushed reduction (push.h): a producing kernel sends
// each finished 8-byte word of its partial straight into the peers' receive lines, so the reduction
// after it only waits for them and sums. Used by the p2p backend's LL kernels (the same line store)
// and by the workload's decode projections.
//
// Contract, per call: every word of every row is pushed exactly once by every GPU, after the kernel
// has waited for the work before it on its stream (a programmatic dependent: after griddepcontrol.wait,
// since the sequence numbers are the previous reduction's writes); then the caller enqueues
// allReducePushedAddRmsNorm on the same stream.
#pragma once

#include <cuda_runtime.h>

#include "allreduce/push.h"

namespace tpscope::detail {

// One LL line (as NCCL's LL FIFO line): 8 bytes of payload and the call's sequence number twice,
// {data0, flag0, data1, flag1}. The one assumption the protocol rests on: a line written with one
// 16-byte store arrives at the peer in 8-byte halves that are each whole (data0 with flag0, data1 with
// flag1), never torn within a half. So a receiver that reads both flags equal to the call's sequence
// number has read this call's 8 bytes, with no fence and no separate flag store. Lines of calls s and
// s - 2 share a slot; the flags tell them apart (counters start at 0, as do the lines).
struct alignas(16) LLLine {
  unsigned data0, flag0, data1, flag1;

  __device__ __forceinline__ bool of(unsigned seq) const { return flag0 == seq && flag1 == seq; }
  __device__ __forceinline__ uint2 data() const { return make_uint2(data0, data1); }
};
static_assert(sizeof(LLLine) == 16, "an LL line is one 16-byte store");

// Stores the line {v.x, s, v.y, s} with one 16-byte volatile store (it reaches the peer whole).
__device__ __forceinline__ void storeLLLine(LLLine* line, uint2 v, unsigned s) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(line), "r"(v.x), "r"(s), "r"(v.y), "r"(s)
               : "memory");
}

// Reads a line with one 16-byte volatile load (past L1: a peer writes it).
__device__ __forceinline__ LLLine loadLLLine(const LLLine* p) {
  LLLine v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.data0), "=r"(v.flag0), "=r"(v.data1), "=r"(v.flag1)
               : "l"(p)
               : "memory");
  return v;
}

// Sends word `word` of the call (row x width / 4 + i for elements 4i..4i+3 of row `row`) to every peer.
__device__ __forceinline__ void pushWord(const PushChannel& ch, int row, size_t word, uint2 v) {
  const unsigned long long seq = __ldcg(ch.counters + row) + 1;  // the previous call's counter + 1
  const size_t at = ((seq & 1) * ch.nranks + ch.rank) * ch.lines_per_sender + word;
#pragma unroll
  for (int q = 0; q < TPS_MAX_DEVICES; ++q)
    if (q < ch.nranks && q != ch.rank)
      storeLLLine(static_cast<LLLine*>(ch.lines[q]) + at, v, static_cast<unsigned>(seq));
}

}  // namespace tpscope::detail
