// SPDX-License-Identifier: Apache-2.0
// llama_x2_spec_test - examples/llama-x2-arms.toml, the two-GPU round's llama-server arms, loads and its arms
// differ in nothing but their declared delta, so the guards will not stop it on the GPU machine.
#include <gtest/gtest.h>

#include <string>

#include "experiment/guards.h"
#include "experiment/spec.h"

namespace tpscope::experiment {
namespace {

TEST(LlamaX2Spec, ArmsAndTheirAllReduce) {
  const ExperimentSpec s = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/llama-x2-arms.toml");
  ASSERT_EQ(s.arms.size(), 7u);
  const char* names[] = {"A", "B", "C", "C-nccl", "C-tpscope-host", "C-tpscope-p2p", "C'"};
  for (size_t i = 0; i < s.arms.size(); ++i) EXPECT_EQ(s.arms[i].name, names[i]);
  const std::vector<EffectiveSettings> eff = effectiveSettings(s);
  ASSERT_EQ(eff.size(), 7u);
  struct Want {
    size_t arm;
    const char* key;
    const char* value;
  };
  const Want wants[] = {{0, "devices", "0"},
                        {1, "split", "layer"},
                        {2, "split", "tensor"},
                        {2, "allreduce", "internal"},
                        {3, "allreduce", "nccl"},
                        {4, "allreduce", "tpscope"},
                        {4, "tpscope_backend", "host"},
                        {5, "tpscope_backend", "p2p"},
                        {6, "draft", "self"}};
  for (const Want& w : wants) EXPECT_EQ(eff[w.arm].value(w.key), w.value) << names[w.arm] << " " << w.key;
  const std::string model = s.shared.engine.model;
  EXPECT_EQ(model.substr(model.size() - std::string("models/tpscope-8b-q4_k.gguf").size()),
            "models/tpscope-8b-q4_k.gguf");
  EXPECT_TRUE(undeclaredDifferences(eff).empty()) << formatDifferences(undeclaredDifferences(eff));
}

}  // namespace
}  // namespace tpscope::experiment
