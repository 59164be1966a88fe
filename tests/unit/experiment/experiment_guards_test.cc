// SPDX-License-Identifier: Apache-2.0
// Guards: effective settings per arm, undeclared differences, availability.
#include <gtest/gtest.h>

#include "experiment/guards.h"
#include "experiment/spec.h"
#include "fixtures.h"

namespace tpscope::experiment {
namespace {

ExperimentSpec fourArms() { return loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/four-arms.toml"); }

Availability h200Box() {
  Availability a;
  a.gpu_count = 2;
  a.backends = {tpsBackendHost, tpsBackendP2p, tpsBackendNccl};
  a.split_modes = {"none", "layer", "tensor"};
  return a;
}

TEST(ExperimentGuards, EffectiveSettingsCoverUndeclaredSettings) {
  const auto eff = effectiveSettings(fourArms());
  ASSERT_EQ(eff.size(), 4u);
  const EffectiveSettings& a = eff[0];
  EXPECT_EQ(a.arm, "A");
  EXPECT_EQ(a.value("devices"), "0");
  EXPECT_EQ(a.value("split"), "none");
  EXPECT_EQ(a.value("allreduce_backend"), "none");
  EXPECT_EQ(a.value("backend"), "auto");
  EXPECT_EQ(a.find("backend")->source, SettingSource::kDefault);
  EXPECT_EQ(a.value("context"), "16384");
  EXPECT_EQ(a.find("context")->source, SettingSource::kDefault);  // the spec states the default value
  EXPECT_EQ(a.value("prompt_tokens"), "8192");
  EXPECT_EQ(a.find("prompt_tokens")->source, SettingSource::kShared);
  EXPECT_EQ(a.value("baseline_retries"), "2");
  EXPECT_EQ(eff[1].value("allreduce_backend"), "none");  // layer split: no AllReduce
  EXPECT_EQ(eff[2].value("allreduce_backend"), "host");
  EXPECT_EQ(eff[2].find("backend")->source, SettingSource::kArm);
  EXPECT_EQ(eff[3].value("expected_tokens_per_step"), "2.8");
  EXPECT_EQ(eff[3].value("gpu_count"), "2");
}

// Every synthetic arm carries the decode kernel choices, the model's defaults unless the spec names them;
// arms may differ in them when they declare it.
TEST(ExperimentGuards, DecodeKernelChoicesAreSettingsArmsMayDeclare) {
  const std::vector<EffectiveSettings> defaults = effectiveSettings(fourArms());
  for (const EffectiveSettings& e : defaults) {
    EXPECT_EQ(e.value("reduction"), "pushed") << e.arm;
    EXPECT_EQ(e.value("rope_kernel"), "attention") << e.arm;
    EXPECT_EQ(e.value("attention_pdl"), "auto") << e.arm;
    EXPECT_EQ(e.find("reduction")->source, SettingSource::kDefault) << e.arm;
  }
  const ExperimentSpec spec = parseSpec(
      "[experiment]\nrope_kernel = \"kernel\"\n"
      "[[arm]]\nname = \"pushed\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
      "[[arm]]\nname = \"plain\"\ndevices = [0, 1]\nsplit = \"tensor\"\nreduction = \"plain\"\nattention_pdl = "
      "\"off\"\n",
      "spec.toml");
  const std::vector<EffectiveSettings> eff = effectiveSettings(spec);
  ASSERT_EQ(eff.size(), 2u);
  EXPECT_EQ(eff[0].value("reduction"), "pushed");
  EXPECT_EQ(eff[1].value("reduction"), "plain");
  EXPECT_EQ(eff[1].find("reduction")->source, SettingSource::kArm);
  EXPECT_EQ(eff[1].value("attention_pdl"), "off");
  EXPECT_EQ(eff[0].value("rope_kernel"), "kernel");
  EXPECT_EQ(eff[0].find("rope_kernel")->source, SettingSource::kShared);
  EXPECT_TRUE(undeclaredDifferences(eff).empty()) << formatDifferences(undeclaredDifferences(eff));
}

// The wire is a setting of every arm (exact unless the spec names one), part of what the guards compare;
// arms that declare different wires differ as declared, and a wire an arm does not declare is the shared one.
TEST(ExperimentGuards, TheWireIsADeclaredSetting) {
  for (const EffectiveSettings& e : effectiveSettings(fourArms())) {
    EXPECT_EQ(e.value("wire"), "exact") << e.arm;
    EXPECT_EQ(e.find("wire")->source, SettingSource::kDefault) << e.arm;
  }
  const std::vector<EffectiveSettings> eff =
      effectiveSettings(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/wires.toml"));
  ASSERT_GE(eff.size(), 3u);
  EXPECT_EQ(eff[0].value("wire"), "exact");
  EXPECT_EQ(eff[1].value("wire"), "int8");
  EXPECT_EQ(eff[1].find("wire")->source, SettingSource::kArm);
  EXPECT_TRUE(undeclaredDifferences(eff).empty()) << formatDifferences(undeclaredDifferences(eff));
  // Decided behind the arm's back, a wire is an undeclared difference like any delta key.
  const AutoDecider sneaky = [](const EffectiveSettings& e) {
    if (e.arm == "C") return std::vector<Setting>{{"wire", "fp8", {}}};
    return std::vector<Setting>{};
  };
  const auto diffs = undeclaredDifferences(effectiveSettings(fourArms(), sneaky));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].setting, "wire");
  // llama-server: the wire under allreduce = "tpscope" (TPSCOPE_WIRE), "none" under any other.
  const ExperimentSpec server = parseSpec(
      "[experiment]\nengine = \"llama-server\"\nmodel = \"m.gguf\"\n"
      "[[arm]]\nname = \"n\"\nallreduce = \"nccl\"\n"
      "[[arm]]\nname = \"t\"\nallreduce = \"tpscope\"\n"
      "[[arm]]\nname = \"t8\"\nallreduce = \"tpscope\"\nwire = \"int8\"\n",
      "spec.toml");
  const std::vector<EffectiveSettings> se = effectiveSettings(server);
  EXPECT_EQ(se[0].value("wire"), "none");
  EXPECT_EQ(se[1].value("wire"), "exact");
  EXPECT_EQ(se[2].value("wire"), "int8");
}

TEST(ExperimentGuards, StudyArmsDifferOnlyInTheirDelta) {
  EXPECT_TRUE(undeclaredDifferences(effectiveSettings(fourArms())).empty());
  EXPECT_TRUE(
      undeclaredDifferences(effectiveSettings(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/backends.toml")))
          .empty());
}

// An undeclared difference, as in the seed study: --fit is on by default and tensor split ignores it, so A and B were
// auto-tuned and C was not. A decider that does the same must stop the run with the difference shown.
TEST(ExperimentGuards, AutomaticDecisionThatDiffersPerArmIsRefused) {
  const AutoDecider fit = [](const EffectiveSettings& e) {
    return std::vector<Setting>{{"fit", e.value("split") == "tensor" ? "off (not implemented for tensor)" : "on", {}},
                                {"dtype", "bf16", {}}};
  };
  const auto eff = effectiveSettings(fourArms(), fit);
  EXPECT_EQ(eff[0].find("fit")->source, SettingSource::kAuto);
  const auto diffs = undeclaredDifferences(eff);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].setting, "fit");
  ASSERT_EQ(diffs[0].values.size(), 4u);
  EXPECT_EQ(diffs[0].values[2], (std::pair<std::string, std::string>{"C", "off (not implemented for tensor)"}));
  const std::string table = formatDifferences(diffs);
  EXPECT_EQ(table,
            "setting  arm  value                             source\n"
            "fit      A    on                                auto\n"
            "         B    on                                auto\n"
            "         C    off (not implemented for tensor)  auto\n"
            "         C'   off (not implemented for tensor)  auto\n"
            "Arms must differ only in what they declare (devices, split, backend, wire, tokens_per_step, acceptance, "
            "reduction, rope_kernel, attention_pdl): set the differing settings explicitly in [experiment] so every "
            "arm runs them the same way.\n");
}

TEST(ExperimentGuards, SettingOnlySomeArmsHaveIsADifference) {
  const AutoDecider graphs = [](const EffectiveSettings& e) {
    if (e.arm == "B") return std::vector<Setting>{{"cuda_graph", "on", {}}};
    return std::vector<Setting>{};
  };
  const auto diffs = undeclaredDifferences(effectiveSettings(fourArms(), graphs));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].values[0].second, "(unset)");
  EXPECT_EQ(diffs[0].values[1].second, "on");
}

