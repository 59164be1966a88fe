// SPDX-License-Identifier: Apache-2.0
// workload_test_util.h - building a synthetic model in one split and reading its final hidden states,
// and comparing two sets of hidden states within bf16 tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "workload/model.h"

namespace tpscope::testing {

inline workload::ModelConfig testConfig(const std::string& preset, int layers = 0) {
  workload::ModelConfig c = *workload::presetConfig(preset);
  if (layers > 0) c.layers = layers;
  return c;
}

// The decode kernel choices the workload tests build their models with: the defaults, or what a ctest
// entry names in TPSCOPE_TEST_DECODE_KERNELS ("reduction=plain", "rope_kernel=kernel", comma-separated
// key=value, the `tpscope tp` flags' names and values), so one binary checks every variant against the
// same references. A word it does not know fails the test instead of running the defaults.
inline workload::DecodeKernels testKernels() {
  workload::DecodeKernels k;
  const char* env = std::getenv("TPSCOPE_TEST_DECODE_KERNELS");
  std::string rest = env ? env : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "reduction" && workload::parseReduction(value)) {
      k.reduction = *workload::parseReduction(value);
    } else if (key == "rope_kernel" && workload::parseRopeKernel(value)) {
      k.rope = *workload::parseRopeKernel(value);
    } else if (key == "attention_pdl" && workload::parseAttentionPdl(value)) {
      k.attention_pdl = *workload::parseAttentionPdl(value);
    } else {
      ADD_FAILURE() << "TPSCOPE_TEST_DECODE_KERNELS: \"" << item << "\" is not a decode kernel choice";
    }
  }
  return k;
}

inline std::unique_ptr<workload::Model> makeModel(
    const workload::ModelConfig& c, workload::SplitMode split, std::vector<int> devices,
    tpsBackend_t backend = tpsBackendAuto, uint64_t seed = 7, int ctx = 256, int max_tokens = 64,
    workload::PrefillAttention attention = workload::PrefillAttention::kAuto, bool shared_devices = false) {
  workload::ModelOptions o;
  o.config = c, o.split = split, o.devices = devices, o.backend = backend, o.seed = seed;
  o.prefill_attention = attention;
  o.shared_devices = shared_devices;
  o.kernels = testKernels();
  o.shape.ctx_capacity = ctx, o.shape.max_tokens = max_tokens;
  std::unique_ptr<workload::Model> m;
  std::string reason;
  const tpsResult_t r = workload::Model::create(o, &m, &reason);
  EXPECT_EQ(r, tpsSuccess) << reason;
  return m;
}

// The final hidden states of the last micro-batch of a prefill of `prompt` tokens in `ubatch` steps.
inline std::vector<float> prefillOutput(workload::Model& m, int prompt, int ubatch) {
  std::vector<float> out;
  EXPECT_EQ(m.prefill(prompt, ubatch), tpsSuccess);
  const int last = prompt - (prompt - 1) / ubatch * ubatch;
  EXPECT_EQ(m.readOutput(last, &out), tpsSuccess);
  return out;
}

// One decode step of k tokens over a generated context of `ctx` positions.
inline std::vector<float> decodeOutput(workload::Model& m, int ctx, int k) {
  std::vector<float> out;
  EXPECT_EQ(m.fillContext(ctx), tpsSuccess);
  EXPECT_EQ(m.forward(k, ctx), tpsSuccess);
  EXPECT_EQ(m.readOutput(k, &out), tpsSuccess);
  return out;
}

