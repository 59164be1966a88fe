// SPDX-License-Identifier: Apache-2.0
// workload_config_test - presets, overrides, validation and the memory estimate of the synthetic
// transformer (src/workload/model_config.h), all host-side.
#include <gtest/gtest.h>

#include <algorithm>

#include "workload/kernels.h"
#include "workload/model_config.h"

namespace tpscope::workload {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

TEST(WorkloadConfig, PresetsMatchThePublicShapes) {
  auto p8 = presetConfig("8b");
  ASSERT_TRUE(p8);
  EXPECT_EQ(p8->hidden, 4096);
  EXPECT_EQ(p8->ffn, 12288);
  EXPECT_EQ(p8->layers, 36);
  EXPECT_EQ(p8->q_heads, 32);
  EXPECT_EQ(p8->kv_heads, 8);
  EXPECT_EQ(p8->head_dim, 128);
  auto p32 = presetConfig("32b");
  ASSERT_TRUE(p32);
  EXPECT_EQ(p32->hidden, 5120);
  EXPECT_EQ(p32->ffn, 25600);
  EXPECT_EQ(p32->layers, 64);
  EXPECT_EQ(p32->q_heads, 64);
  EXPECT_EQ(p32->kv_heads, 8);
  auto tiny = presetConfig("tiny");
  ASSERT_TRUE(tiny);
  EXPECT_EQ(validateConfig(*tiny, SplitMode::kTensor, 2), "");
  EXPECT_FALSE(presetConfig("70b"));
  EXPECT_EQ(presetNames().size(), 3u);
}

TEST(WorkloadConfig, ParameterCountsAreThoseOfTheModelClass) {
  // 8b without embeddings: 36 x (4096 x (4096 + 2 x 1024) + 4096 x 4096 + 3 x 4096 x 12288 + 2 x 4096) + 4096
  const ModelConfig c = *presetConfig("8b");
  EXPECT_EQ(layerWeightElements(c), 4096ull * 6144 + 4096ull * 4096 + 3ull * 4096 * 12288 + 2 * 4096);
  EXPECT_EQ(modelWeightElements(c), 36 * layerWeightElements(c) + 4096);
  EXPECT_NEAR(weightBytesPerForward(c) / 1e9, 13.89, 0.01);  // ~6.9B parameters outside the embeddings
  const ModelConfig b = *presetConfig("32b");
  EXPECT_NEAR(modelWeightElements(b) / 1e9, 31.2, 0.5);
}

TEST(WorkloadConfig, ValidationNamesWhatToChange) {
  ModelConfig c = *presetConfig("tiny");
  EXPECT_EQ(validateConfig(c, SplitMode::kNone, 1), "");
  EXPECT_NE(validateConfig(c, SplitMode::kNone, 2).find("one GPU"), std::string::npos);
  EXPECT_NE(validateConfig(c, SplitMode::kLayer, 1).find("at least 2"), std::string::npos);
  EXPECT_NE(validateConfig(c, SplitMode::kTensor, 3).find("divisible by 3"), std::string::npos);
  EXPECT_EQ(validateConfig(c, SplitMode::kLayer, 4), "");
  EXPECT_NE(validateConfig(c, SplitMode::kLayer, 5).find("at least 5 layers"), std::string::npos);
  EXPECT_NE(validateConfig(c, SplitMode::kLayer, 9).find("at most 8"), std::string::npos);
  ModelConfig bad = c;
  bad.kv_heads = 3;
  EXPECT_NE(validateConfig(bad, SplitMode::kNone, 1).find("multiple of kv_heads"), std::string::npos);
  bad = c;
  bad.head_dim = 33;
  EXPECT_NE(validateConfig(bad, SplitMode::kNone, 1).find("head_dim"), std::string::npos);
  bad.head_dim = 512;
  EXPECT_NE(validateConfig(bad, SplitMode::kNone, 1).find("at most 256"), std::string::npos);
  bad = c;
  bad.layers = 0;
  EXPECT_NE(validateConfig(bad, SplitMode::kNone, 1).find("layers must be positive"), std::string::npos);
  // 8 KV heads split 2 and 4 ways, not 16.
  const ModelConfig p8 = *presetConfig("8b");
  EXPECT_EQ(validateConfig(p8, SplitMode::kTensor, 4), "");
  EXPECT_EQ(validateConfig(p8, SplitMode::kTensor, 8), "");
}

TEST(WorkloadConfig, LayerRangesCoverEveryLayerOnce) {
  for (int layers : {2, 5, 36, 64, 67})
    for (int n = 1; n <= 8 && n <= layers; ++n) {
      int next = 0;
      for (int r = 0; r < n; ++r) {
        const LayerRange lr = layerRange(layers, n, r);
        EXPECT_EQ(lr.first, next);
        EXPECT_GE(lr.last - lr.first, layers / n);
        EXPECT_LE(lr.last - lr.first, layers / n + 1);
        next = lr.last;
      }
      EXPECT_EQ(next, layers);
    }
}

TEST(WorkloadConfig, MemoryEstimateSplitsWeightsAndCache) {
  const ModelConfig c = *presetConfig("32b");
  const RunShape shape{4096 + 8, 512};
  const auto none = estimateMemory(c, SplitMode::kNone, 1, shape);
  const auto layer = estimateMemory(c, SplitMode::kLayer, 2, shape);
  const auto tensor = estimateMemory(c, SplitMode::kTensor, 2, shape);
  ASSERT_EQ(none.size(), 1u);
  ASSERT_EQ(layer.size(), 2u);
  ASSERT_EQ(tensor.size(), 2u);
  EXPECT_EQ(none[0].weights, weightBytesPerForward(c));
  // KV: 2 (K, V) x 64 layers x 8 heads x 128 x 4104 positions x 2 bytes.
  EXPECT_EQ(none[0].kv_cache, 2ull * 64 * 8 * 128 * 4104 * 2);
  EXPECT_EQ(layer[0].weights + layer[1].weights, none[0].weights + c.hidden * 2);  // final norm on both
  EXPECT_EQ(layer[0].kv_cache + layer[1].kv_cache, none[0].kv_cache);
  EXPECT_EQ(tensor[0].kv_cache * 2, none[0].kv_cache);
  // Tensor halves everything but the replicated norms.
  EXPECT_NEAR(static_cast<double>(tensor[0].weights) * 2 / none[0].weights, 1.0, 1e-3);
  EXPECT_LT(tensor[0].activations, none[0].activations);
  EXPECT_GT(none[0].total(), 59 * kGiB);  // 58.1 GiB weights, 1.0 GiB KV, ~0.2 GiB activations
  EXPECT_LT(none[0].total(), 60 * kGiB);
}

TEST(WorkloadConfig, CheckFitSaysWhatIsNeededAndWhatIsFree) {
  const ModelConfig c = *presetConfig("32b");
  const RunShape shape{1024, 1};
  const auto need = estimateMemory(c, SplitMode::kNone, 1, shape);
  EXPECT_EQ(checkFit(c, SplitMode::kNone, need, {140 * kGiB}, {0}), "");
  const std::string no = checkFit(c, SplitMode::kNone, need, {40 * kGiB}, {3});
  EXPECT_NE(no.find("preset 32b needs"), std::string::npos) << no;
  EXPECT_NE(no.find("split none"), std::string::npos) << no;
  EXPECT_NE(no.find("GPU 3 has 40.0 GiB free"), std::string::npos) << no;
  // The 5 % margin: exactly the estimate is not enough.
  EXPECT_NE(checkFit(c, SplitMode::kNone, need, {need[0].total()}, {0}), "");
  const auto two = estimateMemory(c, SplitMode::kTensor, 2, shape);
  EXPECT_NE(checkFit(c, SplitMode::kTensor, two, {140 * kGiB, 10 * kGiB}, {0, 1}).find("GPU 1 has"), std::string::npos);
}

TEST(WorkloadConfig, OverridesChangeDimensionsAndMarkThePreset) {
  ModelConfig c = *presetConfig("8b");
  EXPECT_EQ(applyOverrides("layers=2,rope=0", &c), "");
  EXPECT_EQ(c.layers, 2);
  EXPECT_FALSE(c.rope);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.preset, "8b+custom");
  EXPECT_EQ(applyOverrides("", &c), "");
  EXPECT_NE(applyOverrides("layers", &c).find("name=value"), std::string::npos);
  EXPECT_NE(applyOverrides("depth=3", &c).find("unknown dimension 'depth'"), std::string::npos);
  EXPECT_NE(applyOverrides("hidden=big", &c).find("bad value"), std::string::npos);
  EXPECT_NE(applyOverrides("hidden=-4", &c).find("bad value"), std::string::npos);
}

