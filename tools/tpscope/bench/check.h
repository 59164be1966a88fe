// SPDX-License-Identifier: Apache-2.0
// bench/check.h - deterministic inputs and the double-precision host check behind `-c 1`.
//
// Input element i of rank r is +-k/64 with k in [64, 255] drawn from a hash of (seed, r, i): exact in
// every dtype (8 significant bits fit bfloat16), and any sum of <= 8 of them is exact in float, so the
// reference (the sum in double) is the true sum. An element passes when
//     |result - reference| <= gamma(n - 1) * sum_i |x_i|,   gamma(k) = k*u / (1 - k*u)
// (u: 2^-8 bf16, 2^-11 half, 2^-24 float), the bound for n - 1 additions each rounded to the dtype, in
// any order (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 4.2): it admits a ring
// that rounds every hop (NCCL) as well as float accumulation rounded once (tpscope's backends). It is
// also tight enough to catch a missing, repeated or sign-flipped contribution: each moves the sum by
// |x| >= 1, and the bound is at most gamma(7) * 8 * 255/64 = 0.90 for 8 GPUs in bfloat16.
// Separately, every rank's result must be bit-identical to rank 0's (the API promises it).
//
// On a compressed wire the reference is what the wire promises instead: the sum of every rank's message
// as the wire carries it (each rank's values encoded and decoded in blocks of 64 from element 0 by the
// codec's CPU reference, allreduce/wire.h), with the same tolerance on those decoded values; a missing or
// doubled contribution still moves the sum by about |x| >= 1 (a decoded value keeps its sign and most of
// its size). The error columns compare rank 0's result with the exact sum of the inputs either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allreduce/wire_codec.h"
#include "bench/table.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

constexpr uint64_t kBenchSeed = 0x7470'7363'6f70'6521ull;  // "tpscope!"

// The value of input element `index` on rank `rank` (exact in every dtype).
double benchInputValue(uint64_t seed, int rank, size_t index);

// Writes `count` elements of `dtype` for `rank` into host memory at `dst`.
void fillBenchInput(uint64_t seed, int rank, tpsDataType_t dtype, size_t count, void* dst);

// Element `index` of a host array of `dtype`, as a double.
double decodeElement(tpsDataType_t dtype, const void* data, size_t index);

// The tolerance above for one element whose inputs' absolute values sum to `sum_abs`.
double benchTolerance(tpsDataType_t dtype, int nranks, double sum_abs);

// Elements of one rank's result (`count` elements of a call among `nranks` ranks) outside the tolerance:
// the check of a rank that is a process of its own (--procs), which cannot see the others' results.
uint64_t countOutOfTolerance(uint64_t seed, tpsDataType_t dtype, size_t count, int nranks, const void* result);

// Checks every rank's result (host copies, results[r] holds `count` elements) of a call on `wire` against
// the reference, and measures its error against the exact sum (rel_rms, rel_max). The reference of a lossy
// wire is the sum of each rank's message as the wire carries it; with `sum_on_wire` (a two-shot's wire:
// AlgorithmInfo::sum_on_wire), that sum taken in float in rank order, as the GPU does, and carried by the
// wire once more.
CheckCounts checkResults(uint64_t seed, tpsDataType_t dtype, size_t count, const std::vector<const void*>& results,
                         detail::WireCode wire = detail::WireCode::kExact, bool sum_on_wire = false);

}  // namespace tpscope::cli
