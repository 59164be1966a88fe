// SPDX-License-Identifier: Apache-2.0
// Engine specs: llama-server and command keys, what each engine refuses, names that stay in the run folder,
// and what an arm becomes on the server's command line.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/llama_server.h"
#include "experiment/guards.h"
#include "experiment/server_phases.h"
#include "experiment/spec.h"

namespace tpscope::experiment {
namespace {

const char* kServer = R"([experiment]
engine = "llama-server"
model = "m.gguf"
flags = "-ngl 99 -c 4096 --parallel 1 -fa on -fit off --chat-template-kwargs '{\"enable_thinking\":false}'"
prompt_tokens = 512
decode_tokens = 64

[[arm]]
name = "A"
devices = [0]
split = "none"

[[arm]]
name = "C"
devices = [0, 1]
split = "tensor"
allreduce = "internal"

[[arm]]
name = "C'"
devices = [0, 1]
split = "tensor"
allreduce = "internal"
draft = "self"
draft_max = 3
)";

std::string errorOf(const std::string& text) {
  try {
    parseSpec(text, "spec.toml");
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(EngineSpec, LlamaServerSpecParses) {
  const ExperimentSpec s = parseSpec(kServer, "spec.toml");
  EXPECT_EQ(s.shared.engine.engine, Engine::kLlamaServer);
  EXPECT_EQ(s.shared.engine.model, "m.gguf");
  ASSERT_EQ(s.arms.size(), 3u);
  EXPECT_EQ(*s.arms[1].delta.allreduce, "internal");
  EXPECT_EQ(*s.arms[2].delta.draft, "self");
  EXPECT_EQ(*s.arms[2].delta.draft_max, 3);
}

TEST(EngineSpec, EachEngineRefusesTheOthersKeys) {
  std::string e =
      errorOf(std::string(kServer).replace(std::string(kServer).find("prompt_tokens"), 0, "preset = \"8b\"\n"));
  EXPECT_NE(e.find("'preset' is not a setting of engine = \"llama-server\""), std::string::npos) << e;
  e = errorOf(std::string(kServer) +
              "\n[[arm]]\nname = \"D\"\ndevices = [0, 1]\nsplit = \"tensor\"\nbackend = \"p2p\"\n");
  EXPECT_NE(e.find("'backend' is not a setting"), std::string::npos) << e;
  e = errorOf("[experiment]\nmodel = \"m.gguf\"\n[[arm]]\nname = \"A\"\n");
  EXPECT_NE(e.find("'model' is not a setting of engine = \"synthetic\""), std::string::npos) << e;
  e = errorOf("[experiment]\nengine = \"llama-server\"\n[[arm]]\nname = \"A\"\n");
  EXPECT_NE(e.find("needs model"), std::string::npos) << e;
  e = errorOf("[experiment]\nengine = \"command\"\n[[arm]]\nname = \"A\"\n");
  EXPECT_NE(e.find("needs command"), std::string::npos) << e;
  e = errorOf("[experiment]\nengine = \"vllm\"\n[[arm]]\nname = \"A\"\n");
  EXPECT_NE(e.find("not one of synthetic, llama-server, command"), std::string::npos) << e;
  e = errorOf("[experiment]\nengine = \"llama-server\"\nmodel = \"m\"\n[[arm]]\nname = \"A\"\nallreduce = \"mpi\"\n");
  EXPECT_NE(e.find("not one of internal, nccl, none"), std::string::npos) << e;
  e = errorOf("[experiment]\nengine = \"llama-server\"\nmodel = \"m\"\n[[arm]]\nname = \"A\"\ndraft_max = 3\n");
  EXPECT_NE(e.find("draft_max needs a draft"), std::string::npos) << e;
}

TEST(EngineSpec, NamesThatLeaveTheRunFolderAreRefused) {
  for (const char* name : {"../../x", "a/b", "..", ".", "x\\\\y"}) {  // TOML "x\\y" is x\y
    std::string e = errorOf(std::string("[experiment]\nname = \"") + name + "\"\n[[arm]]\nname = \"A\"\n");
    EXPECT_NE(e.find("outside the run folder"), std::string::npos) << name << ": " << e;
    e = errorOf(std::string("[[arm]]\nname = \"") + name + "\"\n");
    EXPECT_NE(e.find("outside the run folder"), std::string::npos) << name << ": " << e;
  }
  EXPECT_NE(errorOf("[[arm]]\nname = \"A/../../x\"\n").find("arm name"), std::string::npos);
  EXPECT_EQ(errorOf("[[arm]]\nname = \"C'\"\n"), "");  // the study's C' is a plain name
  EXPECT_EQ(armFileName("C'"), "C'");
  EXPECT_EQ(armFileName("a b*c"), "a_b_c");
}

TEST(EngineSpec, EffectiveSettingsCarryTheServerDelta) {
  ExperimentSpec s = parseSpec(kServer, "spec.toml");
  s.shared.engine.server = "/opt/llama-server";
  const std::vector<EffectiveSettings> eff = effectiveSettings(s);
  ASSERT_EQ(eff.size(), 3u);
  EXPECT_EQ(eff[0].value("engine"), "llama-server");
  EXPECT_EQ(eff[0].value("allreduce"), "default");
  EXPECT_EQ(eff[0].value("allreduce_backend"), "none");
  EXPECT_EQ(eff[1].value("allreduce_backend"), "internal");
  EXPECT_EQ(eff[2].value("draft"), "self");
  EXPECT_EQ(eff[0].find("preset"), nullptr);   // a server loads its model
  EXPECT_EQ(eff[0].find("backend"), nullptr);  // and runs its own AllReduce
  EXPECT_TRUE(undeclaredDifferences(eff).empty());
  // What a server reports about itself is compared; a differing n_ctx is an undeclared difference.
  std::vector<EffectiveSettings> probed = eff;
  for (size_t i = 0; i < probed.size(); ++i) {
    probed[i].settings.push_back({"server_n_ctx", i == 1 ? "2048" : "4096", SettingSource::kEngine});
    probed[i].settings.push_back({"server_args", "differs by -sm " + std::to_string(i), SettingSource::kEngine});
    probed[i].settings.push_back({"speculative_in_effect", i == 2 ? "draft-simple" : "none", SettingSource::kEngine});
  }
  const std::vector<Difference> d = undeclaredDifferences(probed);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].setting, "server_n_ctx");
  EXPECT_NE(formatDifferences(d).find("engine"), std::string::npos);
}

TEST(EngineSpec, ServerLaunchMapsTheArm) {
  ExperimentSpec s = parseSpec(kServer, "spec.toml");
  const std::vector<EffectiveSettings> eff = effectiveSettings(s);
  ServerLaunch l;
  std::string error;
  ASSERT_TRUE(serverLaunch(s.shared.engine, eff[2], {}, &l, &error)) << error;
  auto has = [&l](const std::vector<std::string>& seq) {
    return std::search(l.args.begin(), l.args.end(), seq.begin(), seq.end()) != l.args.end();
  };
  EXPECT_TRUE(has({"-m", "m.gguf"}));
  EXPECT_TRUE(has({"-sm", "tensor"}));
  EXPECT_TRUE(has({"-md", "m.gguf"}));  // draft = "self"
  EXPECT_TRUE(has({"--spec-draft-n-max", "3"}));
  EXPECT_TRUE(has({"--spec-type", "draft-simple"}));  // a draft model alone would be loaded and unused
  EXPECT_TRUE(has({"-lv", "4"}));                     // the log then says what the server decided
  EXPECT_TRUE(has({"--chat-template-kwargs", "{\"enable_thinking\":false}"}));  // quotes are shell quotes
  EXPECT_TRUE(has({"--metrics"}));
  EXPECT_EQ(l.env, (std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", "0,1"},
                                                                     {"GGML_CUDA_ALLREDUCE", "internal"}}));
  // No allreduce declared: the user's environment must not choose one.
  ASSERT_TRUE(serverLaunch(s.shared.engine, eff[0], {"3", "5"}, &l, &error)) << error;
  EXPECT_EQ(l.unset, (std::vector<std::string>{"GGML_CUDA_ALLREDUCE", "TPSCOPE_ALLREDUCE", "TPSCOPE_WIRE"}));
  EXPECT_EQ(l.env[0].second, "3");  // spec ordinal 0 under CUDA_VISIBLE_DEVICES=3,5
  // Flags that the spec owns, and flags that are not plain words, are refused.
  s.shared.engine.flags = "-c 4096 -sm row";
  EXPECT_FALSE(serverLaunch(s.shared.engine, eff[0], {}, &l, &error));
  EXPECT_NE(error.find("-sm"), std::string::npos) << error;
  s.shared.engine.flags = "-c $(reboot)";
  EXPECT_FALSE(serverLaunch(s.shared.engine, eff[0], {}, &l, &error));
  s.shared.engine.flags = "-c '4096";
  EXPECT_FALSE(serverLaunch(s.shared.engine, eff[0], {}, &l, &error));
  EXPECT_NE(error.find("quotes"), std::string::npos) << error;
}

