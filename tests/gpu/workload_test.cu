// SPDX-License-Identifier: Apache-2.0
// workload_test - the synthetic transformer on one GPU: it matches a double-precision host reference
// (prefill in micro-batches and a decode step over a generated context), it is deterministic in its
// seed, and a decode step run as a CUDA graph gives bit-identical results to the eager one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "gpu_test_util.h"
#include "workload/attention_cudnn.h"
#include "workload/kernels.h"
#include "workload/phases.h"
#include "workload_reference.h"
#include "workload_test_util.h"

namespace tpscope::testing {
namespace {

using workload::SplitMode;

std::vector<float> lastRows(const std::vector<double>& all, int rows, int width) {
  return std::vector<float>(all.end() - size_t(rows) * width, all.end());
}

TEST(Workload, TinyPrefillMatchesTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  const workload::ModelConfig c = testConfig("tiny");
  auto m = makeModel(c, SplitMode::kNone, {0});
  ASSERT_TRUE(m);
  // 40 tokens in micro-batches of 16: the last one (8 tokens) attends to the cache of the first two.
  const std::vector<float> got = prefillOutput(*m, 40, 16);
  ReferenceModel ref(c, 7);
  expectClose(lastRows(ref.forward(40, 0, false), 8, c.hidden), got, "tiny prefill vs host reference");
}

// cuDNN's flash attention and tpscope's kernel give the same prefill at the 8b preset's head geometry,
// over micro-batches whose later ones attend to the earlier ones through the cache.
TEST(Workload, PrefillAttentionCudnnEqualsTheKernel) {
  TPS_REQUIRE_GPUS(1);
  std::string why;
  if (!workload::CudnnAttention::available(&why)) GTEST_SKIP() << why;
  const workload::ModelConfig c = testConfig("8b", 2);
  auto kernel = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7, 1536, 512, workload::PrefillAttention::kKernel);
  auto cudnn = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7, 1536, 512, workload::PrefillAttention::kCudnn);
  ASSERT_TRUE(kernel && cudnn);
  EXPECT_EQ(kernel->options().prefill_attention, workload::PrefillAttention::kKernel);
  EXPECT_EQ(cudnn->options().prefill_attention, workload::PrefillAttention::kCudnn);
  expectClose(prefillOutput(*kernel, 1500, 512), prefillOutput(*cudnn, 1500, 512), "8b x 2 prefill: cudnn vs kernel");
}

TEST(Workload, TinyDecodeMatchesTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  for (bool rope : {true, false}) {
    workload::ModelConfig c = testConfig("tiny");
    c.rope = rope;
    auto m = makeModel(c, SplitMode::kNone, {0});
    ASSERT_TRUE(m);
    // k = 3 tokens verified at context 100 (split-K attention over 2 splits of the cache).
    const std::vector<float> got = decodeOutput(*m, 100, 3);
    ReferenceModel ref(c, 7);
    const std::vector<double> want = ref.forward(3, 100, true);
    expectClose(std::vector<float>(want.begin(), want.end()), got,
                std::string("tiny decode vs host reference, rope ") + (rope ? "on" : "off"));
  }
}

// The decode attention kernel at the presets' head size (128) and at 64, and a step whose rows
// exceed its limit (8 tokens x group 4 = 32 rows: the general kernel), against the reference.
TEST(Workload, DecodeHeadSizesMatchTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  for (auto [head_dim, tokens] : {std::pair{128, 1}, std::pair{128, 4}, std::pair{64, 2}, std::pair{32, 8}}) {
    workload::ModelConfig c = testConfig("tiny");
    c.head_dim = head_dim;
    auto m = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7, 512);
    ASSERT_TRUE(m);
    const std::vector<float> got = decodeOutput(*m, 300, tokens);  // 300 keys: 5 tiles, the last partial
    ReferenceModel ref(c, 7);
    const std::vector<double> want = ref.forward(tokens, 300, true);
    expectClose(std::vector<float>(want.begin(), want.end()), got,
                fmt::format("decode head_dim {} x {} token(s) vs host reference", head_dim, tokens));
  }
}

