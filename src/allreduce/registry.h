// SPDX-License-Identifier: Apache-2.0
// registry.h - every AllReduce algorithm of this library, in path order, and the rule that picks one.
//
// An algorithm's place in the registry is its path number: the first tpsNumPaths are tpsPath_t's values
// (host-kernel, host-copy, p2p-oneshot, p2p-twoshot, nccl, p2p-ll), later ones follow in the order
// registry.cc lists them. Statistics are kept per path, so a new algorithm is a new row, not a new ABI.
#pragma once

#include <string_view>
#include <vector>

#include "allreduce/algorithm.h"

namespace tpscope::detail {

// Every registered algorithm, in path order.
const std::vector<const AlgorithmInfo*>& algorithms();
// The path of the algorithm named `name`, or -1.
int pathByName(std::string_view name);
// The algorithm of `path`, or null outside the registry.
const AlgorithmInfo* algorithmOf(int path);

// The algorithm among `paths` (the ones a backend created) that carries a call of `bytes` per GPU of
// `dtype` on `nranks` ranks in `shape` under `tuning`, on `wire`: of those of that wire that take it
// (algorithmTakes), the one with the largest smallest call (a copy-engine path above its threshold), then
// the smallest largest call (the most specialised: LL before one-shot before two-shot), then the first
// registered. Where no algorithm of a compressed wire takes the call (a size or dtype it does not serve)
// the exact wire's choice carries it, and its path says so: a call is never made lossier than asked.
// -1 when none takes it: the caller says so, never falls back silently.
int chooseAlgorithm(const std::vector<int>& paths, size_t bytes, tpsDataType_t dtype, int nranks, Shape shape,
                    const HostTuning& tuning, WireCode wire = WireCode::kExact);

// The paths of `backend`'s registered algorithms that can run with `nranks` ranks in `shape`: what its
// backend creates, and what `tpscope topo` assumes without a communicator.
std::vector<int> pathsOf(tpsBackend_t backend, int nranks, Shape shape);

}  // namespace tpscope::detail