// allreduce = "tpscope" (integrations/llama.cpp's patch): tpscope's backend is a further key, recorded,
// compared and handed to the server as TPSCOPE_ALLREDUCE.
TEST(EngineSpec, TpscopeAllReduceArms) {
  const std::string spec =
      std::string(kServer) +
      "\n[[arm]]\nname = \"T-host\"\ndevices = [0, 1]\nsplit = \"tensor\"\nallreduce = \"tpscope\"\n"
      "tpscope_backend = \"host\"\n"
      "\n[[arm]]\nname = \"T-auto\"\ndevices = [0, 1]\nsplit = \"tensor\"\nallreduce = \"tpscope\"\n";
  const ExperimentSpec s = parseSpec(spec, "spec.toml");
  ASSERT_EQ(s.arms.size(), 5u);
  EXPECT_EQ(*s.arms[3].delta.tpscope_backend, "host");
  EXPECT_FALSE(s.arms[4].delta.tpscope_backend.has_value());

  const std::vector<EffectiveSettings> eff = effectiveSettings(s);
  EXPECT_EQ(eff[1].value("tpscope_backend"), "none");  // allreduce = "internal"
  EXPECT_EQ(eff[3].value("tpscope_backend"), "host");
  EXPECT_EQ(eff[3].value("allreduce_backend"), "tpscope-host");
  EXPECT_EQ(eff[4].value("tpscope_backend"), "auto");  // tpscope's own choice, stated
  EXPECT_EQ(eff[4].value("allreduce_backend"), "tpscope-auto");
  EXPECT_EQ(std::count(deltaKeys().begin(), deltaKeys().end(), "tpscope_backend"), 1);
  EXPECT_TRUE(undeclaredDifferences(eff).empty());  // declared per arm, so they may differ

  ServerLaunch l;
  std::string error;
  ASSERT_TRUE(serverLaunch(s.shared.engine, eff[3], {}, &l, &error)) << error;
  // The wire too: exact unless the arm names one, never what the user's shell had.
  EXPECT_EQ(l.env, (std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", "0,1"},
                                                                     {"GGML_CUDA_ALLREDUCE", "tpscope"},
                                                                     {"TPSCOPE_ALLREDUCE", "host"},
                                                                     {"TPSCOPE_WIRE", "exact"}}));
  EXPECT_TRUE(l.unset.empty());
  ASSERT_TRUE(serverLaunch(s.shared.engine, eff[4], {}, &l, &error)) << error;
  EXPECT_EQ(l.env[l.env.size() - 2], (std::pair<std::string, std::string>{"TPSCOPE_ALLREDUCE", "auto"}));
  // Any other AllReduce: tpscope's variables from the user's shell never reach the server.
  ASSERT_TRUE(serverLaunch(s.shared.engine, eff[1], {}, &l, &error)) << error;
  EXPECT_EQ(l.unset, (std::vector<std::string>{"TPSCOPE_ALLREDUCE", "TPSCOPE_WIRE"}));
  // An arm's wire reaches the server as TPSCOPE_WIRE (GGML_CUDA_ALLREDUCE=tpscope TPSCOPE_WIRE=fp8).
  const ExperimentSpec w = parseSpec(std::string(kServer) +
                                         "\n[[arm]]\nname = \"T-fp8\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                                         "allreduce = \"tpscope\"\nwire = \"fp8\"\n",
                                     "spec.toml");
  const std::vector<EffectiveSettings> weff = effectiveSettings(w);
  EXPECT_EQ(weff.back().value("wire"), "fp8");
  ASSERT_TRUE(serverLaunch(w.shared.engine, weff.back(), {}, &l, &error)) << error;
  EXPECT_EQ(l.env.back(), (std::pair<std::string, std::string>{"TPSCOPE_WIRE", "fp8"}));

  std::string e = errorOf(std::string(kServer) +
                          "\n[[arm]]\nname = \"D\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                          "allreduce = \"nccl\"\ntpscope_backend = \"p2p\"\n");
  EXPECT_NE(e.find("tpscope_backend chooses tpscope's backend under allreduce = \"tpscope\""), std::string::npos) << e;
  e = errorOf(
      "[experiment]\nengine = \"llama-server\"\nmodel = \"m\"\n[[arm]]\nname = \"A\"\nallreduce = \"tpscope\"\n"
      "tpscope_backend = \"mpi\"\n");
  EXPECT_NE(e.find("not one of host, p2p, nccl, auto (TPSCOPE_ALLREDUCE)"), std::string::npos) << e;
  e = errorOf("[experiment]\n[[arm]]\nname = \"A\"\ntpscope_backend = \"p2p\"\n");
  EXPECT_NE(e.find("'tpscope_backend' is not a setting of engine = \"synthetic\""), std::string::npos) << e;
}