TEST(Workload, SameSeedSameOutputOtherSeedOther) {
  TPS_REQUIRE_GPUS(1);
  const workload::ModelConfig c = testConfig("tiny");
  auto a = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7);
  auto b = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 7);
  auto other = makeModel(c, SplitMode::kNone, {0}, tpsBackendAuto, 8);
  ASSERT_TRUE(a && b && other);
  const auto x = decodeOutput(*a, 50, 2), y = decodeOutput(*b, 50, 2), z = decodeOutput(*other, 50, 2);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

TEST(Workload, DecodeGraphEqualsEager) {
  TPS_REQUIRE_GPUS(1);
  auto m = makeModel(testConfig("tiny"), SplitMode::kNone, {0});
  ASSERT_TRUE(m);
  const std::vector<float> eager = decodeOutput(*m, 64, 4);
  expectGraphEqualsEager(*m, 64, 4, eager, "none");
}

TEST(Workload, PhasesReportTokensAndSteps) {
  TPS_REQUIRE_GPUS(1);
  auto m = makeModel(testConfig("tiny"), SplitMode::kNone, {0}, tpsBackendAuto, 7, 512, 64);
  ASSERT_TRUE(m);
  workload::PhaseResult p, d;
  std::string reason;
  ASSERT_EQ(workload::runPrefill(*m, {256, 64}, nullptr, &p, &reason), tpsSuccess) << reason;
  EXPECT_EQ(p.steps, 4);
  EXPECT_GT(p.tokens_per_s, 0);
  EXPECT_EQ(p.allreduce_calls, 0u);
  workload::DecodeOptions o;
  o.tokens = 30, o.ctx = 200, o.tokens_per_step = 4, o.accept = 0.5;
  ASSERT_EQ(workload::runDecode(*m, o, nullptr, &d, &reason), tpsSuccess) << reason;
  EXPECT_EQ(d.steps, 12);  // 2.5 tokens per step
  EXPECT_DOUBLE_EQ(d.tokens, 30);
  EXPECT_TRUE(d.graph) << d.graph_note;
  EXPECT_GT(d.ms_per_step, 0);
}

// The decode GEMV against a double host reference: every token count it takes, a row count that is
// not a multiple of its warps per block, and k that leaves a remainder after its unrolled loop.
TEST(Workload, GemvMatchesTheHostReference) {
  TPS_REQUIRE_GPUS(1);
  const int n = 37, k = 8 * 133;
  std::vector<uint16_t> w(size_t(n) * k), x(size_t(workload::kGemvMaxTokens) * k);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    const float v = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return static_cast<uint16_t>(bits >> 16);  // bf16 by truncation: exactly representable
  };
  auto value = [](uint16_t b) {
    const uint32_t bits = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  for (auto& v : w) v = next();
  for (auto& v : x) v = next();
  workload::bf16_t *dw = nullptr, *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, size_t(workload::kGemvMaxTokens) * n * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (int tokens = 1; tokens <= workload::kGemvMaxTokens; ++tokens) {
    ASSERT_TRUE(workload::gemvApplies(dw, dx, k, tokens));
    ASSERT_EQ(workload::launchGemv(dw, dx, dy, n, k, tokens, nullptr), cudaSuccess);
    std::vector<uint16_t> y(size_t(tokens) * n);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0;
    for (int t = 0; t < tokens; ++t)
      for (int r = 0; r < n; ++r) {
        double want = 0;
        for (int i = 0; i < k; ++i) want += value(w[size_t(r) * k + i]) * value(x[size_t(t) * k + i]);
        const double got = value(y[size_t(t) * n + r]);
        worst = std::max(worst, std::abs(got - want) / std::max(1.0, std::abs(want)));
      }
    EXPECT_LT(worst, 1.0 / 128) << tokens << " token(s)";  // bf16 output: 8 significant bits
  }
  // SwiGLU: w as [2 * ffn][k] with ffn = 18 (gate rows 0..17, up rows 18..35), against the reference.
  const int ffn = n / 2;
  for (int tokens : {1, 3, workload::kGemvMaxTokens}) {
    ASSERT_EQ(workload::launchGemvSwiGlu(dw, dx, dy, ffn, k, tokens, nullptr), cudaSuccess);
    std::vector<uint16_t> y(size_t(tokens) * ffn);
    ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0;
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < ffn; ++j) {
        double g = 0, u = 0;
        for (int i = 0; i < k; ++i) {
          g += value(w[size_t(j) * k + i]) * value(x[size_t(t) * k + i]);
          u += value(w[size_t(ffn + j) * k + i]) * value(x[size_t(t) * k + i]);
        }
        const double want = g / (1 + std::exp(-g)) * u;
        worst = std::max(worst, std::abs(value(y[size_t(t) * ffn + j]) - want) / std::max(1.0, std::abs(want)));
      }
    EXPECT_LT(worst, 3.0 / 128) << "SwiGLU, " << tokens << " token(s)";  // three bf16 roundings
  }
  EXPECT_FALSE(workload::gemvApplies(dw, dx, k + 4, 1));  // k not a multiple of 8
  EXPECT_FALSE(workload::gemvApplies(dw, dx, k, workload::kGemvMaxTokens + 1));
  EXPECT_EQ(workload::launchGemv(dw, dx, dy, n, k, 0, nullptr), cudaErrorInvalidValue);
  (void)cudaFree(dw), (void)cudaFree(dx), (void)cudaFree(dy);
}

