// SPDX-License-Identifier: Apache-2.0
// Experiment specs: the shipped examples parse, and every way a spec can be wrong names its line.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "experiment/spec.h"

namespace tpscope::experiment {
namespace {

const std::string kArms = R"(
[[arm]]
name = "A"
devices = [0]
split = "none"

[[arm]]
name = "B"
devices = [0, 1]
split = "layer"
)";

// The error's line and a piece of its message.
void expectError(const std::string& text, int line, const std::string& part) {
  try {
    parseSpec(text, "spec.toml");
    FAIL() << "accepted:\n" << text;
  } catch (const SpecError& e) {
    EXPECT_EQ(e.line, line) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    if (line > 0) EXPECT_EQ(std::string(e.what()).rfind("spec.toml:" + std::to_string(line) + ": ", 0), 0u) << e.what();
  }
}

TEST(ExperimentSpec, FourArmsExampleReproducesTheStudy) {
  const ExperimentSpec s = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/four-arms.toml");
  EXPECT_EQ(s.name, "four-arms");
  EXPECT_EQ(s.shared.preset, "8b");
  EXPECT_EQ(s.shared.context, 16384);
  EXPECT_EQ(s.shared.repetitions, 3);
  EXPECT_DOUBLE_EQ(s.shared.idle_seconds, 8);
  EXPECT_EQ(s.shared.phases, (std::vector<std::string>{"prefill", "decode"}));
  ASSERT_EQ(s.arms.size(), 4u);
  EXPECT_EQ(s.arms[0].name, "A");
  EXPECT_EQ(*s.arms[0].delta.split, SplitMode::kNone);
  EXPECT_EQ(*s.arms[0].delta.devices, std::vector<int>{0});
  EXPECT_EQ(*s.arms[1].delta.split, SplitMode::kLayer);
  EXPECT_FALSE(s.arms[1].delta.backend);
  EXPECT_EQ(*s.arms[2].delta.split, SplitMode::kTensor);
  EXPECT_EQ(*s.arms[2].delta.backend, "host");
  EXPECT_EQ(s.arms[3].name, "C'");
  EXPECT_EQ(*s.arms[3].delta.tokens_per_step, 4);
  EXPECT_DOUBLE_EQ(*s.arms[3].delta.acceptance, 0.6);
  EXPECT_GT(s.arms[3].line, s.arms[2].line);
  // Its recording, resolved against the spec's folder, is shipped beside it.
  EXPECT_EQ(s.recorded_run, std::string(TPSCOPE_SOURCE_DIR) + "/examples/recorded/h200x2-quick");
}

// The spec's modes are the workload's, by the workload's names, plus `row`.
TEST(ExperimentSpec, SplitModesAreTheWorkloadsPlusRow) {
  for (SplitMode m : {SplitMode::kNone, SplitMode::kLayer, SplitMode::kTensor, SplitMode::kRow}) {
    EXPECT_EQ(parseSplitMode(splitModeName(m)), m) << splitModeName(m);
    const std::optional<workload::SplitMode> w = workloadSplit(m);
    EXPECT_EQ(w.has_value(), m != SplitMode::kRow) << splitModeName(m);
    if (w) EXPECT_EQ(workload::parseSplitMode(splitModeName(m)), w);
  }
  EXPECT_STREQ(splitModeName(SplitMode::kTensor), "tensor");
  EXPECT_STREQ(splitModeName(SplitMode::kRow), "row");
  EXPECT_FALSE(parseSplitMode("diagonal"));
}

// The decode kernel choices of `tpscope tp` are spec keys too, shared or per arm, by the workload's names.
TEST(ExperimentSpec, DecodeKernelChoices) {
  const ExperimentSpec s = parseSpec("[experiment]\nreduction = \"plain\"\nrope_kernel = \"kernel\"\n" + kArms +
                                         "attention_pdl = \"off\"\nreduction = \"fused\"\n",
                                     "spec.toml");
  EXPECT_EQ(s.shared.base.reduction, workload::Reduction::kPlain);
  EXPECT_EQ(s.shared.base.rope_kernel, workload::RopeKernel::kKernel);
  EXPECT_FALSE(s.shared.base.attention_pdl);
  EXPECT_FALSE(s.arms[0].delta.reduction);
  EXPECT_EQ(s.arms[1].delta.reduction, workload::Reduction::kFused);
  EXPECT_EQ(s.arms[1].delta.attention_pdl, workload::AttentionPdl::kOff);
  expectError("[experiment]\nreduction = \"pushd\"\n" + kArms, 2,
              "'reduction' = \"pushd\" is not one of pushed, fused, plain");
  expectError("[experiment]\nrope_kernel = 1\n" + kArms, 2, "'rope_kernel' must be a string");
  expectError(kArms + "attention_pdl = \"yes\"\n", 11, "is not one of auto, on, off");
  expectError("[experiment]\nengine = \"command\"\ncommand = [\"true\"]\nreduction = \"plain\"\n" + kArms, 4,
              "'reduction' is not a setting of engine = \"command\"");
}

TEST(ExperimentSpec, RecordedRunIsAsWrittenUntilLoadResolvesIt) {
  EXPECT_EQ(parseSpec(kArms).recorded_run, "");
  EXPECT_EQ(parseSpec("[experiment]\nrecorded_run = \"rec/x\"\n" + kArms).recorded_run, "rec/x");
  expectError("[experiment]\nrecorded_run = \"\"\n" + kArms, 2, "'recorded_run' is empty");
  expectError("[experiment]\nrecorded_run = 3\n" + kArms, 2, "'recorded_run' must be a string");
}

TEST(ExperimentSpec, BackendsExampleParses) {
  const ExperimentSpec s = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/backends.toml");
  ASSERT_EQ(s.arms.size(), 4u);
  EXPECT_EQ(*s.shared.base.split, SplitMode::kTensor);
  EXPECT_EQ(*s.arms[0].delta.split, SplitMode::kLayer);
  EXPECT_EQ(*s.arms[3].delta.backend, "nccl");
}

TEST(ExperimentSpec, DefaultsWithoutExperimentTable) {
  const ExperimentSpec s = parseSpec(kArms, "dir/my-spec.toml");
  EXPECT_EQ(s.name, "my-spec");
  EXPECT_EQ(s.shared.repetitions, 3);
  EXPECT_EQ(s.text, kArms);
}

TEST(ExperimentSpec, MalformedTomlNamesTheLine) {
  expectError("[experiment]\nrepetitions = 3\npreset = \"8b\n" + kArms, 3, "malformed TOML");
}

TEST(ExperimentSpec, UnknownKeysAnywhereAreErrors) {
  expectError("[experiment]\nrepetitons = 3\n" + kArms, 2, "unknown key 'repetitons' in [experiment]");
  expectError("[experiment]\n" + kArms + "tokens_per_stp = 4\n", 12, "unknown key 'tokens_per_stp' in [[arm]]");
  expectError("[experment]\n" + kArms, 1, "unknown key 'experment' at top level");
  expectError("fit = false\n" + kArms, 1, "unknown key 'fit'");
}

TEST(ExperimentSpec, MissingArms) {
  expectError("[experiment]\nrepetitions = 3\n", 0, "no arms");
  expectError("", 0, "no arms");
  expectError("arm = 3\n", 1, "array of tables");
}

TEST(ExperimentSpec, ArmWithoutNameAndDuplicates) {
  expectError("[[arm]]\ndevices = [0]\n", 1, "has no name");
  expectError("[[arm]]\nname = \"\"\n", 1, "has no name");
  expectError(kArms + "\n[[arm]]\nname = \"A\"\n", 12, "duplicate arm name 'A'");
}

TEST(ExperimentSpec, BadValues) {
  expectError("[experiment]\nrepetitions = 0\n" + kArms, 2, "out of range");
  expectError("[experiment]\nrepetitions = \"three\"\n" + kArms, 2, "must be an integer");
  expectError("[experiment]\nidle_seconds = -1\n" + kArms, 2, "out of range");
  expectError("[experiment]\nbaseline_threshold_mbps = 0\n" + kArms, 2, "out of range");
  expectError("[experiment]\nmeter_period_ms = 100\n" + kArms, 2, "out of range");
  expectError("[experiment]\nphases = [\"prefill\", \"warmup\"]\n" + kArms, 2, "not prefill or decode");
  expectError("[experiment]\nphases = [\"decode\", \"decode\"]\n" + kArms, 2, "listed twice");
  expectError("[experiment]\nprompt_tokens = 16000\ndecode_tokens = 1000\ncontext = 16384\n" + kArms, 1,
              "does not fit context");
  expectError("[[arm]]\nname = \"X\"\nsplit = \"diagonal\"\n", 3, "not one of none, layer, tensor");
  expectError("[[arm]]\nname = \"X\"\nbackend = \"mpi\"\n", 3, "not one of host, p2p, nccl, auto");
  expectError("[[arm]]\nname = \"X\"\ndevices = [0, 0]\nsplit = \"layer\"\n", 3, "lists a GPU twice");
  expectError("[[arm]]\nname = \"X\"\ndevices = []\n", 3, "non-empty list");
  expectError("[[arm]]\nname = \"X\"\ndevices = [0, 1]\n", 1, "split \"none\" runs on one GPU");
  expectError("[[arm]]\nname = \"X\"\nsplit = \"tensor\"\n", 1, "needs at least 2 devices");
  expectError("[[arm]]\nname = \"X\"\ntokens_per_step = 0\n", 3, "out of range");
  expectError("[[arm]]\nname = \"X\"\nacceptance = 0\n", 3, "out of range (0");
  expectError("[[arm]]\nname = \"X\"\nacceptance = 1.5\n", 3, "out of range");
}

// NaN passed every range check (v < lo || v > hi is false for it): acceptance = nan ran a whole study
// whose folder could not be read back, meter_period_ms = nan became a period of INT64_MIN us. Every
// number key now refuses nan and both infinities, naming the key and the value.
TEST(ExperimentSpec, NonFiniteNumbersAreRefusedWithTheKeyAndValue) {
  const std::string kServer = "[experiment]\nengine = \"llama-server\"\nmodel = \"m.gguf\"\n";
  struct Key {
    std::string head, key;
    int line;
  };
  const std::vector<Key> keys = {
      {"[experiment]\n", "idle_seconds", 2},    {"[experiment]\n", "baseline_threshold_mbps", 2},
      {"[experiment]\n", "meter_period_ms", 2}, {"[experiment]\n", "meter_idle_period_ms", 2},
      {kServer, "start_timeout_s", 4},          {kServer, "request_timeout_s", 4}};
  for (const Key& k : keys) {
    for (const char* v : {"nan", "+nan", "-nan", "inf", "+inf", "-inf"}) {
      const std::string text = k.head + k.key + " = " + v + "\n" + kArms;
      try {
        parseSpec(text, "spec.toml");
        ADD_FAILURE() << k.key << " = " << v << " was accepted";
      } catch (const SpecError& e) {
        EXPECT_EQ(e.line, k.line) << e.what();
        EXPECT_NE(std::string(e.what()).find("'" + k.key + "' = "), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("is not a finite number"), std::string::npos) << e.what();
      }
    }
  }
  for (const char* v : {"nan", "inf", "-inf"})
    expectError(std::string("[[arm]]\nname = \"X\"\nacceptance = ") + v + "\n", 3, "'acceptance' = ");
  expectError("[[arm]]\nname = \"X\"\nacceptance = nan\n", 3, "is not a finite number");
}

// A float key exactly at its bound is taken; the next double past it is not (an off-by-one in the range
// check would pass the first test alone).
TEST(ExperimentSpec, FloatKeysAreTakenExactlyUpToTheirBounds) {
  EXPECT_DOUBLE_EQ(*parseSpec("[[arm]]\nname = \"X\"\nacceptance = 1\n").arms[0].delta.acceptance, 1.0);
  EXPECT_DOUBLE_EQ(*parseSpec("[[arm]]\nname = \"X\"\nacceptance = 1.0\n").arms[0].delta.acceptance, 1.0);
  expectError("[[arm]]\nname = \"X\"\nacceptance = 1.0000000000000002\n", 3, "out of range (0, 1]");
  EXPECT_DOUBLE_EQ(parseSpec("[experiment]\nmeter_period_ms = 0.1\n" + kArms).shared.meter_period_ms, 0.1);
  EXPECT_DOUBLE_EQ(parseSpec("[experiment]\nmeter_period_ms = 50\n" + kArms).shared.meter_period_ms, 50);
  expectError("[experiment]\nmeter_period_ms = 50.00000000000001\n" + kArms, 2, "out of range");
  expectError("[experiment]\nmeter_period_ms = 0.09999999999999999\n" + kArms, 2, "out of range");
  EXPECT_DOUBLE_EQ(parseSpec("[experiment]\nidle_seconds = 0\n" + kArms).shared.idle_seconds, 0);
}

TEST(ExperimentSpec, AtMost64Arms) {
  std::string text;
  for (int i = 0; i < 64; ++i) text += "[[arm]]\nname = \"a" + std::to_string(i) + "\"\n";
  EXPECT_EQ(parseSpec(text).arms.size(), 64u);
  expectError(text + "[[arm]]\nname = \"a64\"\n", 129, "more than 64 arms");
}

// Found by fuzz/experiment/spec_fuzz.cc: toml++'s key parser asserted (without NDEBUG: abort) on a table
// header whose key starts with a character no key starts with, before its own check could refuse it.
TEST(ExperimentSpec, MalformedTableHeadersAreParseErrors) {
  expectError("[\n", 1, "expected bare key starting character");
  expectError("[[[1]]]\n", 1, "expected bare key starting character");
  expectError("[&\n", 1, "expected bare key starting character");
}

// Found by fuzz/experiment/spec_fuzz.cc (UBSan: execution reached an unreachable program point): toml++'s
// whitespace check had no answer for some non-ASCII characters, such as this Cyrillic letter.
TEST(ExperimentSpec, NonAsciiWhereTomlWantsAKeyIsAParseError) {
  expectError("\xd0\xa2", 1, "");
  expectError("[[arm]]\nname = \"A\"\n\xd0\xa2 = 1\n", 3, "");
  const ExperimentSpec s = parseSpec("[[arm]]\nname = \"\xd0\xa2\"  # \xd0\xa2\n");  // in a string or a comment: fine
  EXPECT_EQ(s.arms[0].name, "\xd0\xa2");
}

TEST(ExperimentSpec, RowSplitParsesSoTheAvailabilityCheckCanRefuseIt) {
  const ExperimentSpec s = parseSpec("[[arm]]\nname = \"R\"\ndevices = [0, 1]\nsplit = \"row\"\n");
  EXPECT_EQ(*s.arms[0].delta.split, SplitMode::kRow);
}

TEST(ExperimentSpec, SharedBaseAppliesToArms) {
  const ExperimentSpec s =
      parseSpec("[experiment]\ndevices = [0, 1]\nsplit = \"tensor\"\n[[arm]]\nname = \"h\"\nbackend = \"host\"\n");
  EXPECT_FALSE(s.arms[0].delta.devices);
  EXPECT_EQ(*s.shared.base.devices, (std::vector<int>{0, 1}));
}

TEST(ExperimentSpec, MissingFile) {
  try {
    loadSpec("/nonexistent/spec.toml");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read"), std::string::npos);
  }
}

// Where the phases' PCIe bytes come from: NVML by default; PM sampling with its interval when asked.
TEST(ExperimentSpec, MeterSourceAndPmInterval) {
  const ExperimentSpec d = parseSpec(kArms);
  EXPECT_EQ(d.shared.meter_source, "nvml");
  EXPECT_EQ(d.shared.pm_interval_us, 100);  // the meter's own default
  const ExperimentSpec pm = parseSpec("[experiment]\nmeter_source = \"pm\"\npm_interval_us = 10\n" + kArms);
  EXPECT_EQ(pm.shared.meter_source, "pm");
  EXPECT_EQ(pm.shared.pm_interval_us, 10);
  EXPECT_EQ(parseSpec("[experiment]\nmeter_source = \"both\"\n" + kArms).shared.meter_source, "both");
  EXPECT_EQ(
      parseSpec("[experiment]\nmeter_source = \"both\"\npm_interval_us = 1000000\n" + kArms).shared.pm_interval_us,
      1000000);
  // Any list of the meter's sources, written back as the meter writes it ("both" for nvml,pm).
  EXPECT_EQ(parseSpec("[experiment]\nmeter_source = \"nvml,pm\"\n" + kArms).shared.meter_source, "both");
  EXPECT_EQ(parseSpec("[experiment]\nmeter_source = \"pm,nvml\"\n" + kArms).shared.meter_source, "pm,nvml");
  expectError("[experiment]\nmeter_source = \"cupti\"\n" + kArms, 2,
              "'meter_source': 'cupti' names no meter source: use one or more of");
  expectError("[experiment]\nmeter_source = \"pm,pm\"\n" + kArms, 2, "names the source pm twice");
  expectError("[experiment]\nmeter_source = 1\n" + kArms, 2, "'meter_source' must be a string");
  expectError("[experiment]\nmeter_source = \"pm\"\npm_interval_us = 9\n" + kArms, 3,
              "'pm_interval_us' = 9 is out of range [10, 1000000]");
  expectError("[experiment]\nmeter_source = \"pm\"\npm_interval_us = 1000001\n" + kArms, 3, "out of range");
  expectError("[experiment]\nmeter_source = \"pm\"\npm_interval_us = 10.5\n" + kArms, 3,
              "'pm_interval_us' must be an integer");
  // An interval nothing samples at is refused, on its own line, whichever key comes first.
  expectError("[experiment]\npm_interval_us = 10\n" + kArms, 2, "set meter_source = \"pm\" or \"both\" too");
  expectError("[experiment]\npm_interval_us = 10\nmeter_source = \"nvml\"\n" + kArms, 2, "meter_source");
  expectError(kArms + "meter_source = \"pm\"\n", 11, "unknown key 'meter_source' in [[arm]]");  // shared only
}

// Tensor split may repeat a GPU, its positions then sharing it; elsewhere a repeated GPU is an error.
TEST(ExperimentSpec, OnlyTensorSplitMayRepeatAGpu) {
  const ExperimentSpec s = parseSpec("[[arm]]\nname = \"T\"\ndevices = [0, 0]\nsplit = \"tensor\"\n");
  EXPECT_EQ(*s.arms[0].delta.devices, (std::vector<int>{0, 0}));
  expectError("[[arm]]\nname = \"X\"\ndevices = [0, 0]\nsplit = \"layer\"\n", 3,
              "only split \"tensor\" may repeat a GPU");
  // Shared devices, the arm's own split: the arm's line.
  expectError("[experiment]\ndevices = [1, 1]\nsplit = \"tensor\"\n[[arm]]\nname = \"L\"\nsplit = \"layer\"\n", 4,
              "arm 'L': 'devices' lists a GPU twice");
  expectError(
      "[experiment]\nengine = \"command\"\ncommand = [\"true\"]\n[[arm]]\nname = \"X\"\ndevices = [0, 0]\n"
      "split = \"tensor\"\n",
      6, "not engine = \"command\"");
}

TEST(ExperimentSpec, PmStepExampleParses) {
  const ExperimentSpec s = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/pm-step.toml");
  EXPECT_EQ(s.shared.meter_source, "pm");
  EXPECT_EQ(s.shared.pm_interval_us, 10);
  EXPECT_EQ(*s.shared.base.devices, (std::vector<int>{0, 0}));
  EXPECT_EQ(*s.shared.base.split, SplitMode::kTensor);
  EXPECT_EQ(*s.shared.base.backend, "host");
  EXPECT_EQ(s.shared.engine.engine, Engine::kSynthetic);
  EXPECT_EQ(s.shared.phases, std::vector<std::string>{"decode"});
  ASSERT_EQ(s.arms.size(), 2u);
}

TEST(ExperimentSpec, WiresExampleDiffersOnlyInWire) {
  const ExperimentSpec s = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/wires.toml");
  EXPECT_EQ(*s.shared.base.devices, (std::vector<int>{0, 0}));
  EXPECT_EQ(*s.shared.base.split, SplitMode::kTensor);
  EXPECT_EQ(*s.shared.base.backend, "host");
  ASSERT_GE(s.arms.size(), 3u);
  std::vector<std::string> wires;
  for (const ArmSpec& a : s.arms) {
    ASSERT_TRUE(a.delta.wire) << a.name;
    wires.push_back(*a.delta.wire);
    ArmDelta rest = a.delta;
    rest.wire.reset();
    EXPECT_FALSE(rest.devices || rest.split || rest.backend || rest.tokens_per_step || rest.acceptance) << a.name;
  }
  EXPECT_EQ(wires[0], "exact");
  EXPECT_NE(std::find(wires.begin(), wires.end(), "int8"), wires.end());
  EXPECT_NE(std::find(wires.begin(), wires.end(), "fp8"), wires.end());
}

// `wire` is a delta key: any wire the library names, auto with a budget; a lossy wire only where an
// AllReduce runs it (the synthetic tensor split, llama-server's allreduce = "tpscope"), never for a command.
TEST(ExperimentSpec, WireKey) {
  const std::string tensor = "[experiment]\nsplit = \"tensor\"\ndevices = [0, 1]\n";
  ExperimentSpec s = parseSpec(tensor + "[[arm]]\nname = \"E\"\n[[arm]]\nname = \"Q\"\nwire = \"auto:0.01\"\n");
  EXPECT_FALSE(s.arms[0].delta.wire);
  EXPECT_EQ(*s.arms[1].delta.wire, "auto:0.01");
  s = parseSpec("[experiment]\nwire = \"int8\"\nsplit = \"tensor\"\n[[arm]]\nname = \"Q\"\ndevices = [0, 0]\n");
  EXPECT_EQ(*s.shared.base.wire, "int8");
  expectError(tensor + "[[arm]]\nname = \"Q\"\nwire = \"int9\"\n", 6, "'wire': wire 'int9' is not one of");
  expectError(tensor + "[[arm]]\nname = \"Q\"\nwire = \"auto:2\"\n", 6, "budget after auto:");
  expectError(tensor + "[[arm]]\nname = \"Q\"\nwire = 8\n", 6, "'wire' must be a string");
  // A lossy wire where no AllReduce carries it; exact is the default anywhere.
  expectError("[[arm]]\nname = \"A\"\ndevices = [0, 1]\nsplit = \"layer\"\nwire = \"fp8\"\n", 1,
              "arm 'A': wire \"fp8\" compresses the tensor split's AllReduce, but the arm's split is layer");
  EXPECT_NO_THROW(parseSpec("[[arm]]\nname = \"A\"\nwire = \"exact\"\n"));
  expectError(
      "[experiment]\nengine = \"llama-server\"\nmodel = \"m.gguf\"\n[[arm]]\nname = \"X\"\nallreduce = \"nccl\"\n"
      "wire = \"int8\"\n",
      4, "wire chooses tpscope's wire (TPSCOPE_WIRE) under allreduce = \"tpscope\"");
  EXPECT_NO_THROW(
      parseSpec("[experiment]\nengine = \"llama-server\"\nmodel = \"m.gguf\"\n[[arm]]\nname = \"X\"\n"
                "allreduce = \"tpscope\"\nwire = \"fp8\"\n"));
  expectError("[experiment]\nengine = \"command\"\ncommand = [\"true\"]\n[[arm]]\nname = \"X\"\nwire = \"int8\"\n", 6,
              "'wire' is not a setting of engine = \"command\"");
}

}  // namespace
}  // namespace tpscope::experiment