TEST(WorkloadConfig, SplitModeNamesRoundTrip) {
  for (SplitMode m : {SplitMode::kNone, SplitMode::kLayer, SplitMode::kTensor})
    EXPECT_EQ(parseSplitMode(splitModeName(m)), m);
  EXPECT_FALSE(parseSplitMode("row"));
}

// The decode kernel choices print as the `tpscope tp` flags spell them, and parse back.
TEST(WorkloadConfig, DecodeKernelNamesAreTheFlagValues) {
  EXPECT_STREQ(reductionName(Reduction::kPushed), "pushed");
  EXPECT_STREQ(reductionName(Reduction::kFused), "fused");
  EXPECT_STREQ(reductionName(Reduction::kPlain), "plain");
  EXPECT_EQ(parseReduction("plain"), Reduction::kPlain);
  EXPECT_FALSE(parseReduction("push"));
  EXPECT_STREQ(ropeKernelName(RopeKernel::kAttention), "attention");
  EXPECT_EQ(parseRopeKernel("kernel"), RopeKernel::kKernel);
  EXPECT_FALSE(parseRopeKernel("on"));
  EXPECT_STREQ(attentionPdlName(AttentionPdl::kOff), "off");
  EXPECT_EQ(parseAttentionPdl("auto"), AttentionPdl::kAuto);
  EXPECT_FALSE(parseAttentionPdl("1"));
  EXPECT_EQ(parsePrefillAttention("cudnn"), PrefillAttention::kCudnn);
  EXPECT_STREQ(prefillAttentionName(PrefillAttention::kKernel), "kernel");
  const DecodeKernels defaults;
  EXPECT_EQ(defaults.reduction, Reduction::kPushed);
  EXPECT_EQ(defaults.rope, RopeKernel::kAttention);
  EXPECT_EQ(defaults.attention_pdl, AttentionPdl::kAuto);
}

