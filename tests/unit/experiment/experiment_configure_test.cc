// SPDX-License-Identifier: Apache-2.0
// experiment_configure_test - unit tests for src/experiment/configure.cc: the engine and the box a spec
// gets, and what is refused before anything starts (no GPU needed: the fake meter and workload).
#include <gtest/gtest.h>

#include <cstdlib>

#include "experiment/configure.h"
#include "experiment/workload_phases.h"

namespace tpscope::experiment {
namespace {

ConfigureOptions fakeBox() {
  ConfigureOptions o;
  o.out_dir = "/tmp/tpscope-configure-test";
  o.fake_meter = true;
  o.fake_workload = true;
  return o;
}

TEST(Configure, FakeWorkloadOffersEveryBackendOnTwoGpus) {
  const Configuration c = configure(ExperimentSpec{}, fakeBox());
  ASSERT_EQ(c.status, Configuration::Status::kReady) << c.message;
  EXPECT_EQ(c.config.box.gpu_count, 2);
  EXPECT_EQ(c.config.box.backends, (std::vector<tpsBackend_t>{tpsBackendHost, tpsBackendP2p, tpsBackendNccl}));
  EXPECT_EQ(c.config.box.split_modes, (std::vector<std::string>{"none", "layer", "tensor"}));
  EXPECT_TRUE(c.config.make_phases);
  EXPECT_TRUE(c.config.start_meter) << "the fake meter's GPUs";
  EXPECT_EQ(c.config.versions["workload"], "fake (--fake-workload)");
}

TEST(Configure, FakeWorkloadWithoutTheFakeMeterIsAUsageError) {
  ConfigureOptions o = fakeBox();
  o.fake_meter = false;
  const Configuration c = configure(ExperimentSpec{}, o);
  EXPECT_EQ(c.status, Configuration::Status::kUsage);
  EXPECT_NE(c.message.find("TPSCOPE_METER_FAKE=1"), std::string::npos) << c.message;
}

TEST(Configure, LlamaServerNeedsItsBinaryAndAGgufModel) {
  ExperimentSpec spec;
  spec.shared.engine.engine = Engine::kLlamaServer;
  unsetenv("TPSCOPE_LLAMA_SERVER");
  Configuration c = configure(spec, fakeBox());
  EXPECT_EQ(c.status, Configuration::Status::kUsage);
  EXPECT_NE(c.message.find("name the llama-server to run"), std::string::npos) << c.message;

  setenv("TPSCOPE_LLAMA_SERVER", "/usr/bin/true", 1);
  spec.shared.engine.model = std::string(TPSCOPE_SOURCE_DIR) + "/README.md";
  c = configure(spec, fakeBox());
  unsetenv("TPSCOPE_LLAMA_SERVER");
  EXPECT_EQ(c.status, Configuration::Status::kUsage);
  EXPECT_NE(c.message.find("README.md"), std::string::npos) << c.message;
}

TEST(Configure, CommandEngineIsReadyWithTheServersSplitModes) {
  ExperimentSpec spec;
  spec.shared.engine.engine = Engine::kCommand;
  spec.shared.engine.command = {"true"};
  const Configuration c = configure(spec, fakeBox());
  ASSERT_EQ(c.status, Configuration::Status::kReady) << c.message;
  EXPECT_EQ(c.config.versions["engine"], "command");
  EXPECT_EQ(c.config.box.split_modes.back(), "row");
  EXPECT_FALSE(c.config.probe);
}

// The workload decodes eagerly where tensor positions share a GPU (one graph need not run their branches
// at once): the decision the guards see says so, and it is the same for every arm of examples/pm-step.toml.
TEST(ExperimentConfigure, PositionsSharingAGpuDecodeWithoutAGraph) {
  auto graph = [](const char* devices) {
    EffectiveSettings e;
    e.settings = {{"devices", devices, SettingSource::kArm}, {"split", "tensor", SettingSource::kArm}};
    for (const Setting& s : workloadDecisions(e))
      if (s.key == "cuda_graph") return s.value;
    return std::string("(none)");
  };
  EXPECT_EQ(graph("0,1"), "on");
  EXPECT_EQ(graph("0,0"), "off");
  EXPECT_EQ(graph("1,0,1"), "off");
  const ExperimentSpec spec = loadSpec(std::string(TPSCOPE_SOURCE_DIR) + "/examples/pm-step.toml");
  EXPECT_TRUE(undeclaredDifferences(effectiveSettings(spec, workloadDecisions)).empty());
  // With the fake workload the box runs positions sharing a GPU on host staging.
  const Configuration c = configure(spec, fakeBox());
  ASSERT_EQ(c.status, Configuration::Status::kReady) << c.message;
  EXPECT_TRUE(c.config.box.host_on_shared_gpu);
  EXPECT_TRUE(checkAvailability(effectiveSettings(spec), c.config.box).empty());
}

}  // namespace
}  // namespace tpscope::experiment
