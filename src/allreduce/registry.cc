// SPDX-License-Identifier: Apache-2.0
// registry.cc - the list of algorithms (one line each) and the choice among them.
#include "allreduce/registry.h"

#include <array>

namespace tpscope::detail {

// Every algorithm, one line each, in path order: the first six are tpsPath_t's values, so their order
// is fixed; a new algorithm is appended. Each name is a function of the algorithm's file that returns
// its AlgorithmInfo.
#define TPS_ALGORITHMS(X)    \
  X(hostKernelAlgorithm)     \
  X(hostCopyAlgorithm)       \
  X(p2pOneShotAlgorithm)     \
  X(p2pTwoShotAlgorithm)     \
  X(ncclAlgorithm)           \
  X(p2pLLAlgorithm)          \
  X(hostCopyBf16Algorithm)   \
  X(hostCopyInt8Algorithm)   \
  X(hostCopyFp8Algorithm)    \
  X(hostCopyInt4Algorithm)   \
  X(hostKernelBf16Algorithm) \
  X(hostKernelInt8Algorithm) \
  X(hostKernelFp8Algorithm)  \
  X(hostKernelInt4Algorithm) \
  X(p2pTwoShotBf16Algorithm) \
  X(p2pTwoShotInt8Algorithm) \
  X(p2pTwoShotFp8Algorithm)  \
  X(p2pTwoShotInt4Algorithm)

#define TPS_DECLARE_ALGORITHM(fn) const AlgorithmInfo& fn();
TPS_ALGORITHMS(TPS_DECLARE_ALGORITHM)
#undef TPS_DECLARE_ALGORITHM

const std::vector<const AlgorithmInfo*>& algorithms() {
#define TPS_LIST_ALGORITHM(fn) &fn(),
  static const std::vector<const AlgorithmInfo*> list = {TPS_ALGORITHMS(TPS_LIST_ALGORITHM)};
#undef TPS_LIST_ALGORITHM
  return list;
}

int pathByName(std::string_view name) {
  const auto& all = algorithms();
  for (size_t p = 0; p < all.size(); ++p)
    if (name == all[p]->name) return static_cast<int>(p);
  return -1;
}

const AlgorithmInfo* algorithmOf(int path) {
  const auto& all = algorithms();
  return path >= 0 && static_cast<size_t>(path) < all.size() ? all[path] : nullptr;
}

bool algorithmTakes(const AlgorithmInfo& a, size_t bytes, tpsDataType_t dtype, int nranks, Shape shape,
                    const HostTuning& tuning) {
  if ((a.shapes & shape) == 0 || nranks < a.min_ranks || nranks > a.max_ranks) return false;
  if (dtype < tpsFloat32 || dtype >= tpsNumDataTypes || (a.dtypes & dtypeBit(dtype)) == 0) return false;
  if (bytes == 0 || bytes % a.granule != 0 || bytes > a.max_bytes) return false;
  return a.min_bytes == nullptr || bytes >= a.min_bytes(tuning);
}

int chooseAlgorithm(const std::vector<int>& paths, size_t bytes, tpsDataType_t dtype, int nranks, Shape shape,
                    const HostTuning& tuning, WireCode wire) {
  int best = -1;
  size_t best_min = 0, best_max = 0;
  for (int p : paths) {
    const AlgorithmInfo* a = algorithmOf(p);
    if (a == nullptr || a->wire != wire || !algorithmTakes(*a, bytes, dtype, nranks, shape, tuning)) continue;
    const size_t lo = a->min_bytes ? a->min_bytes(tuning) : 0;
    const bool better = best < 0 || lo > best_min || (lo == best_min && a->max_bytes < best_max) ||
                        (lo == best_min && a->max_bytes == best_max && p < best);
    if (better) best = p, best_min = lo, best_max = a->max_bytes;
  }
  if (best < 0 && wire != WireCode::kExact) return chooseAlgorithm(paths, bytes, dtype, nranks, shape, tuning);
  return best;
}

std::vector<int> pathsOf(tpsBackend_t backend, int nranks, Shape shape) {
  std::vector<int> out;
  const auto& all = algorithms();
  for (size_t p = 0; p < all.size(); ++p) {
    const AlgorithmInfo& a = *all[p];
    if (a.backend == backend && (a.shapes & shape) != 0 && nranks >= a.min_ranks && nranks <= a.max_ranks)
      out.push_back(static_cast<int>(p));
  }
  return out;
}

}  // namespace tpscope::detail
