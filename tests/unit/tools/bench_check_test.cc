// SPDX-License-Identifier: Apache-2.0
// bench_check_test - the -c 1 oracle: exact inputs, a tolerance that admits correct reductions of any
// order and rejects a missing, doubled or sign-flipped contribution, and the bit-identity check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "allreduce/wire.h"
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

// What every GPU holds after a call on a compressed wire, as the wire's GPU tests pin it: each rank's
// message encoded and decoded by the codec's CPU reference (blocks of 64 from element 0), summed in rank
// order in float, rounded once to the type; `sum_on_wire`: that float sum encoded and decoded once more
// before the rounding (a two-shot's wire).
std::vector<std::vector<unsigned char>> wireResults(tpsDataType_t t, int n, size_t count, detail::WireCode w,
                                                    bool sum_on_wire = false) {
  std::vector<std::vector<float>> carried(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(benchInputValue(kBenchSeed, r, i));
    std::vector<uint8_t> payload(detail::wirePayloadBytes(w, count));
    detail::encodeMessage(w, x.data(), count, payload.data());
    detail::decodeMessage(w, payload.data(), count, carried[r].data());
  }
  std::vector<float> sum(count, 0.0f);
  for (size_t i = 0; i < count; ++i)
    for (int r = 0; r < n; ++r) sum[i] += carried[r][i];
  if (sum_on_wire) {
    std::vector<uint8_t> payload(detail::wirePayloadBytes(w, count));
    detail::encodeMessage(w, sum.data(), count, payload.data());
    detail::decodeMessage(w, payload.data(), count, sum.data());
  }
  std::vector<std::vector<unsigned char>> out(n, std::vector<unsigned char>(count * tpsDataTypeSize(t)));
  for (size_t i = 0; i < count; ++i)
    for (int r = 0; r < n; ++r) store(t, out[r].data(), i, sum[i]);
  return out;
}

using detail::WireCode;

TEST(BenchCheckWire, ACorrectWireResultPassesAgainstTheWiresReferenceOnly) {
  for (WireCode w : {WireCode::kInt8, WireCode::kFp8, WireCode::kInt4}) {
    // Several pieces of the check (65536 elements each) and a tail that is not a whole block.
    const size_t count = (1u << 17) + 37;
    auto res = wireResults(tpsBfloat16, 3, count, w);
    const CheckCounts c = checkResults(kBenchSeed, tpsBfloat16, count, views(res), w);
    EXPECT_EQ(c.wrong, 0u) << detail::wireName(w);
    // Judged as if it had run exact, the lossy sum falls outside the exact tolerance (int8's steps are
    // fine enough that only part of it does).
    const uint64_t as_exact = checkResults(kBenchSeed, tpsBfloat16, count, views(res)).out_of_tolerance;
    EXPECT_GT(as_exact, w == WireCode::kInt8 ? 0 : count / 2) << detail::wireName(w);
  }
  auto bf16 = wireResults(tpsFloat32, 2, 1000, WireCode::kBf16);
  EXPECT_EQ(checkResults(kBenchSeed, tpsFloat32, 1000, views(bf16), WireCode::kBf16).wrong, 0u);
}

// A two-shot's wire carries the sum too: its result passes against that reference, and only that one; on
// two ranks too, where the sum's own bound is tightest and the wire may round it up past it.
TEST(BenchCheckWire, TheSumOnTheWireHasItsOwnReference) {
  for (int n : {2, 3})
    for (WireCode w : {WireCode::kInt8, WireCode::kFp8, WireCode::kInt4}) {
      const std::string what = std::string(detail::wireName(w)) + " N=" + std::to_string(n);
      const size_t count = (1u << 17) + 37;
      const uint64_t many = w == WireCode::kInt8 ? count / 1024 : count / 8;  // int8's steps are the finest
      auto twice = wireResults(tpsBfloat16, n, count, w, true);
      EXPECT_EQ(checkResults(kBenchSeed, tpsBfloat16, count, views(twice), w, true).wrong, 0u) << what;
      EXPECT_GT(checkResults(kBenchSeed, tpsBfloat16, count, views(twice), w).out_of_tolerance, many)
          << what << ": judged as a one-encode wire";
      auto once = wireResults(tpsBfloat16, n, count, w);
      EXPECT_GT(checkResults(kBenchSeed, tpsBfloat16, count, views(once), w, true).out_of_tolerance, many)
          << what << ": a one-encode result judged as a two-shot's";
    }
  auto bf16 = wireResults(tpsFloat32, 4, 1000, WireCode::kBf16, true);
  EXPECT_EQ(checkResults(kBenchSeed, tpsFloat32, 1000, views(bf16), WireCode::kBf16, true).wrong, 0u);
}

