// SPDX-License-Identifier: Apache-2.0
// workload_token_decode_test - the token decode the wires' accuracy runs on (src/workload/token_decode.h),
// on one GPU with two tensor positions sharing it over the host backend: the greedy chain, the positions'
// agreement, a forced rerun bit for bit, TP=1 close to TP=2, a lossy wire (TPSCOPE_WIRE) used and close,
// and the AllReduce capture (src/workload/capture.h) written without changing a single logit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gpu_test_util.h"
#include "workload/capture.h"
#include "workload/token_decode.h"
#include "workload_test_util.h"

namespace tpscope::testing {
namespace {

using workload::SplitMode;
using workload::TokenDecodeOptions;
using workload::TokenDecodeResult;

constexpr int kPrompt = 24, kUbatch = 8, kSteps = 12;

// TPSCOPE_WIRE for the communicators made while it lives.
class WireEnv {
 public:
  explicit WireEnv(const char* wire) {
    const char* old = std::getenv("TPSCOPE_WIRE");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("TPSCOPE_WIRE", wire, 1);
  }
  ~WireEnv() { had_ ? setenv("TPSCOPE_WIRE", old_.c_str(), 1) : unsetenv("TPSCOPE_WIRE"); }

 private:
  bool had_ = false;
  std::string old_;
};

std::unique_ptr<workload::Model> tinyModel(SplitMode split, std::vector<int> devices, const char* wire) {
  WireEnv env(wire);
  return makeModel(testConfig("tiny"), split, devices, split == SplitMode::kTensor ? tpsBackendHost : tpsBackendAuto, 7,
                   kPrompt + kSteps, kUbatch, workload::PrefillAttention::kKernel, devices.size() > 1);
}

TokenDecodeResult decode(workload::Model& m, std::vector<int> forced = {}, std::string capture = {}) {
  TokenDecodeOptions o;
  o.prompt = kPrompt, o.ubatch = kUbatch, o.steps = kSteps, o.forced = std::move(forced);
  o.capture_dir = std::move(capture), o.capture_rows = 3;
  TokenDecodeResult r;
  std::string reason;
  EXPECT_EQ(workload::runTokenDecode(m, o, &r, &reason), tpsSuccess) << reason;
  return r;
}

// The calls by path that carried any.
std::vector<std::string> usedPaths(const TokenDecodeResult& r) {
  std::vector<std::string> names;
  for (const PathStats& p : r.stats) {
    unsigned long long calls = 0;
    for (const tpsStatsCell_t& c : p.cells) calls += c.calls;
    if (calls) names.push_back(p.name);
  }
  return names;
}

// KL(softmax(a) || softmax(b)) of one step's logits.
double klDivergence(const float* a, const float* b, int n) {
  double ma = a[0], mb = b[0];
  for (int i = 1; i < n; ++i) ma = std::max(ma, double(a[i])), mb = std::max(mb, double(b[i]));
  double sa = 0, sb = 0;
  for (int i = 0; i < n; ++i) sa += std::exp(a[i] - ma), sb += std::exp(b[i] - mb);
  double kl = 0;
  for (int i = 0; i < n; ++i) {
    const double lp = a[i] - ma - std::log(sa), lq = b[i] - mb - std::log(sb);
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

double meanKl(const TokenDecodeResult& a, const TokenDecodeResult& b) {
  double s = 0;
  for (int i = 0; i < kSteps; ++i)
    s += klDivergence(&a.logits[size_t(i) * workload::kVocab], &b.logits[size_t(i) * workload::kVocab],
                      workload::kVocab);
  return s / kSteps;
}

TEST(WorkloadTokenDecode, GreedyChainOnTwoPositionsAndAForcedRerunBitForBit) {
  TPS_REQUIRE_GPUS(1);
  auto m = tinyModel(SplitMode::kTensor, {0, 0}, "exact");
  ASSERT_TRUE(m);
  const TokenDecodeResult r = decode(*m);
  ASSERT_EQ(r.tokens.size(), size_t(kSteps));
  ASSERT_EQ(r.logits.size(), size_t(kSteps) * workload::kVocab);
  for (int i = 0; i + 1 < kSteps; ++i) EXPECT_EQ(r.tokens[i + 1], r.greedy[i]) << "step " << i;
  EXPECT_EQ(r.rank_mismatch_steps, 0);
  for (const std::string& p : usedPaths(r)) EXPECT_EQ(p.find('+'), std::string::npos) << p << ": not the exact wire";
  EXPECT_FALSE(usedPaths(r).empty());
  // The head's spread is about kLogitStd, and the tokens are not all one.
  double sum = 0, sq = 0;
  for (int v = 0; v < workload::kVocab; ++v) sum += r.logits[v], sq += double(r.logits[v]) * r.logits[v];
  const double mean = sum / workload::kVocab, sd = std::sqrt(sq / workload::kVocab - mean * mean);
  EXPECT_GT(sd, workload::kLogitStd * 0.5);
  EXPECT_LT(sd, workload::kLogitStd * 2.0);
  EXPECT_NE(std::count(r.tokens.begin(), r.tokens.end(), r.tokens[0]), kSteps);

  const TokenDecodeResult again = decode(*m, r.tokens);
  EXPECT_EQ(again.tokens, r.tokens);
  EXPECT_EQ(std::memcmp(again.logits.data(), r.logits.data(), r.logits.size() * 4), 0);
}

TEST(WorkloadTokenDecode, OnePositionAndALossyWireStayClose) {
  TPS_REQUIRE_GPUS(1);
  auto tp2 = tinyModel(SplitMode::kTensor, {0, 0}, "exact");
  ASSERT_TRUE(tp2);
  const TokenDecodeResult exact = decode(*tp2);
  tp2.reset();
  auto tp1 = tinyModel(SplitMode::kNone, {0}, "exact");
  ASSERT_TRUE(tp1);
  const TokenDecodeResult floor = decode(*tp1, exact.tokens);
  EXPECT_TRUE(floor.stats.empty());       // no communicator
  EXPECT_LT(meanKl(exact, floor), 0.02);  // a wrong token or position moves it by about kLogitStd^2
  tp1.reset();

  auto int8 = tinyModel(SplitMode::kTensor, {0, 0}, "int8");
  ASSERT_TRUE(int8);
  const TokenDecodeResult lossy = decode(*int8, exact.tokens);
  EXPECT_EQ(lossy.rank_mismatch_steps, 0);  // rank-identical by construction, in a whole model too
  ASSERT_FALSE(usedPaths(lossy).empty());
  for (const std::string& p : usedPaths(lossy)) EXPECT_NE(p.find("+int8"), std::string::npos) << p;
  EXPECT_NE(std::memcmp(lossy.logits.data(), exact.logits.data(), exact.logits.size() * 4), 0);
  EXPECT_LT(meanKl(exact, lossy), 0.05);
  EXPECT_GT(meanKl(exact, lossy), 0.0);
}

TEST(WorkloadTokenDecode, CaptureWritesEveryCallAndChangesNoLogit) {
  TPS_REQUIRE_GPUS(1);
  auto m = tinyModel(SplitMode::kTensor, {0, 0}, "exact");
  ASSERT_TRUE(m);
  const TokenDecodeResult plain = decode(*m);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tpscope_token_capture_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  const TokenDecodeResult captured = decode(*m, plain.tokens, dir);
  EXPECT_EQ(std::memcmp(captured.logits.data(), plain.logits.data(), plain.logits.size() * 4), 0);
  const int layers = testConfig("tiny").layers;
  EXPECT_EQ(captured.captured_calls, 4 * layers);
  workload::CaptureIndex index;
  std::string error;
  ASSERT_TRUE(workload::readCaptureIndex(dir, &index, &error)) << error;
  ASSERT_EQ(index.calls.size(), size_t(4 * layers));
  for (size_t i = 0; i < index.calls.size(); ++i) {
    const workload::CapturedCall& c = index.calls[i];
    const bool prefill = i < size_t(2 * layers);  // the prompt's first micro-batch comes first
    EXPECT_EQ(c.phase, prefill ? "prefill" : "decode");
    EXPECT_EQ(c.layer, static_cast<int>(i % (2 * layers)) / 2);
    EXPECT_EQ(c.which, i % 2 ? "ffn_down" : "attention_out");
    EXPECT_EQ(c.tokens, prefill ? kUbatch : 1);
    EXPECT_EQ(c.rows.size(), prefill ? 3u : 1u);
    EXPECT_EQ(c.ranks, 2);
    std::vector<std::vector<float>> ranks;
    ASSERT_TRUE(workload::readCapturedCall(dir, c, &ranks, &error)) << error;
    double sq = 0;
    for (const auto& rank : ranks)
      for (float x : rank) {
        ASSERT_TRUE(std::isfinite(x));
        sq += double(x) * x;
      }
    EXPECT_GT(sq, 0.0) << "call " << i << " is all zeros";
    EXPECT_NE(std::memcmp(ranks[0].data(), ranks[1].data(), ranks[0].size() * 4), 0) << "the ranks' partials differ";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpscope::testing
