// SPDX-License-Identifier: Apache-2.0
// wire_test - the compressed wires' codec (wire_codec.h) through its CPU reference (wire.h): error bounds
// per block, special values, lengths 1 to a block and one, e4m3 exhaustively, and the wire setting.
#include "allreduce/wire.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tpscope::detail {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const WireCode kLossy[] = {WireCode::kBf16, WireCode::kInt8, WireCode::kFp8, WireCode::kInt4};

std::vector<float> roundTrip(WireCode w, const std::vector<float>& x) {
  std::vector<uint8_t> payload(wirePayloadBytes(w, x.size()));
  encodeMessage(w, x.data(), x.size(), payload.data());
  std::vector<float> y(x.size());
  decodeMessage(w, payload.data(), x.size(), y.data());
  return y;
}

// The largest error a value of a block with largest finite magnitude `amax` may get on wire w.
double bound(WireCode w, float x, float amax) {
  const double s = wireScale(w, amax);
  switch (w) {
    case WireCode::kBf16: return std::fabs(x) * std::ldexp(1.0, -8);
    case WireCode::kFp8: return std::fabs(x) * std::ldexp(1.0, -4) + s * std::ldexp(1.0, -10);
    default: return s * 0.5 + std::fabs(x) * 1e-6;  // int8, int4: half a step of the scale
  }
}

void expectWithinBounds(WireCode w, const std::vector<float>& x, const char* what) {
  const std::vector<float> y = roundTrip(w, x);
  for (size_t b = 0; b * kWireBlock < x.size(); ++b) {
    float amax = 0;
    const size_t i1 = std::min(x.size(), (b + 1) * kWireBlock);
    for (size_t i = b * kWireBlock; i < i1; ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    for (size_t i = b * kWireBlock; i < i1; ++i) {
      if (!std::isfinite(x[i])) continue;
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound(w, x[i], amax))
          << what << " " << wireName(w) << " n=" << x.size() << " i=" << i << " x=" << x[i] << " y=" << y[i];
    }
  }
}

TEST(WireCodec, RoundTripWithinBoundsForEveryLength) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (WireCode w : kLossy)
    for (size_t n = 1; n <= kWireBlock + 1; ++n) {
      std::vector<float> x(n);
      for (float& v : x) v = d(rng);
      expectWithinBounds(w, x, "normal");
    }
}

TEST(WireCodec, WideRangesAndOutliers) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> e(-30.0f, 30.0f);
  for (WireCode w : kLossy) {
    std::vector<float> x(10 * kWireBlock + 17);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(i % 3 ? 1.0f : -1.0f, static_cast<int>(e(rng)));
    x[5] = 3e38f;  // an outlier sets its block's scale; the others keep theirs
    expectWithinBounds(w, x, "exponents");
  }
}

TEST(WireCodec, SpecialValuesComeOutAsOnTheExactWire) {
  for (WireCode w : kLossy) {
    std::vector<float> x(kWireBlock + 3, 0.25f);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    x[1] = kInf;
    x[2] = -kInf;
    x[3] = -1.5f;
    x[kWireBlock + 1] = -kInf;
    const std::vector<float> y = roundTrip(w, x);
    EXPECT_TRUE(std::isnan(y[0])) << wireName(w);
    EXPECT_EQ(y[1], kInf) << wireName(w);
    EXPECT_EQ(y[2], -kInf) << wireName(w);
    EXPECT_EQ(y[kWireBlock + 1], -kInf) << wireName(w);
    // The finite values of a block with specials keep their scale (from the finite values alone).
    expectWithinBounds(w, x, "specials");
    EXPECT_NEAR(y[3], -1.5f, bound(w, -1.5f, 1.5f)) << wireName(w);
    // Summed as the ranks sum decoded payloads: NaN stays NaN, +Inf with -Inf is NaN.
    EXPECT_TRUE(std::isnan(y[1] + y[2] + y[3]));
    EXPECT_EQ(y[1] + y[3], kInf);
  }
}