// auto: on, except a tensor slice of a model whose GQA groups hold 8 or more query heads; an explicit
// choice stays.
TEST(WorkloadConfig, AttentionPdlAutoIsOffOnlyForTensorSlicesWithLargeGroups) {
  ModelConfig c = *presetConfig("8b");  // 32 / 8 heads: groups of 4
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kAuto, c, SplitMode::kTensor, 2), AttentionPdl::kOn);
  c.q_heads = 64;  // groups of 8
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kAuto, c, SplitMode::kTensor, 2), AttentionPdl::kOff);
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kAuto, c, SplitMode::kNone, 1), AttentionPdl::kOn);
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kAuto, c, SplitMode::kLayer, 2), AttentionPdl::kOn);
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kOn, c, SplitMode::kTensor, 2), AttentionPdl::kOn);
  EXPECT_EQ(resolveAttentionPdl(AttentionPdl::kOff, c, SplitMode::kNone, 1), AttentionPdl::kOff);
}

}  // namespace
}  // namespace tpscope::workload

namespace tpscope::testing {
namespace {

// The decode attention's slices: whole tiles of 64 keys, every key in some slice (the kernel divides
// the tiles as ceil(tiles / splits) per slice), at most kMaxDecodeSplits, no empty slice, at least
// half the slices asked for; and the scratch holds every (token, head, split) of either path.
TEST(WorkloadKernels, DecodeSplitsCoverEveryKeyAndFitTheScratch) {
  for (int kv_heads : {1, 2, 4, 8}) {
    for (int keys : {1, 63, 64, 65, 300, 4097, 16385, 131073}) {
      const int splits = workload::attentionDecodeSplits(kv_heads, keys);
      const int tiles = (keys + 63) / 64;
      ASSERT_GE(splits, 1);
      EXPECT_LE(splits, workload::kMaxDecodeSplits);
      EXPECT_LE(splits, tiles) << "a slice without keys";
      const int per = (tiles + splits - 1) / splits;
      EXPECT_GE(per * splits, tiles) << kv_heads << " KV heads, " << keys << " keys";
      EXPECT_LT((splits - 1) * per, tiles) << "the last slice is empty";
      // At least half the slices asked for (about 1024 blocks, at most kMaxDecodeSplits per KV head):
      // whole tiles per slice round the count down by less than half.
      const int want = std::min(1024 / kv_heads, workload::kMaxDecodeSplits);
      EXPECT_GE(2 * splits, std::min(tiles, want)) << kv_heads << " KV heads, " << keys << " keys";
      for (int tokens : {1, 4, 8}) {
        const int q_heads = 4 * kv_heads, d = 128;
        const int64_t need_decode = int64_t(tokens) * q_heads * splits * (d + 2);
        const int64_t need_general =
            int64_t(tokens) * q_heads * workload::attentionSplits(tokens, q_heads, keys) * (d + 2);
        EXPECT_GE(workload::attentionScratchFloats(tokens, q_heads, d), std::max(need_decode, need_general));
      }
    }
  }
}

}  // namespace
}  // namespace tpscope::testing