TEST(ExperimentGuards, AutoResolvedDeltaKeyIsStillChecked) {
  // A decider that rewrites a declared key (e.g. split) behind the arm's back is caught too.
  const AutoDecider sneaky = [](const EffectiveSettings& e) {
    if (e.arm == "C") return std::vector<Setting>{{"tokens_per_step", "2", {}}};
    return std::vector<Setting>{};
  };
  const auto diffs = undeclaredDifferences(effectiveSettings(fourArms(), sneaky));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].setting, "tokens_per_step");
}

TEST(ExperimentGuards, AllAvailableOnTwoH200) {
  EXPECT_TRUE(checkAvailability(effectiveSettings(fourArms()), h200Box()).empty());
}

// Availability, as in the seed study: -sm row listed in help, its code removed.
TEST(ExperimentGuards, SplitModeNotImplementedIsRefusedUpFront) {
  const auto spec = parseSpec("[[arm]]\nname = \"R\"\ndevices = [0, 1]\nsplit = \"row\"\n[[arm]]\nname = \"A\"\n");
  const auto refused = checkAvailability(effectiveSettings(spec), h200Box());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].arm, "R");
  EXPECT_EQ(refused[0].reason,
            "split mode \"row\" is not implemented in this build (implemented: none, layer, tensor)");
}

