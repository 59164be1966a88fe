// SPDX-License-Identifier: Apache-2.0
// p2p_wire_kernels.cuh - the p2p two-shot on a compressed wire: p2p_kernels.cuh's two phases and flags,
// with wire_kernels.cuh's codec on both of them.
//
// A call of `count` values is cut into N slices of the same whole number of wire blocks (the last slices
// may be shorter or empty), slice q owned by rank q; each slice's wire blocks are cut among the kernel's
// blocks the same way on every rank, so block b of every rank handles the same values.
//   Phase 1 (reduce-scatter): block b encodes its part of every peer's slice and stores the codes into that
//   peer's receive buffer (the slice's payload, laid out as wire_codec.h says, from this rank), and flags.
//   Once every peer has flagged, it sums its part of its own slice in rank order over every rank's decoded
//   payload, its own re-encoded from its buffer (the codes its peers would have sent).
//   Phase 2 (all-gather): it encodes the sum (in float, before any rounding to T), stores the codes into
//   every peer's gather buffer and the decoded sum into its own buffer, and flags. Once every peer has
//   flagged, it decodes every peer's slice from its gather buffer into its own buffer.
// So every rank's result is the same function of the same codes: rank-identical by construction, with two
// roundings by the wire (each rank's slice, and the sum) where the host paths have one.
//
// A rank's user buffer is read and written by that rank only (any alignment of T; the payloads are the
// only bytes that cross), so the kernel runs in both process shapes without staging. A peer stores into
// this rank's receive buffer for call s after this rank's phase-1 flags of s-1, which follow its reads of
// s-1's payloads; slots alternate as in p2pTwoShot. It stores into the gather buffer only after this
// rank's phase-1 flag of the same call, which follows (the previous kernel on the stream having ended)
// every read of the gather buffer by the previous call; so one gather buffer suffices.
#pragma once

#include "allreduce/p2p_kernels.cuh"
#include "allreduce/wire_kernels.cuh"

namespace tpscope::detail {

// h.bufs[q] is rank q's gather buffer: N payloads of `gather_stride` bytes, the one from owner o at o.
template <typename T, WireCode W>
__global__ void __launch_bounds__(kP2pThreads) p2pTwoShotWire(P2pHandle h, T* buf, size_t count, size_t gather_stride) {
  __shared__ unsigned long long seq;
  __shared__ int aborted;
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  if (tid == 0) seq = h.counters[b] + 1, aborted = 0;
  __syncthreads();
  const unsigned long long s = seq;
  const int slot = static_cast<int>(s & 1);
  const int n = h.nranks, me = h.rank;
  const size_t kb = (wireBlocks(count) + n - 1) / n;  // wire blocks per slice
  const size_t sv = kb * kWireBlock;                  // values per slice
  const size_t per = (kb + nb - 1) / nb;
  const size_t k0 = min(kb, per * b), k1 = min(kb, k0 + per);
  const int lane = tid & 31, warp = tid / 32, warps = blockDim.x / 32;
  constexpr size_t kPerWarp = 32 / kWireLanes;  // wire blocks a warp takes per step
  const bool first = lane % kWireLanes == 0;
  // Slice q: its values in buf and their number (slice starts are whole wire blocks, so a 16-byte
  // aligned buf keeps every slice aligned), and where this block's values of it end: a warp's last step
  // may hold wire blocks past k1, another block's, whose lanes take part in their group's maximum with
  // none and load, store and decode nothing (as hostKernelWire's).
  auto sliceStart = [&](int q) { return min(count, static_cast<size_t>(q) * sv); };
  auto sliceLen = [&](int q) { return min(count, sliceStart(q) + sv) - sliceStart(q); };
  auto blockEnd = [&](int q) { return min(sliceLen(q), k1 * kWireBlock); };
  auto received = [&](int owner, int from) {
    return WirePayload::at(h.recv[owner] + (static_cast<size_t>(slot) * n + from) * h.recv_stride, W, sliceLen(owner));
  };
  auto gathered = [&](int to, int owner) {
    return WirePayload::at(static_cast<char*>(h.bufs[to]) + owner * gather_stride, W, sliceLen(owner));
  };
  const bool wide = (reinterpret_cast<uintptr_t>(buf) & 15) == 0;

  // Phase 1: my part of every peer's slice, encoded into that peer's receive buffer.
  for (size_t kw = k0 + warp * kPerWarp; kw < k1; kw += warps * kPerWarp) {
    const size_t k = kw + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
#pragma unroll
    for (int d = 1; d < TPS_MAX_DEVICES; ++d) {  // peers from the next rank on, so the senders spread out
      if (d >= n) break;
      const int q = (me + d) % n;
      const size_t len = blockEnd(q);
      float v[8];
      load8<T>(buf + sliceStart(q), len, i, wide, v);
      storeCodes8<W>(encodeLane<W>(v, len, i), received(q, me), len, i, k, first);
    }
  }
  p2pSignal(h, 0, slot, s);
  if (!p2pWait(h, 0, slot, s, &aborted)) return;

  // My slice: the rank-order sum of every rank's decoded part, encoded once more for every peer.
  {
    const size_t len = blockEnd(me);
    T* mine = buf + sliceStart(me);
    for (size_t kw = k0 + warp * kPerWarp; kw < k1; kw += warps * kPerWarp) {
      const size_t k = kw + lane / kWireLanes;
      const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
      Codes8 in[TPS_MAX_DEVICES];
#pragma unroll
      for (int q = 0; q < TPS_MAX_DEVICES; ++q)
        if (q < n && q != me) in[q] = loadCodes8<W, true>(received(me, q), len, i, k);
      float sum[8];
      rankOrderSum<T, W>(mine, len, i, wide, in, me, n, sum);
      const Codes8 out = encodeLane<W>(sum, len, i);  // sum becomes what every rank decodes
#pragma unroll
      for (int d = 1; d < TPS_MAX_DEVICES; ++d) {
        if (d >= n) break;
        storeCodes8<W>(out, gathered((me + d) % n, me), len, i, k, first);
      }
      store8<T>(mine, len, i, wide, sum);
    }
  }
  p2pSignal(h, 1, slot, s);
  if (!p2pWait(h, 1, slot, s, &aborted)) return;

  // Every peer's slice, decoded from my gather buffer.
  for (size_t kw = k0 + warp * kPerWarp; kw < k1; kw += warps * kPerWarp) {
    const size_t k = kw + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
    Codes8 in[TPS_MAX_DEVICES];
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < n && q != me) in[q] = loadCodes8<W, true>(gathered(me, q), blockEnd(q), i, k);
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
      if (q >= n || q == me) continue;
      const size_t len = blockEnd(q);
      float v[8];
      decodeCodes8<W>(in[q], len, i, v);
      store8<T>(buf + sliceStart(q), len, i, wide, v);
    }
  }
  if (tid == 0) h.counters[b] = s;
}

}  // namespace tpscope::detail
