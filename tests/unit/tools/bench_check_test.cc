// SPDX-License-Identifier: Apache-2.0
// bench_check_test - the -c 1 oracle: exact inputs, a tolerance that admits correct reductions of any
// order and rejects a missing, doubled or sign-flipped contribution, and the bit-identity check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bench/check.h"

namespace tpscope::cli {
namespace {

constexpr tpsDataType_t kTypes[] = {tpsFloat32, tpsFloat16, tpsBfloat16};

// Host copies of what each of n GPUs would hold after a correct AllReduce: the exact sum, rounded once.
std::vector<std::vector<unsigned char>> correctResults(tpsDataType_t t, int n, size_t count) {
  std::vector<std::vector<unsigned char>> out(n, std::vector<unsigned char>(count * tpsDataTypeSize(t)));
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += benchInputValue(kBenchSeed, r, i);
    for (int r = 0; r < n; ++r) {
      void* p = out[r].data();
      if (t == tpsFloat32) static_cast<float*>(p)[i] = static_cast<float>(s);
      if (t == tpsFloat16) static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(s));
      if (t == tpsBfloat16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(s));
    }
  }
  return out;
}

std::vector<const void*> views(const std::vector<std::vector<unsigned char>>& v) {
  std::vector<const void*> p;
  for (const auto& b : v) p.push_back(b.data());
  return p;
}

void store(tpsDataType_t t, void* p, size_t i, float v) {
  if (t == tpsFloat32) static_cast<float*>(p)[i] = v;
  if (t == tpsFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  if (t == tpsBfloat16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

TEST(BenchCheck, InputsAreExactInEveryTypeAndDeterministic) {
  for (tpsDataType_t t : kTypes) {
    std::vector<unsigned char> buf(1000 * tpsDataTypeSize(t));
    fillBenchInput(kBenchSeed, 3, t, 1000, buf.data());
    for (size_t i = 0; i < 1000; ++i) {
      const double v = benchInputValue(kBenchSeed, 3, i);
      EXPECT_EQ(decodeElement(t, buf.data(), i), v) << i;
      EXPECT_GE(std::fabs(v), 1.0);
      EXPECT_LT(std::fabs(v), 4.0);
    }
  }
  EXPECT_NE(benchInputValue(kBenchSeed, 0, 7), benchInputValue(kBenchSeed, 1, 7));  // ranks differ
  // Pinned values (splitmix64 of seed, rank and index, computed apart from this code): the inputs of a
  // -c 1 run are the same on every machine and in every version, so records stay comparable.
  EXPECT_EQ(benchInputValue(kBenchSeed, 2, 99), 2.03125);
  EXPECT_EQ(benchInputValue(kBenchSeed, 0, 0), 3.296875);
  EXPECT_EQ(benchInputValue(kBenchSeed, 0, 7), -3.765625);
  EXPECT_EQ(benchInputValue(kBenchSeed, 1, 7), 2.796875);
}

TEST(BenchCheck, ToleranceIsBelowOneContributionFor8GpusInBfloat16) {
  // Worst case: 8 inputs of magnitude 255/64. A contribution moves the sum by at least 1.
  EXPECT_LT(benchTolerance(tpsBfloat16, 8, 8 * 255.0 / 64), 1.0);
  EXPECT_LT(benchTolerance(tpsBfloat16, 8, 8 * 255.0 / 64), 0.9);
  // gamma(1) = u / (1 - u): just above one rounding of the sum.
  const double u = std::ldexp(1.0, -24);
  EXPECT_DOUBLE_EQ(benchTolerance(tpsFloat32, 2, 4.0), 4.0 * u / (1 - u));
}

TEST(BenchCheck, CorrectResultsPass) {
  for (tpsDataType_t t : kTypes)
    for (int n : {2, 3, 8}) {
      auto res = correctResults(t, n, 4097);  // odd, not a multiple of any vector width
      const CheckCounts c = checkResults(kBenchSeed, t, 4097, views(res));
      EXPECT_EQ(c.wrong, 0u) << tpsDataTypeName(t) << " n=" << n;
      EXPECT_EQ(c.not_identical, 0u);
    }
}

TEST(BenchCheck, RingRoundingEveryHopPasses) {
  // NCCL's ring rounds each partial sum to the element type; the tolerance must admit it.
  const int n = 8;
  const size_t count = 2000;
  std::vector<std::vector<unsigned char>> res(n, std::vector<unsigned char>(count * 2));
  for (size_t i = 0; i < count; ++i) {
    __nv_bfloat16 acc = __float2bfloat16_rn(static_cast<float>(benchInputValue(kBenchSeed, 0, i)));
    for (int r = 1; r < n; ++r)
      acc = __float2bfloat16_rn(__bfloat162float(acc) + static_cast<float>(benchInputValue(kBenchSeed, r, i)));
    for (int r = 0; r < n; ++r) std::memcpy(res[r].data() + 2 * i, &acc, 2);
  }
  EXPECT_EQ(checkResults(kBenchSeed, tpsBfloat16, count, views(res)).wrong, 0u);
}

TEST(BenchCheck, MissingContributionIsWrongInEveryType) {
  for (tpsDataType_t t : kTypes) {
    const int n = 8;
    auto res = correctResults(t, n, 64);
    // Every GPU forgot rank 5's element 10.
    double s = 0;
    for (int r = 0; r < n; ++r)
      if (r != 5) s += benchInputValue(kBenchSeed, r, 10);
    for (int r = 0; r < n; ++r) store(t, res[r].data(), 10, static_cast<float>(s));
    const CheckCounts c = checkResults(kBenchSeed, t, 64, views(res));
    EXPECT_EQ(c.out_of_tolerance, static_cast<uint64_t>(n)) << tpsDataTypeName(t);
    EXPECT_EQ(c.wrong, static_cast<uint64_t>(n));
    EXPECT_EQ(c.not_identical, 0u);
  }
}

TEST(BenchCheck, OneGpuDifferingInTheLastBitIsNotIdentical) {
  auto res = correctResults(tpsFloat32, 2, 16);
  float* f = reinterpret_cast<float*>(res[1].data());
  f[3] = std::nextafter(f[3], 1e9f);  // within tolerance, but not bit-identical to rank 0
  const CheckCounts c = checkResults(kBenchSeed, tpsFloat32, 16, views(res));
  EXPECT_EQ(c.out_of_tolerance, 0u);
  EXPECT_EQ(c.not_identical, 1u);
  EXPECT_EQ(c.wrong, 1u);
}

TEST(BenchCheck, NanIsWrong) {
  auto res = correctResults(tpsFloat16, 2, 16);
  for (int r = 0; r < 2; ++r) store(tpsFloat16, res[r].data(), 0, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(checkResults(kBenchSeed, tpsFloat16, 16, views(res)).wrong, 2u);
}

TEST(BenchCheck, LargeArraysAreCheckedOnSeveralThreadsWithTheSameCounts) {
  // Above the 1M-element grain the check splits across threads; a bad element near the end is still found.
  const size_t count = (3u << 20) + 5;
  auto res = correctResults(tpsBfloat16, 2, count);
  store(tpsBfloat16, res[0].data(), count - 2, 1000.0f);
  const CheckCounts c = checkResults(kBenchSeed, tpsBfloat16, count, views(res));
  EXPECT_EQ(c.out_of_tolerance, 1u);
  EXPECT_EQ(c.not_identical, 1u);
  EXPECT_EQ(c.wrong, 2u);  // rank 0 out of tolerance; rank 1 correct but differs from rank 0
}

}  // namespace
}  // namespace tpscope::cli