// A decode graph captured at (k tokens, position ctx) compared with `eager`, the eager step's output:
// first an eager step at a later position (which the captured step does not attend to) overwrites the
// output with something else, so a graph that ran nothing cannot pass.
inline void expectGraphEqualsEager(workload::Model& m, int ctx, int k, const std::vector<float>& eager,
                                   const std::string& what) {
  cudaGraphExec_t exec = nullptr;
  std::string why;
  ASSERT_EQ(m.captureForward(k, ctx, &exec, &why), tpsSuccess) << what << ": " << why;
  ASSERT_EQ(m.forward(k, ctx + k), tpsSuccess) << what;
  std::vector<float> poisoned;
  ASSERT_EQ(m.readOutput(k, &poisoned), tpsSuccess) << what;
  ASSERT_NE(poisoned, eager) << what << ": the step at another position gave the same output";
  ASSERT_EQ(m.launch(exec), tpsSuccess) << what;
  std::vector<float> graph;
  ASSERT_EQ(m.readOutput(k, &graph), tpsSuccess) << what;
  (void)cudaGraphExecDestroy(exec);
  EXPECT_EQ(eager, graph) << what;
}

// Within bf16 tolerance: the RMS of the difference at most 2 % of the reference's RMS (a few bf16
// rounding steps per layer, compounded), and no element off by more than 0.25 (outputs are RMS-normed,
// so O(1)). Also checks the values are finite and not all zero, so a dead model cannot pass.
inline void expectClose(const std::vector<float>& ref, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  ASSERT_FALSE(ref.empty()) << what;
  double se = 0, sr = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ref[i]) && std::isfinite(got[i])) << what << " element " << i;
    const double d = static_cast<double>(got[i]) - ref[i];
    se += d * d, sr += static_cast<double>(ref[i]) * ref[i];
    worst = std::max(worst, std::fabs(d));
  }
  ASSERT_GT(sr / ref.size(), 0.1) << what << ": the reference is nearly zero";
  const double rel = std::sqrt(se / sr);
  EXPECT_LT(rel, 0.02) << what << ": relative RMS error " << rel;
  EXPECT_LT(worst, 0.25) << what << ": max abs error " << worst;
  std::printf("[ info ] %s: relative RMS error %.2e, max abs error %.3g\n", what.c_str(), rel, worst);
}

// One split compared with `none`: its name in messages, how it splits, and over which GPUs.
struct SplitCase {
  const char* name;
  workload::SplitMode split;
  tpsBackend_t backend;
  std::vector<int> devices;
};

// Each case's final hidden states against `none`'s on GPU 0, within bf16 tolerance: after a prefill of
// `prompt` tokens in micro-batches of `ubatch`, and after a decode step of k tokens at context ctx; same
// seed, shape and prefill attention (kAuto: whichever the machine has; an explicit one is checked to be
// what ran). `shared`: the cases' positions may share a GPU (ModelOptions::shared_devices).
inline void expectSplitsEqualNone(const workload::ModelConfig& c, const std::vector<SplitCase>& cases,
                                  workload::PrefillAttention attention, bool shared, int prompt, int ubatch, int ctx,
                                  int k) {
  const bool given = attention != workload::PrefillAttention::kAuto;
  const int cap = std::max(prompt, ctx + k);
  const std::string tag = c.preset + " x " + std::to_string(c.layers) + " layers, " +
                          workload::prefillAttentionName(attention) + " attention: ";
  auto none = makeModel(c, workload::SplitMode::kNone, {0}, tpsBackendAuto, 7, cap, ubatch, attention);
  ASSERT_TRUE(none);
  if (given) ASSERT_EQ(none->options().prefill_attention, attention);
  const auto ref_prefill = prefillOutput(*none, prompt, ubatch);
  const auto ref_decode = decodeOutput(*none, ctx, k);
  none.reset();
  for (const SplitCase& cs : cases) {
    const std::string what = tag + cs.name + " on GPUs " + ::testing::PrintToString(cs.devices);
    auto m = makeModel(c, cs.split, cs.devices, cs.backend, 7, cap, ubatch, attention, shared);
    if (!m) {
      ADD_FAILURE() << what << ": cannot build the model";
      continue;
    }
    if (given) EXPECT_EQ(m->options().prefill_attention, attention) << what;
    expectClose(ref_prefill, prefillOutput(*m, prompt, ubatch), what + " prefill vs none");
    expectClose(ref_decode, decodeOutput(*m, ctx, k), what + " decode vs none");
  }
}

}  // namespace tpscope::testing
