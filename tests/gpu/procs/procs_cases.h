// SPDX-License-Identifier: Apache-2.0
// procs_cases.h - what the rank-per-process tests reduce, shared by the test (which computes the
// single-process results) and the worker processes (one per rank): the cases, their data, a hash of a
// result, and the double-precision check.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../dtype_values.h"
#include "tpscope/tpscope.h"

namespace tpscope::testing::procs {

struct Case {
  tpsDataType_t dtype;
  size_t count;
  size_t offset;  // elements from a 256-byte aligned allocation: 1 makes the buffer misaligned
  unsigned seed;
};

// The correctness matrix of allreduce_multigpu_test: every dtype; sizes for LL (whole 8-byte words),
// flag one-shot, two-shot (one and several 64 MiB pieces) and odd tails; misaligned buffers up to 1 Mi+1.
inline std::vector<Case> matrix() {
  std::vector<Case> cases;
  const size_t counts[] = {1, 7, 8, 4096, 4097, 1u << 16, 65536 + 3, (1u << 20) + 1, (20u << 20) + 5};
  unsigned seed = 1;
  for (tpsDataType_t t : {tpsFloat32, tpsFloat16, tpsBfloat16})
    for (size_t count : counts)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        if (offset && count > (1u << 20) + 1) continue;
        cases.push_back({t, count, offset, seed++});
      }
  return cases;
}

// The graph cases: one per p2p algorithm (LL, one-shot, two-shot with a tail), replayed.
inline std::vector<Case> graphCases() {
  return {{tpsBfloat16, 4096, 0, 101}, {tpsFloat16, 65536 + 3, 0, 102}, {tpsFloat32, (1u << 20) + 1, 0, 103}};
}

// Rank `rank`'s input of a case: deterministic from (seed, rank, index).
inline std::vector<unsigned char> input(const Case& c, int rank) {
  std::vector<unsigned char> v(c.count * tpsDataTypeSize(c.dtype));
  std::mt19937 rng(c.seed * 131 + rank);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (size_t i = 0; i < c.count; ++i) fromFloat(c.dtype, v.data(), i, d(rng));
  return v;
}

// FNV-1a over the result's bytes: equal hashes stand for bit-identical results.
inline uint64_t hashBytes(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Elements of `out` farther from the double-precision sum of every rank's input than the dtype allows.
inline size_t wrongElements(const Case& c, int nranks, const void* out) {
  std::vector<std::vector<unsigned char>> in;
  for (int r = 0; r < nranks; ++r) in.push_back(input(c, r));
  const double tol = c.dtype == tpsFloat32 ? 1e-6 : c.dtype == tpsFloat16 ? 1.0 / 1024 : 1.0 / 128;
  size_t wrong = 0;
  for (size_t i = 0; i < c.count; ++i) {
    double ref = 0, mag = 0;
    for (int r = 0; r < nranks; ++r) {
      const double x = toFloat(c.dtype, in[r].data(), i);
      ref += x;
      mag += std::fabs(x);
    }
    if (!(std::fabs(toFloat(c.dtype, out, i) - ref) <= tol * mag + 1e-30)) ++wrong;
  }
  return wrong;
}

// The fused add + norm case: bf16 rows x width. The partial (what 0) differs per rank; the residual
// (1) and the weight (2) are the same on every rank, as in a tensor-parallel layer.
constexpr size_t kFusedRows = 8, kFusedWidth = 4096;
constexpr float kFusedEps = 1e-5f;
inline std::vector<unsigned char> fusedInput(unsigned what, int rank) {
  const size_t n = what == 2 ? kFusedWidth : kFusedRows * kFusedWidth;
  return input(Case{tpsBfloat16, n, 0, 1000 + what}, what == 0 ? rank : 0);
}

}  // namespace tpscope::testing::procs
