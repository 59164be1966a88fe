// SPDX-License-Identifier: Apache-2.0
// p2p_algo.h - the p2p algorithms' sizes and launch geometry (algorithms/p2p_*.cu), host-only so that
// their AlgorithmInfo and the unit tests read the same numbers. The sizes are bytes per GPU:
//   LL one-shot  up to kP2pLLMax, whole 8-byte words: data and sequence number travel in one 16-byte
//                store, so there is no flag round trip at all (decode sizes);
//   one-shot     up to kP2pOneShotMax (the receive slot per peer): each GPU reads every peer's message
//                after one flag exchange;
//   two-shot     above, in pieces of kP2pTwoShotPiece: reduce-scatter then all-gather, each GPU moving
//                2(N-1)/N of the message.
#pragma once

#include <algorithm>
#include <cstddef>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

constexpr size_t kP2pLLMax = 256u << 10;        // LL receive lines per (slot, sender) are sized for this
constexpr size_t kP2pOneShotMax = 1u << 20;     // one-shot receive slot per (slot, peer)
constexpr size_t kP2pTwoShotPiece = 64u << 20;  // bytes per GPU per two-shot launch

// The launch geometry of the p2p algorithms, in both process shapes, each grid the best of a sweep of grid sizes under
// CUDA graphs (`tpscope bench allreduce`; docs/PERFORMANCE.md, "AllReduce"):
// - flag one-shot: 64 blocks (of 16 to 128, the best or as good as it from 256 KiB to 1 MiB);
constexpr int kP2pOneShotBlocks = 64;
// - LL one-shot: 64 blocks, fixed per communicator (each block keeps its own sequence number); many
//   small blocks spread the stores and polls over 64 SMs. Threads per block grow with the message, one
//   per 8-byte word of the block's share, from kP2pLLThreads to kP2pLLThreadsMax: only the loops'
//   stride changes, never the block count;
constexpr int kP2pLLBlocks = 64, kP2pLLThreads = 128, kP2pLLThreadsMax = 512;
// - two-shot: 128 blocks, enough to keep NVLink busy while some blocks wait on flags (busbw from 64 MiB
//   to 1 GiB grows with the blocks up to 128).
constexpr int kP2pTwoShotBlocks = 128;
static_assert(kP2pLLThreads % 32 == 0 && kP2pLLThreadsMax % 32 == 0 && kP2pLLThreads <= kP2pLLThreadsMax);
// The limits tpscope.h publishes: a fused call's rows are the LL grid's blocks, its bytes an LL call's.
static_assert(TPS_FUSED_MAX_ROWS == kP2pLLBlocks && TPS_P2P_LL_MAX_BYTES == kP2pLLMax);

// Threads per block of an LL call of `bytes`: one per 8-byte word of a block's share, rounded up to a
// warp, within [kP2pLLThreads, kP2pLLThreadsMax].
constexpr int p2pLLThreads(size_t bytes) {
  const size_t per_block = (bytes / 8 + kP2pLLBlocks - 1) / kP2pLLBlocks;
  const size_t warps = (per_block + 31) / 32 * 32;
  return static_cast<int>(std::clamp<size_t>(warps, kP2pLLThreads, kP2pLLThreadsMax));
}

// Whether a fused add + norm call fits the LL kernels: bf16, an LL-sized message, width a multiple of 4,
// rows <= LL blocks (each row needs a block), every buffer 8-byte aligned, and, with a norm
// (`has_weight`), residual_out apart from residual_in (the row's last block reads the whole new
// residual row; the add alone may update the residual in place).
constexpr bool p2pFusedFits(tpsDataType_t dtype, size_t bytes, size_t rows, size_t width, bool aligned8,
                            bool has_weight, bool residual_apart) {
  return dtype == tpsBfloat16 && bytes <= kP2pLLMax && bytes % 8 == 0 && width % 4 == 0 &&
         rows <= static_cast<size_t>(kP2pLLBlocks) && aligned8 && (!has_weight || residual_apart);
}

}  // namespace tpscope::detail
