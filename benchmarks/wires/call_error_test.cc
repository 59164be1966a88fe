// SPDX-License-Identifier: Apache-2.0
// The wires' per-call error: round trips at any block size against the library's codec, the error sums
// on calls whose answer is known, and the report over a capture folder written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "call_error_report.h"
#include "call_error_stats.h"
#include "workload/capture.h"

namespace tpscope::wires {
namespace {

using detail::WireCode;

// bf16 bits of x (x representable).
uint16_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

std::vector<float> randomBf16(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = roundToBf16(d(g));
  return v;
}

TEST(WireError, RoundToBf16IsNearestTiesToEven) {
  EXPECT_EQ(roundToBf16(1.0f), 1.0f);
  EXPECT_EQ(roundToBf16(1.0f + 0.00390625f), 1.0f);             // halfway, to the even 1.0
  EXPECT_EQ(roundToBf16(1.0078125f + 0.00390625f), 1.015625f);  // halfway, to the even 1.015625
  EXPECT_EQ(roundToBf16(1.0f + 0.0040f), 1.0078125f);           // above halfway
  EXPECT_TRUE(std::isnan(roundToBf16(std::numeric_limits<float>::quiet_NaN())));
}

// The per-value path at the library's block size gives what the library's reference gives, special
// values and short tails included: so the other block sizes measure the same codec.
TEST(WireError, BlockRoundTripMatchesTheLibraryAt64) {
  for (WireCode w : {WireCode::kInt8, WireCode::kFp8, WireCode::kInt4}) {
    for (size_t n : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(200), size_t(4096)}) {
      std::vector<float> x = randomBf16(n, static_cast<uint32_t>(n) * 7 + static_cast<uint32_t>(w), 3.0f);
      if (n > 5) {
        x[1] = std::numeric_limits<float>::quiet_NaN();
        x[2] = std::numeric_limits<float>::infinity();
        x[3] = -std::numeric_limits<float>::infinity();
        x[4] = 1e-40f;  // a denormal
      }
      std::vector<float> lib(n), mine(n);
      std::vector<uint8_t> payload(detail::wirePayloadBytes(w, n));
      detail::encodeMessage(w, x.data(), n, payload.data());
      detail::decodeMessage(w, payload.data(), n, lib.data());
      blockRoundTrip(w, x.data(), n, detail::kWireBlock, mine.data());
      for (size_t i = 0; i < n; ++i) {
        uint32_t a, b;
        std::memcpy(&a, &lib[i], 4), std::memcpy(&b, &mine[i], 4);
        ASSERT_EQ(a, b) << detail::wireName(w) << " n=" << n << " i=" << i;
      }
    }
  }
}

// A smaller block has a smaller scale where its values are small: the round trip error of a block of
// mixed magnitudes shrinks with the block, and every value stays within half a scale step of itself.
TEST(WireError, BlockSizeSetsTheScale) {
  std::vector<float> x(128, 0.01f);
  x[100] = 10.0f;  // one large value in the second half
  std::vector<float> out32(128), out128(128);
  blockRoundTrip(WireCode::kInt8, x.data(), x.size(), 32, out32.data());
  blockRoundTrip(WireCode::kInt8, x.data(), x.size(), 128, out128.data());
  EXPECT_NEAR(out32[0], 0.01f, 0.01f / 126 / 2 * 1.01);  // its block's scale is 0.01 / 126
  EXPECT_EQ(out128[0], 0.0f);                            // 0.01 < half of 10 / 126: rounds to zero
  EXPECT_NEAR(out128[100], 10.0f, 1e-5);
}

TEST(WireError, ExactWireIsTheResultsRoundingAlone) {
  // 1 + 2^-8 is halfway between two bfloat16 values: the sum rounds to 1, an error of 2^-8.
  const CallError e = callError(WireCode::kExact, 64, {{1.0f, 2.0f}, {0.00390625f, 0.0f}});
  EXPECT_EQ(e.values, 2u);
  EXPECT_DOUBLE_EQ(e.sum_sq_error, std::pow(2.0, -16));
  EXPECT_DOUBLE_EQ(e.sum_sq_exact, 1.00390625 * 1.00390625 + 4.0);
  EXPECT_DOUBLE_EQ(e.relRms(), std::sqrt(std::pow(2.0, -16) / (1.00390625 * 1.00390625 + 4.0)));
  EXPECT_DOUBLE_EQ(e.max_abs, 0.00390625);
  EXPECT_DOUBLE_EQ(e.max_abs_rel, 0.00390625 / std::sqrt((1.00390625 * 1.00390625 + 4.0) / 2));
}

TEST(WireError, Int8ErrorIsWithinHalfAStepPerRank) {
  const std::vector<std::vector<float>> ranks = {randomBf16(4096, 1, 1.0f), randomBf16(4096, 2, 1.0f)};
  const CallError e = callError(WireCode::kInt8, 64, ranks);
  EXPECT_GT(e.relRms(), 1e-4);  // a lossy wire: not zero
  // Each rank's value moves by at most half its block's step (amax / 126 / 2), and the result's rounding
  // adds half a bfloat16 ulp.
  double bound = 0;
  for (size_t b = 0; b < 4096; b += 64) {
    float a0 = 0, a1 = 0;
    for (size_t i = b; i < b + 64; ++i)
      a0 = std::max(a0, std::fabs(ranks[0][i])), a1 = std::max(a1, std::fabs(ranks[1][i]));
    bound = std::max(bound, (a0 + a1) / 126.0 / 2 + (a0 + a1) * std::pow(2.0, -9));
  }
  EXPECT_LE(e.max_abs, bound);
  EXPECT_EQ(e.nonfinite, 0u);
  // Coarser codes, larger errors: int4 > fp8 and int8; and the exact wire's floor below them all.
  const double exact = callError(WireCode::kExact, 64, ranks).relRms();
  const double int4 = callError(WireCode::kInt4, 64, ranks).relRms();
  EXPECT_LT(exact, e.relRms());
  EXPECT_GT(int4, e.relRms());
  EXPECT_GT(int4, callError(WireCode::kFp8, 64, ranks).relRms());
}

TEST(WireError, NonFiniteValuesAreCountedNotSummed) {
  std::vector<std::vector<float>> ranks = {{1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f}, {1.0f, 1.0f, 1.0f}};
  const CallError e = callError(WireCode::kInt8, 64, ranks);
  EXPECT_EQ(e.nonfinite, 1u);
  EXPECT_EQ(e.values, 2u);
  EXPECT_TRUE(std::isfinite(e.relRms()));
}

TEST(WireError, PoolingAddsSumsAndKeepsMaxima) {
  CallError a, b;
  a.sum_sq_error = 1, a.sum_sq_exact = 100, a.max_abs = 0.5, a.max_abs_rel = 0.1, a.values = 10;
  b.sum_sq_error = 3, b.sum_sq_exact = 300, b.max_abs = 0.2, b.max_abs_rel = 0.3, b.values = 30, b.nonfinite = 1;
  a += b;
  EXPECT_DOUBLE_EQ(a.relRms(), 0.1);
  EXPECT_EQ(a.max_abs, 0.5);
  EXPECT_EQ(a.max_abs_rel, 0.3);
  EXPECT_EQ(a.values, 40u);
  EXPECT_EQ(a.nonfinite, 1u);
  EXPECT_EQ(CallError{}.relRms(), 0.0);  // an all-zero sum: no relative error to speak of
}

TEST(WireError, BytesPerValue) {
  EXPECT_DOUBLE_EQ(wireBytesPerValue(WireCode::kInt8, 64, 2), 1.0625);
  EXPECT_DOUBLE_EQ(wireBytesPerValue(WireCode::kFp8, 128, 2), 1.03125);
  EXPECT_DOUBLE_EQ(wireBytesPerValue(WireCode::kInt4, 32, 2), 0.625);
  EXPECT_DOUBLE_EQ(wireBytesPerValue(WireCode::kExact, 64, 2), 2.0);
}

class WireReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tpscope_wire_report_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::string error;
    workload::CaptureWriter w;
    ASSERT_TRUE(w.open(dir_, {{"preset", "test"}}, &error)) << error;
    // Two decode calls of one token and one prefill call of 8 tokens kept at 4 rows, 128 wide, 2 ranks.
    for (int layer = 0; layer < 2; ++layer) ASSERT_TRUE(append(&w, "decode", layer, 1, 1)) << error_;
    ASSERT_TRUE(append(&w, "prefill", 0, 8, 4)) << error_;
    ASSERT_TRUE(w.finish(&error)) << error;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  bool append(workload::CaptureWriter* w, const char* phase, int layer, int tokens, int keep) {
    workload::CapturedCall c;
    c.phase = phase, c.layer = layer, c.which = "ffn_down", c.tokens = tokens, c.hidden = 128, c.ranks = 2;
    c.rows = workload::capturedRows(tokens, keep);
    std::vector<std::vector<uint16_t>> ranks(2);
    for (int r = 0; r < 2; ++r)
      for (float x : randomBf16(c.rankValues(), static_cast<uint32_t>(layer * 10 + r + tokens), 1.0f))
        ranks[r].push_back(bits(x));
    return w->append(c, ranks, &error_);
  }
  std::string dir_, error_;
};

