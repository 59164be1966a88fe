// SPDX-License-Identifier: Apache-2.0
// p2p_algo.h - which algorithm the p2p backend runs for a call, by size and alignment.
//
// Host-only, so the rule has one home: p2p.cu launches by it, and `tpscope topo` shows it per size
// class without a GPU. The sizes are bytes per GPU:
//   LL one-shot  up to kP2pLLMax, when the message is whole 8-byte words and every buffer is 8-byte
//                aligned: data and sequence number travel in one 16-byte store, so there is no flag
//                round trip at all (decode sizes);
//   one-shot     up to kP2pOneShotMax (the receive slot per peer), and at any size when a buffer is
//                not 16-byte aligned: each GPU reads every peer's message after one flag exchange;
//   two-shot     above: reduce-scatter then all-gather, each GPU moving 2(N-1)/N of the message.
#pragma once

#include <cstddef>

namespace tpscope::detail {

constexpr size_t kP2pLLMax = 256u << 10;     // LL receive lines per (slot, sender) are sized for this
constexpr size_t kP2pOneShotMax = 1u << 20;  // one-shot receive slot per (slot, peer)

enum class P2pAlgo { kLL, kOneShot, kTwoShot };

// `aligned8` / `aligned16`: every GPU's buffer is 8- / 16-byte aligned (cudaMalloc'd buffers are both).
constexpr P2pAlgo p2pAlgoFor(size_t bytes, bool aligned8 = true, bool aligned16 = true) {
  if (bytes <= kP2pLLMax && bytes % 8 == 0 && aligned8) return P2pAlgo::kLL;
  if (bytes <= kP2pOneShotMax || !aligned16) return P2pAlgo::kOneShot;
  return P2pAlgo::kTwoShot;
}

// "LL one-shot", "one-shot", "two-shot".
constexpr const char* p2pAlgoName(P2pAlgo a) {
  return a == P2pAlgo::kLL ? "LL one-shot" : a == P2pAlgo::kOneShot ? "one-shot" : "two-shot";
}

}  // namespace tpscope::detail