// An n_vocab of 1e300 from /v1/models was converted to int64 (undefined behaviour): the vocabulary is used
// only as a whole number in range.
TEST(EngineSpec, TheServersVocabularyIsAWholeNumberInRange) {
  const std::vector<EffectiveSettings> eff = effectiveSettings(parseSpec(kServer, "spec.toml"));
  ServerLaunch launch;
  std::string reason;
  ASSERT_TRUE(serverLaunch(parseSpec(kServer, "spec.toml").shared.engine, eff[0], {}, &launch, &reason)) << reason;
  for (const char* n : {"1e300", "-5", "0", "2.5", "\"32\"", "99999999999"}) {
    const nlohmann::json props =
        nlohmann::json::parse(std::string(R"({"tpscope_model_meta": {"n_vocab": )") + n + "}}");
    std::vector<Setting> decisions;
    int64_t vocab = 0;
    ASSERT_EQ(serverDecisions(eff[0], launch, props, "", &decisions, &vocab, &reason), tpsSuccess) << reason;
    EXPECT_EQ(vocab, 32000) << n;
  }
  std::vector<Setting> decisions;
  int64_t vocab = 0;
  ASSERT_EQ(
      serverDecisions(eff[0], launch, {{"tpscope_model_meta", {{"n_vocab", 151936}}}}, "", &decisions, &vocab, &reason),
      tpsSuccess);
  EXPECT_EQ(vocab, 151936);
}