// The step profile times every op of a forward: each per-layer op appears once per layer, the
// projections carry their weight bytes, and the times are positive.
TEST(Workload, ProfileTimesEveryOp) {
  TPS_REQUIRE_GPUS(1);
  const workload::ModelConfig c = testConfig("tiny");
  auto m = makeModel(c, SplitMode::kNone, {0});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->fillContext(64), tpsSuccess);
  std::vector<std::vector<workload::OpTime>> ops;
  ASSERT_EQ(m->profileForward(2, 64, &ops), tpsSuccess);
  ASSERT_EQ(ops.size(), 1u);
  std::map<std::string, workload::OpTime> by;
  for (const auto& t : ops[0]) by[t.op] = t;
  // Decode-sized: the GEMV with its SwiGLU epilogue, every norm but the first fused with the residual
  // add, and RoPE inside the attention kernel unless the test runs with rope_kernel=kernel.
  const bool rope_inside = testKernels().rope == workload::RopeKernel::kAttention;
  const std::string attention = rope_inside ? "rope + kv store + attention" : "attention";
  for (const std::string& op : {std::string("proj qkv"), attention, std::string("proj o"),
                                std::string("proj gate+up, silu * up"), std::string("proj down")}) {
    ASSERT_TRUE(by.count(op)) << op;
    EXPECT_EQ(by[op].calls, c.layers) << op;
    EXPECT_GT(by[op].us, 0) << op;
  }
  EXPECT_EQ(by["rmsnorm"].calls, 1);
  EXPECT_EQ(by["residual add + rmsnorm"].calls, 2 * c.layers);
  EXPECT_EQ(by.count("rope + kv store"), rope_inside ? 0u : 1u);
  EXPECT_EQ(by["proj down"].bytes, uint64_t(c.layers) * c.hidden * c.ffn * 2);
  EXPECT_EQ(by.count("allreduce"), 0u);
}

TEST(Workload, AModelThatDoesNotFitSaysSo) {
  TPS_REQUIRE_GPUS(1);
  workload::ModelOptions o;
  o.config = testConfig("32b", 640);  // ~580 GiB of weights
  o.devices = {0};
  o.shape = {1024, 1};
  std::unique_ptr<workload::Model> m;
  std::string reason;
  EXPECT_EQ(workload::Model::create(o, &m, &reason), tpsUnavailable);
  EXPECT_NE(reason.find("needs"), std::string::npos) << reason;
  EXPECT_NE(reason.find("GPU 0 has"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tpscope::testing