TEST(BenchCheckWire, AMissingContributionIsStillWrong) {
  const int n = 4;
  const size_t count = 300;
  auto res = wireResults(tpsBfloat16, n, count, WireCode::kInt4);
  // Every GPU forgot rank 2's element 130 (as the wire carried it: within a quarter of its value).
  std::vector<float> x(count), carried(count);
  for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(benchInputValue(kBenchSeed, 2, i));
  std::vector<uint8_t> payload(detail::wirePayloadBytes(WireCode::kInt4, count));
  detail::encodeMessage(WireCode::kInt4, x.data(), count, payload.data());
  detail::decodeMessage(WireCode::kInt4, payload.data(), count, carried.data());
  for (int r = 0; r < n; ++r) {
    const float have = static_cast<float>(decodeElement(tpsBfloat16, res[r].data(), 130));
    store(tpsBfloat16, res[r].data(), 130, have - carried[130]);
  }
  const CheckCounts c = checkResults(kBenchSeed, tpsBfloat16, count, views(res), WireCode::kInt4);
  EXPECT_EQ(c.out_of_tolerance, static_cast<uint64_t>(n));
  EXPECT_EQ(c.not_identical, 0u);
}

TEST(BenchCheckWire, TheErrorColumnsMeasureAgainstTheExactSum) {
  // Exact in float: no error at all.
  auto exact = correctResults(tpsFloat32, 2, 4096);
  CheckCounts c = checkResults(kBenchSeed, tpsFloat32, 4096, views(exact));
  ASSERT_TRUE(c.rel_rms && c.rel_max);
  EXPECT_EQ(*c.rel_rms, 0.0);
  EXPECT_EQ(*c.rel_max, 0.0);
  // int8: computed here apart, from rank 0's result and the exact sum in double.
  const size_t count = 5000;
  auto res = wireResults(tpsFloat32, 2, count, WireCode::kInt8);
  double err2 = 0, ref2 = 0, max_err = 0;
  for (size_t i = 0; i < count; ++i) {
    const double ref = benchInputValue(kBenchSeed, 0, i) + benchInputValue(kBenchSeed, 1, i);
    const double e = decodeElement(tpsFloat32, res[0].data(), i) - ref;
    err2 += e * e, ref2 += ref * ref, max_err = std::max(max_err, std::fabs(e));
  }
  c = checkResults(kBenchSeed, tpsFloat32, count, views(res), WireCode::kInt8);
  ASSERT_TRUE(c.rel_rms && c.rel_max);
  EXPECT_NEAR(*c.rel_rms, std::sqrt(err2 / ref2), 1e-12);
  EXPECT_NEAR(*c.rel_max, max_err / std::sqrt(ref2 / count), 1e-12);
  // A step of at most 4/126 per rank: the error is small but not nothing.
  EXPECT_GT(*c.rel_rms, 1e-4);
  EXPECT_LT(*c.rel_rms, 2e-2);
  // int4 is coarser than int8.
  auto coarse = wireResults(tpsFloat32, 2, count, WireCode::kInt4);
  EXPECT_GT(*checkResults(kBenchSeed, tpsFloat32, count, views(coarse), WireCode::kInt4).rel_rms, *c.rel_rms);
}

}  // namespace
}  // namespace tpscope::cli