// The wire the server's tpscope communicator took (its log line, integrations/llama.cpp's patch) must be
// the arm's: otherwise the arm did not run what it declared, and it is refused.
TEST(EngineSpec, TheServersWireMustBeTheArms) {
  const ExperimentSpec s = parseSpec(std::string(kServer) +
                                         "\n[[arm]]\nname = \"T\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                                         "allreduce = \"tpscope\"\n"
                                         "\n[[arm]]\nname = \"T8\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                                         "allreduce = \"tpscope\"\nwire = \"int8\"\n"
                                         "\n[[arm]]\nname = \"Ta\"\ndevices = [0, 1]\nsplit = \"tensor\"\n"
                                         "allreduce = \"tpscope\"\nwire = \"auto:0.01\"\n",
                                     "spec.toml");
  const std::vector<EffectiveSettings> eff = effectiveSettings(s);
  const EffectiveSettings& exact = eff[eff.size() - 3];
  const EffectiveSettings& int8 = eff[eff.size() - 2];
  const EffectiveSettings& automatic = eff.back();
  ServerLaunch launch;
  std::string reason;
  ASSERT_TRUE(serverLaunch(s.shared.engine, int8, {}, &launch, &reason)) << reason;
  auto log = [](const std::string& wire) {
    return "creating a Meta device\nggml_cuda_tpscope_init: tpscope AllReduce (tpscope 0.1.0, auto" + wire +
           ") over CUDA devices 0,1\n";
  };
  auto decide = [&](const EffectiveSettings& arm, const std::string& text) {
    std::vector<Setting> decisions;
    int64_t vocab = 0;
    reason.clear();
    return serverDecisions(arm, launch, nlohmann::json::object(), text, &decisions, &vocab, &reason);
  };
  EXPECT_EQ(decide(int8, log(", wire int8")), tpsSuccess) << reason;
  EXPECT_EQ(decide(exact, log(", wire exact")), tpsSuccess) << reason;
  EXPECT_EQ(decide(automatic, log(", wire auto:0.01")), tpsSuccess) << reason;
  EXPECT_EQ(decide(int8, log(", wire exact")), tpsUnavailable);
  EXPECT_NE(reason.find("runs wire exact, the arm asks for int8"), std::string::npos) << reason;
  EXPECT_EQ(decide(exact, log(", wire fp8")), tpsUnavailable);
  // A build whose log names no wire: fine for an exact arm, refused for another.
  EXPECT_EQ(decide(exact, log("")), tpsSuccess) << reason;
  EXPECT_EQ(decide(int8, log("")), tpsUnavailable);
  EXPECT_NE(reason.find("does not say which wire"), std::string::npos) << reason;
  EXPECT_EQ(engine::tpscopeWireInLog(log(", wire auto:0.01")), "auto:0.01");
  EXPECT_FALSE(engine::tpscopeWireInLog(log("")));
  EXPECT_FALSE(engine::tpscopeWireInLog(", wire int8) over CUDA devices 0,1\ntpscope AllReduce (tpscope 1, auto"));
}

}  // namespace
}  // namespace tpscope::experiment