TEST(WireCodec, ZeroBlocksAndSubnormals) {
  for (WireCode w : kLossy) {
    const std::vector<float> zeros(kWireBlock * 2 + 1, 0.0f);
    for (float v : roundTrip(w, zeros)) EXPECT_EQ(v, 0.0f) << wireName(w);
    std::vector<float> tiny(kWireBlock);
    for (size_t i = 0; i < tiny.size(); ++i)
      tiny[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 7) * (i % 2 ? 1 : -1);
    const std::vector<float> y = roundTrip(w, tiny);
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_TRUE(std::isfinite(y[i])) << wireName(w) << " i=" << i;
      EXPECT_LE(std::fabs(double(y[i]) - tiny[i]), 7.0 * std::numeric_limits<float>::denorm_min()) << wireName(w);
    }
  }
  // A scale that would underflow is the smallest subnormal, never zero for a nonzero block.
  EXPECT_EQ(wireScale(WireCode::kInt8, std::numeric_limits<float>::denorm_min()),
            std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(wireScale(WireCode::kInt8, 0.0f), 0.0f);
}

TEST(WireCodec, E4m3EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if ((c & 0x7F) >= 0x7E) continue;  // +-Inf and NaN
    const float v = e4m3Value(code);
    const uint8_t back = wireEncode(WireCode::kFp8, v, 1.0f);
    if (v == 0.0f)
      EXPECT_EQ(back & 0x7F, 0) << c;
    else
      EXPECT_EQ(back, code) << "code " << c << " value " << v;
  }
  EXPECT_EQ(e4m3Value(0x7D), 416.0f);
  EXPECT_EQ(e4m3Value(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3Value(0x08), std::ldexp(1.0f, -6));
  // Ties go to even: 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39).
  EXPECT_EQ(wireEncode(WireCode::kFp8, 1.0625f, 1.0f), 0x38);
  EXPECT_EQ(wireEncode(WireCode::kFp8, 1.1875f, 1.0f), 0x3A);
}

TEST(WireCodec, PayloadSizes) {
  EXPECT_EQ(wirePayloadBytes(WireCode::kInt8, 64), 64u + 4u);
  EXPECT_EQ(wirePayloadBytes(WireCode::kInt8, 65), 80u + 8u);
  EXPECT_EQ(wirePayloadBytes(WireCode::kInt4, 128), 64u + 8u);
  EXPECT_EQ(wirePayloadBytes(WireCode::kBf16, 3), 16u);
  // int8 and fp8 carry 1.0625 bytes a value: 0.53 of bf16's, 0.27 of float32's.
  EXPECT_NEAR(wirePayloadBytes(WireCode::kFp8, 1 << 20) / double(2 << 20), 0.53125, 1e-9);
}

TEST(WirePolicy, ParsesNamesAndBudgets) {
  WirePolicy p;
  std::string error;
  ASSERT_TRUE(parseWirePolicy("exact", &p, &error)) << error;
  EXPECT_FALSE(p.automatic);
  EXPECT_EQ(p.wire, WireCode::kExact);
  ASSERT_TRUE(parseWirePolicy("fp8", &p, &error));
  EXPECT_EQ(p.wire, WireCode::kFp8);
  ASSERT_TRUE(parseWirePolicy("auto:0.01", &p, &error));
  EXPECT_TRUE(p.automatic);
  EXPECT_DOUBLE_EQ(p.budget, 0.01);
  EXPECT_EQ(wirePolicyText(p), "auto:0.01");
  for (const char* bad : {"", "INT8", "int8 ", "auto", "auto:", "auto:0", "auto:1", "auto:-0.1", "auto:nan", "auto:inf",
                          "auto:1e-3x", "auto:0x1p-4 ", "fp16"}) {
    error.clear();
    EXPECT_FALSE(parseWirePolicy(bad, &p, &error)) << bad;
    EXPECT_NE(error.find('\''), std::string::npos) << "the message names the text: " << error;
  }
}

}  // namespace
}  // namespace tpscope::detail