TEST_F(WireReport, PoolsEachPhaseAndSizeForEveryWireAndBlock) {
  nlohmann::json r;
  std::string error;
  ReportOptions o;
  o.wires = {WireCode::kInt8, WireCode::kInt4};
  o.blocks = {32, 64};
  ASSERT_TRUE(callErrorReport(dir_, o, &r, &error)) << error;
  const nlohmann::json& res = r["results"];
  ASSERT_EQ(res.size(), 2u * (1 + 2 * 2));  // two sizes x (exact + 2 wires x 2 blocks)
  EXPECT_EQ(res[0]["phase"], "decode");
  EXPECT_EQ(res[0]["wire"], "exact");
  EXPECT_TRUE(res[0]["block"].is_null());
  EXPECT_EQ(res[0]["calls"], 2);
  EXPECT_EQ(res[0]["values"], 2 * 128);
  EXPECT_EQ(res[0]["size_bytes"], 128 * 2);
  EXPECT_EQ(res[1]["wire"], "int8");
  EXPECT_EQ(res[1]["block"], 32);
  EXPECT_EQ(res[5]["phase"], "prefill");
  EXPECT_EQ(res[5]["rows_per_call"], 4);
  EXPECT_EQ(res[5]["values"], 4 * 128);
  EXPECT_EQ(res[5]["size_bytes"], 8 * 128 * 2);
  EXPECT_EQ(r["per_call"].size(), 3u * 5);
  for (const nlohmann::json& x : res) {
    EXPECT_GE(x["worst_call_rel_rms"].get<double>(), x["rel_rms"].get<double>() * (1 - 1e-12));
    if (x["wire"] != "exact") {
      EXPECT_GT(x["rel_rms"].get<double>(), 0.0);
    }
  }
  // The pooled decode int8/64 figure is the two calls' sums added, as the per-call figures say.
  double worst = 0;
  for (const nlohmann::json& c : r["per_call"])
    if (c["phase"] == "decode" && c["wire"] == "int8" && c["block"] == 64)
      worst = std::max(worst, c["rel_rms"].get<double>());
  EXPECT_DOUBLE_EQ(res[2]["worst_call_rel_rms"].get<double>(), worst);
  EXPECT_NE(formatReport(r).find("prefill"), std::string::npos);
}

TEST_F(WireReport, RefusesWhatItCannotMeasure) {
  nlohmann::json r;
  std::string error;
  ReportOptions o;
  o.wires = {WireCode::kBf16};
  EXPECT_FALSE(callErrorReport(dir_, o, &r, &error));
  EXPECT_NE(error.find("bf16"), std::string::npos);
  // A data file cut short: the call that runs past its end is named.
  std::filesystem::resize_file(dir_ + "/prefill.bin", 100);
  EXPECT_FALSE(callErrorReport(dir_, ReportOptions{}, &r, &error));
  EXPECT_NE(error.find("prefill.bin ends before"), std::string::npos) << error;
  EXPECT_FALSE(callErrorReport(dir_ + "/missing", ReportOptions{}, &r, &error));
}

}  // namespace
}  // namespace tpscope::wires