TEST(ExperimentGuards, UnavailableBackendAndMissingGpusAreRefused) {
  Availability box = h200Box();
  box.backends = {tpsBackendHost};
  box.backend_reasons[tpsBackendP2p] = "GPU 0 cannot access GPU 1 as a peer (PHB)";
  const auto spec = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/backends.toml");
  const auto refused = checkAvailability(effectiveSettings(spec), box);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0].arm, "p2p");
  EXPECT_EQ(refused[0].reason,
            "AllReduce backend \"p2p\" is not available here: GPU 0 cannot access GPU 1 as a peer (PHB)");
  EXPECT_EQ(refused[1].reason, "AllReduce backend \"nccl\" is not available here");
  Availability one = h200Box();
  one.gpu_count = 1;
  const auto r1 = checkAvailability(effectiveSettings(fourArms()), one);
  ASSERT_EQ(r1.size(), 3u);
  EXPECT_EQ(r1[0].arm, "B");
  EXPECT_EQ(r1[0].reason, "devices 0,1 need GPU 1, this box has 1 GPU");
}

TEST(ExperimentGuards, UnknownPresetRefusedWhenPresetsAreKnown) {
  Availability box = h200Box();
  box.presets = {"tiny", "70b"};
  const auto refused = checkAvailability(effectiveSettings(fourArms()), box);
  ASSERT_EQ(refused.size(), 4u);
  EXPECT_EQ(refused[0].reason, "preset \"8b\" is unknown (known: tiny, 70b)");
}

// The meter's source is a shared setting every arm carries (the guards compare it, the manifest records
// it); PM's interval joins it where PM samples.
TEST(ExperimentGuards, MeterSourceAndPmIntervalAreRecorded) {
  const auto nvml = effectiveSettings(fourArms());
  ASSERT_TRUE(nvml[0].find("meter_source"));
  EXPECT_EQ(nvml[0].value("meter_source"), "nvml");
  EXPECT_EQ(nvml[0].find("meter_source")->source, SettingSource::kDefault);
  EXPECT_FALSE(nvml[0].find("pm_interval_us"));  // nothing samples at an interval
  const auto pm = effectiveSettings(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/pm-step.toml"));
  ASSERT_EQ(pm.size(), 2u);
  for (const EffectiveSettings& e : pm) {
    ASSERT_TRUE(e.find("meter_source") && e.find("pm_interval_us")) << e.arm;
    EXPECT_EQ(e.value("meter_source"), "pm");
    EXPECT_EQ(e.find("meter_source")->source, SettingSource::kShared);
    EXPECT_EQ(e.value("pm_interval_us"), "10");
    EXPECT_EQ(e.find("pm_interval_us")->source, SettingSource::kShared);
  }
  EXPECT_TRUE(undeclaredDifferences(pm).empty());
  const auto both = effectiveSettings(parseSpec("[experiment]\nmeter_source = \"both\"\n[[arm]]\nname = \"A\"\n"));
  ASSERT_TRUE(both[0].find("pm_interval_us"));
  EXPECT_EQ(both[0].value("pm_interval_us"), "100");
  EXPECT_EQ(both[0].find("pm_interval_us")->source, SettingSource::kDefault);
}

// Positions that share a GPU run on host staging only, on a box of one GPU too (where the media's check,
// which wants two GPUs, lists no backend).
TEST(ExperimentGuards, PositionsSharingAGpuRunOnHostStagingOnly) {
  Availability one;
  one.gpu_count = 1;
  one.split_modes = {"none", "layer", "tensor"};
  one.backend_reasons[tpsBackendHost] = "an AllReduce needs 2 or more GPUs; this selection has 1";
  one.host_on_shared_gpu = true;
  const auto spec = parseSpec(
      "[experiment]\ndevices = [0, 0]\nsplit = \"tensor\"\n[[arm]]\nname = \"host\"\nbackend = \"host\"\n"
      "[[arm]]\nname = \"p2p\"\nbackend = \"p2p\"\n[[arm]]\nname = \"auto\"\n");
  const auto refused = checkAvailability(effectiveSettings(spec), one);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0].arm, "p2p");
  EXPECT_EQ(refused[0].reason.rfind("devices 0,0 share a GPU, which runs AllReduce backend \"host\" only (not "
                                    "\"p2p\")",
                                    0),
            0u)
      << refused[0].reason;
  EXPECT_EQ(refused[1].arm, "auto");
  one.host_on_shared_gpu = false;  // GPUs that cannot map pinned host memory
  const auto r2 =
      checkAvailability(effectiveSettings(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/pm-step.toml")), one);
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_EQ(r2[0].reason,
            "AllReduce backend \"host\" cannot run positions that share a GPU here: an AllReduce needs 2 or more "
            "GPUs; this selection has 1");
  one.host_on_shared_gpu = true;
  EXPECT_TRUE(
      checkAvailability(effectiveSettings(loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/pm-step.toml")), one)
          .empty());
}

}  // namespace
}  // namespace tpscope::experiment