namespace tpscope::detail {
namespace {

TEST(WirePolicy, ConfigAndEnvironment) {
  WirePolicy p;
  std::string error;
  ASSERT_EQ(requestedWire(tpsWireExact, 0, nullptr, &p, &error), tpsSuccess);
  EXPECT_FALSE(p.automatic);
  EXPECT_EQ(p.wire, WireCode::kExact) << "the default is exact";
  ASSERT_EQ(requestedWire(tpsWireExact, 0, "int8", &p, &error), tpsSuccess);
  EXPECT_EQ(p.wire, WireCode::kInt8) << "TPSCOPE_WIRE applies where the config says exact";
  ASSERT_EQ(requestedWire(tpsWireFp8, 0, "int8", &p, &error), tpsSuccess);
  EXPECT_EQ(p.wire, WireCode::kFp8) << "the config's own choice wins";
  ASSERT_EQ(requestedWire(tpsWireExact, 0, "auto:0.02", &p, &error), tpsSuccess);
  EXPECT_TRUE(p.automatic);
  ASSERT_EQ(requestedWire(tpsWireAuto, 0.05f, nullptr, &p, &error), tpsSuccess);
  EXPECT_NEAR(p.budget, 0.05, 1e-7);
  for (float bad : {0.0f, 1.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), kInf})
    EXPECT_EQ(requestedWire(tpsWireAuto, bad, nullptr, &p, &error), tpsInvalidArgument) << bad;
  EXPECT_EQ(requestedWire(tpsNumWires, 0, nullptr, &p, &error), tpsInvalidArgument);
  EXPECT_EQ(requestedWire(-1, 0, nullptr, &p, &error), tpsInvalidArgument);
  EXPECT_EQ(requestedWire(tpsWireExact, 0, "lossy", &p, &error), tpsInvalidArgument);
  EXPECT_NE(error.find("TPSCOPE_WIRE"), std::string::npos) << error;
}

// A call's own wire (tpsAllReduceWire): exact and each compressed wire override the communicator's,
// tpsWireAuto leaves it, anything else is refused.
TEST(WirePolicy, CallWireOverride) {
  std::optional<WireCode> w;
  std::string error;
  const std::pair<tpsWire_t, WireCode> named[] = {{tpsWireExact, WireCode::kExact},
                                                  {tpsWireBf16, WireCode::kBf16},
                                                  {tpsWireInt8, WireCode::kInt8},
                                                  {tpsWireFp8, WireCode::kFp8},
                                                  {tpsWireInt4, WireCode::kInt4}};
  for (const auto& [api, code] : named) {
    w.reset();
    ASSERT_EQ(callWireOverride(api, &w, &error), tpsSuccess) << api;
    ASSERT_TRUE(w.has_value()) << api << " must override the communicator's wire";
    EXPECT_EQ(*w, code) << api;
  }
  w = WireCode::kInt8;
  ASSERT_EQ(callWireOverride(tpsWireAuto, &w, &error), tpsSuccess);
  EXPECT_FALSE(w.has_value()) << "tpsWireAuto is the communicator's wire";
  for (int bad : {-1, static_cast<int>(tpsNumWires), 99, std::numeric_limits<int>::min()}) {
    error.clear();
    EXPECT_EQ(callWireOverride(bad, &w, &error), tpsInvalidArgument) << bad;
    EXPECT_NE(error.find(std::to_string(bad)), std::string::npos) << error;
  }
}

TEST(WireTable, AutoTakesTheFastestWireWithinTheBudget) {
  WireTable t;
  std::string error;
  const nlohmann::json doc = {{"fingerprint", "1xNVIDIA H200"},
                              {"measured", "2026-12-06T10:00:00Z"},
                              {"dtype", "bfloat16"},
                              {"rows",
                               {{{"bytes", 65536}, {"wire", "exact"}, {"time_us", 10.0}, {"rel_rms", 0.0}},
                                {{"bytes", 65536}, {"wire", "int8"}, {"time_us", 11.0}, {"rel_rms", 0.004}},
                                {{"bytes", 16777216}, {"wire", "exact"}, {"time_us", 800.0}, {"rel_rms", 0.0}},
                                {{"bytes", 16777216}, {"wire", "int8"}, {"time_us", 430.0}, {"rel_rms", 0.004}},
                                {{"bytes", 16777216}, {"wire", "fp8"}, {"time_us", 425.0}, {"rel_rms", 0.02}},
                                {{"bytes", 16777216}, {"wire", "int4"}, {"time_us", 300.0}, {"rel_rms", 0.08}}}}};
  ASSERT_TRUE(parseWireTable(doc, &t, &error)) << error;
  EXPECT_EQ(t.choose(4096, 0.01), WireCode::kExact) << "int8 is slower at 64 KiB";
  EXPECT_EQ(t.choose(16 << 20, 0.01), WireCode::kInt8);
  EXPECT_EQ(t.choose(1 << 30, 0.01), WireCode::kInt8) << "past the sizes measured: the largest";
  EXPECT_EQ(t.choose(8 << 20, 0.03), WireCode::kFp8);
  EXPECT_EQ(t.choose(8 << 20, 0.1), WireCode::kInt4);
  EXPECT_EQ(t.choose(8 << 20, 0.001), WireCode::kExact) << "no wire within the budget";
  EXPECT_EQ(WireTable{}.choose(8 << 20, 0.5), WireCode::kExact);
  // The table is the host backend's: auto takes it there only; a named wire holds on every backend.
  const WirePolicy automatic{true, WireCode::kExact, 0.01}, named{false, WireCode::kFp8, 0};
  EXPECT_EQ(policyWire(automatic, &t, 16 << 20, tpsBackendHost), WireCode::kInt8);
  EXPECT_EQ(policyWire(automatic, &t, 16 << 20, tpsBackendP2p), WireCode::kExact);
  EXPECT_EQ(policyWire(automatic, nullptr, 16 << 20, tpsBackendHost), WireCode::kExact);
  EXPECT_EQ(policyWire(named, &t, 16 << 20, tpsBackendP2p), WireCode::kFp8);
  EXPECT_EQ(policyWire(named, nullptr, 4096, tpsBackendNccl), WireCode::kFp8);
  WireTable back;
  ASSERT_TRUE(parseWireTable(wireTableJson(t), &back, &error)) << error;
  EXPECT_EQ(back.rows.size(), t.rows.size());
  nlohmann::json broken = doc;
  broken["rows"][1]["rel_rms"] = -1;
  EXPECT_FALSE(parseWireTable(broken, &back, &error));
  broken = doc;
  broken["rows"][1]["wire"] = "int7";
  EXPECT_FALSE(parseWireTable(broken, &back, &error));
  EXPECT_FALSE(parseWireTable(nlohmann::json::array(), &back, &error));
}

// What a communicator (and `tpscope topo`) takes from a tune file: the table measured on this box, or why
// none; the fingerprint is asked only when there is a table to match.
TEST(WireTable, SelectedOnlyWhenMeasuredOnThisBox) {
  const nlohmann::json table = {{"fingerprint", "2xNVIDIA H100"},
                                {"measured", "2026-12-06T10:00:00Z"},
                                {"dtype", "bfloat16"},
                                {"rows", {{{"bytes", 65536}, {"wire", "int8"}, {"time_us", 9.0}, {"rel_rms", 0.004}}}}};
  int asked = 0;
  auto here = [&] {
    ++asked;
    return std::string("2xNVIDIA H100");
  };
  WireTableLoad l = selectWireTable(nlohmann::json{{"wires", table}, {"host_blocks", 8}}, "/t/tune.json", here);
  ASSERT_TRUE(l.table) << l.why;
  EXPECT_TRUE(l.why.empty());
  EXPECT_EQ(l.table->path, "/t/tune.json");
  EXPECT_EQ(l.table->choose(65536, 0.01), WireCode::kInt8);
  EXPECT_EQ(asked, 1);

  l = selectWireTable(nlohmann::json{{"host_blocks", 8}}, "/t/tune.json", here);
  EXPECT_FALSE(l.table);
  EXPECT_NE(l.why.find("no \"wires\" table in tune file /t/tune.json"), std::string::npos) << l.why;
  l = selectWireTable(nlohmann::json(), "/t/tune.json", here);  // no file, or not JSON
  EXPECT_FALSE(l.table);
  EXPECT_EQ(asked, 1);

  l = selectWireTable(nlohmann::json{{"wires", table}}, "/t/tune.json",
                      [] { return std::string("2xNVIDIA H100 PIX"); });
  EXPECT_FALSE(l.table);
  EXPECT_NE(l.why.find("measured its wires on \"2xNVIDIA H100\", these GPUs are \"2xNVIDIA H100 PIX\""),
            std::string::npos)
      << l.why;
  nlohmann::json broken = table;
  broken["rows"] = nlohmann::json::array();
  l = selectWireTable(nlohmann::json{{"wires", broken}}, "/t/tune.json", here);
  EXPECT_FALSE(l.table);
  EXPECT_NE(l.why.find("tune file /t/tune.json: "), std::string::npos) << l.why;
}

}  // namespace
}  // namespace tpscope::detail
