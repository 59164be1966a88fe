// SPDX-License-Identifier: Apache-2.0
// `tpscope arms` on a real llama-server (the pinned source's CPU build; scripts/test builds it) with a
// tiny GGUF written by scripts/llama/make-gguf and the meter's scripted GPUs: windows from the token
// stream, the server's timings in the record, the report; arms whose servers decide different contexts
// are refused with the table; a server killed mid-request and a SIGINT to tpscope leave a complete run
// folder and no server behind. Without a built llama-server each test fails saying so (skipped, with
// the reason, under TPSCOPE_TEST_LENIENT=1).
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "engine/process.h"
#include "experiment_fixture.h"
#include "prerequisite.h"

namespace tpscope::testing {
namespace {

namespace fs = std::filesystem;

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The server under test: TPSCOPE_LLAMA_SERVER, else where scripts/llama/build-llama-server caches the CPU build.
std::string serverBinary() {
  if (const char* e = std::getenv("TPSCOPE_LLAMA_SERVER"); e && *e) return e;
  std::string cache;
  if (const char* c = std::getenv("TPSCOPE_CACHE_DIR"); c && *c)
    cache = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    cache = std::string(x) + "/tpscope";
  else
    cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/.cache/tpscope";
  return cache + "/llama.cpp-0c1e570/cpu/bin/llama-server";
}

// llama-server processes whose command line names `needle` (the test's own model path).
std::vector<pid_t> serversNaming(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0) continue;
    std::string cmd = readFile("/proc/" + std::string(e->d_name) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    std::string stat = readFile("/proc/" + std::string(e->d_name) + "/stat");
    const size_t close = stat.rfind(')');
    const bool zombie = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
    if (!zombie && cmd.find("llama-server") != std::string::npos && cmd.find(needle) != std::string::npos)
      out.push_back(pid);
  }
  closedir(d);
  return out;
}

bool waitFor(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class LlamaServerArms : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = serverBinary();
    if (access(server_.c_str(), X_OK) != 0) return;
    dir_ = tempDir("llama_arms");
    fs::create_directories(dir_);
    model_ = dir_ + "/tiny-q4_k.gguf";
    const std::string cmd = std::string(TPSCOPE_SOURCE_DIR) + "/scripts/llama/make-gguf --preset tiny --type q4_k -o " +
                            model_ + " > " + dir_ + "/make-gguf.log 2>&1";
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (access(server_.c_str(), X_OK) != 0) {
      const std::string why = "no llama-server at " + server_ +
                              " (scripts/llama/build-llama-server --flavour cpu builds it; scripts/test does)";
      TPS_MISSING_PREREQUISITE(why);
    }
    ASSERT_TRUE(made_) << "scripts/llama/make-gguf failed:\n" << readFile(dir_ + "/make-gguf.log");
  }

  // A two-arm spec (A: one GPU, B: layer split) on the tiny model; `extra` goes into [experiment].
  std::string writeSpec(const std::string& name, const std::string& extra = "", int decode = 32,
                        const std::string& server = "") {
    const std::string path = dir_ + "/" + name + ".toml";
    std::ofstream(path) << "[experiment]\nname = \"" << name << "\"\nengine = \"llama-server\"\nserver = \""
                        << (server.empty() ? server_ : server) << "\"\nmodel = \"" << model_
                        << "\"\nflags = \"-c 32768 -ngl 0 -t 2 --parallel 1 -b 256 -ub 256\"\nprompt_tokens = 64\n"
                        << "decode_tokens = " << decode << "\nrepetitions = 2\nidle_seconds = 0.2\n"
                        << "baseline_threshold_mbps = 100000\nstart_timeout_s = 60\n"
                        << extra << "\n[[arm]]\nname = \"A\"\ndevices = [0]\nsplit = \"none\"\n\n"
                        << "[[arm]]\nname = \"B\"\ndevices = [0, 1]\nsplit = \"layer\"\n";
    return path;
  }

  static inline std::string server_, dir_, model_;
  static inline bool made_ = false;
};

TEST_F(LlamaServerArms, RunsTheArmsOnTheRealServer) {
  const std::string spec = writeSpec("e2e"), run = dir_ + "/run-e2e";
  const CliResult r = runTpscope("arms " + spec + " --out " + run, "TPSCOPE_METER_FAKE=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Engine: llama-server (build "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tiny-q4_k.gguf"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("## The engine's timings beside the client's clock"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("arm B rep 2/2"), std::string::npos) << r.err;
  // Every repetition: both windows from the stream, the server's timings beside them.
  int reps = 0;
  std::istringstream results(readFile(run + "/results.jsonl"));
  for (std::string line; std::getline(results, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.at("valid").get<bool>()) << line;
    ++reps;
    ASSERT_EQ(j.at("phases").size(), 2u);
    const nlohmann::json& prefill = j["phases"][0];
    const nlohmann::json& decode = j["phases"][1];
    EXPECT_EQ(prefill.at("tokens").get<int>(), 64);
    EXPECT_EQ(prefill.at("engine").at("prompt_n").get<int>(), 64);
    EXPECT_EQ(decode.at("engine").at("predicted_n").get<int>(), 32);
    EXPECT_EQ(decode.at("tokens").get<int>(), 31);  // the first token closes prefill
    EXPECT_LE(prefill.at("end_ns").get<int64_t>(), decode.at("start_ns").get<int64_t>());
    EXPECT_LT(decode.at("start_ns").get<int64_t>(), decode.at("end_ns").get<int64_t>());
    EXPECT_GT(decode.at("engine_tok_s").get<double>(), 0);
  }
  EXPECT_EQ(reps, 4);
  // The manifest carries what each server decided; the logs are in the folder.
  const nlohmann::json m = nlohmann::json::parse(readFile(run + "/manifest.json"));
  bool saw_ctx = false;
  for (const auto& s : m.at("effective")[0].at("settings"))
    if (s.at("key") == "server_n_ctx") saw_ctx = s.at("value") == "32768" && s.at("source") == "engine";
  EXPECT_TRUE(saw_ctx) << m.at("effective")[0].dump();
  EXPECT_NE(readFile(run + "/server-A.log").find("# tpscope arms: arm A"), std::string::npos);
  EXPECT_TRUE(fs::exists(run + "/server-B.log"));
  EXPECT_TRUE(serversNaming(model_).empty());
  // The folder renders the same report again.
  const CliResult again = runTpscope("report " + run);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
}

// A server that decides its own context per arm, as --fit does: a wrapper adds -c 4096 under layer split.
TEST_F(LlamaServerArms, ServersThatDecideDifferentContextsAreRefused) {
  const std::string wrapper = dir_ + "/fitting-server.sh";
  std::ofstream(wrapper) << "#!/bin/sh\ncase \"$*\" in *\"-sm layer\"*) exec \"" << server_
                         << "\" \"$@\" -c 4096 ;; esac\nexec \"" << server_ << "\" \"$@\"\n";
  chmod(wrapper.c_str(), 0755);
  const std::string run = dir_ + "/run-ctx";
  const CliResult r = runTpscope("arms " + writeSpec("ctx", "", 32, wrapper) + " --out " + run, "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("decided differently"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("server_n_ctx"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4096"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("32768"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(run + "/manifest.json"));
  EXPECT_EQ(readFile(run + "/results.jsonl"), "");  // nothing was measured
  EXPECT_TRUE(serversNaming(model_).empty());
}

// Speculative arms run what they ask for: the model as its own draft, and n-gram lookup without one.
TEST_F(LlamaServerArms, SpeculativeArmsRunWhatTheyAsk) {
  const std::string path = dir_ + "/spec.toml", run = dir_ + "/run-spec";
  std::ofstream(path) << "[experiment]\nname = \"spec\"\nengine = \"llama-server\"\nserver = \"" << server_
                      << "\"\nmodel = \"" << model_
                      << "\"\nflags = \"-c 4096 -ngl 0 -t 2 --parallel 1 --temp 0\"\nprompt_tokens = 64\n"
                      << "decode_tokens = 48\nrepetitions = 1\nidle_seconds = 0.1\nbaseline_threshold_mbps = 100000\n"
                      << "[[arm]]\nname = \"A\"\n[[arm]]\nname = \"C'\"\ndraft = \"self\"\ndraft_max = 3\n"
                      << "[[arm]]\nname = \"N\"\nspec_type = \"ngram-simple\"\n";
  const CliResult r = runTpscope("arms " + path + " --out " + run, "TPSCOPE_METER_FAKE=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| C' | single GPU, draft self, up to 3 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| N | single GPU, ngram-simple |"), std::string::npos) << r.out;
  const nlohmann::json m = nlohmann::json::parse(readFile(run + "/manifest.json"));
  std::vector<std::string> in_effect;
  for (const auto& arm : m.at("effective"))
    for (const auto& s : arm.at("settings"))
      if (s.at("key") == "speculative_in_effect") in_effect.push_back(s.at("value"));
  EXPECT_EQ(in_effect, (std::vector<std::string>{"none", "draft-simple", "ngram-simple"}));
  // Greedy sampling: the model drafting for itself is accepted (nearly) always.
  std::istringstream results(readFile(run + "/results.jsonl"));
  for (std::string line; std::getline(results, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("arm") != "C'") continue;
    const nlohmann::json& t = j["phases"][1]["engine"];
    ASSERT_GT(t.value("draft_n", 0), 0) << line;
    EXPECT_GE(t.value("draft_n_accepted", 0), t.value("draft_n", 0) * 9 / 10) << line;
  }
  EXPECT_NE(r.out.find("| C' | decode |"), std::string::npos) << r.out;
}

// tpscope in the background, its stderr in a file.
struct Background {
  std::unique_ptr<engine::ChildProcess> p;
  std::string err;
};
Background startTpscope(const std::string& args, const std::string& err) {
  Background b;
  b.err = err;
  std::string error;
  engine::SpawnOptions o;
  o.argv = {"sh", "-c", "exec " + tpscopePath() + " " + args + " > /dev/null 2> " + err};
  o.env = {{"TPSCOPE_METER_FAKE", "1"}};
  EXPECT_TRUE(engine::ChildProcess::spawn(o, &b.p, &error)) << error;
  return b;
}

TEST_F(LlamaServerArms, AServerKilledMidRequestIsAClearErrorWithACompleteFolder) {
  const std::string run = dir_ + "/run-kill";
  Background t = startTpscope("arms " + writeSpec("kill", "", 20000) + " --out " + run, dir_ + "/kill.err");
  // Once the measured request streams (after the probe, the warm-up and the quiet interval), kill the server.
  ASSERT_TRUE(waitFor([&] { return readFile(t.err).find("arm A rep 1/2: quiescing") != std::string::npos; }, 60))
      << readFile(t.err);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const std::vector<pid_t> servers = serversNaming(model_);
  ASSERT_EQ(servers.size(), 1u);
  kill(servers[0], SIGKILL);
  ASSERT_TRUE(waitFor([&] { return !t.p->running(); }, 30));
  EXPECT_EQ(t.p->exitDescription(), "exited with status 1");
  const std::string err = readFile(t.err);
  EXPECT_NE(err.find("llama-server"), std::string::npos) << err;
  EXPECT_NE(err.find("killed by signal 9"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(run + "/manifest.json"));
  EXPECT_TRUE(fs::exists(run + "/results.jsonl"));
  EXPECT_TRUE(fs::exists(run + "/samples.jsonl"));
  EXPECT_NE(readFile(run + "/server-A.log").find("llama_context"), std::string::npos);
  EXPECT_TRUE(serversNaming(model_).empty());
}

TEST_F(LlamaServerArms, SigintLeavesNoServerRunning) {
  const std::string run = dir_ + "/run-int";
  Background t = startTpscope("arms " + writeSpec("int", "", 20000) + " --out " + run, dir_ + "/int.err");
  ASSERT_TRUE(waitFor([&] { return serversNaming(model_).size() == 1; }, 60)) << readFile(t.err);
  kill(t.p->pid(), SIGINT);
  ASSERT_TRUE(waitFor([&] { return !t.p->running(); }, 30));
  EXPECT_TRUE(waitFor([&] { return serversNaming(model_).empty(); }, 10)) << "a llama-server outlived tpscope";
  EXPECT_TRUE(fs::exists(run + "/manifest.json"));
}

TEST_F(LlamaServerArms, BadInputIsOneLineAndNoServerIsLeft) {
  std::string spec = writeSpec("missing");
  std::string text = readFile(spec);
  text.replace(text.find(model_), model_.size(), dir_ + "/absent.gguf");
  std::ofstream(spec) << text;
  CliResult r = runTpscope("arms " + spec, "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("absent.gguf does not exist"), std::string::npos) << r.err;
  text.replace(text.find(dir_ + "/absent.gguf"), (dir_ + "/absent.gguf").size(), spec);  // a TOML file
  std::ofstream(spec) << text;
  r = runTpscope("arms " + spec, "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not a GGUF file"), std::string::npos) << r.err;
  // A server that does not start: one line with its exit and the end of its log, the folder kept.
  const std::string broken = dir_ + "/broken-server.sh";
  std::ofstream(broken) << "#!/bin/sh\necho 'error: this server cannot start' >&2\nexit 3\n";
  chmod(broken.c_str(), 0755);
  r = runTpscope("arms " + writeSpec("broken", "", 32, broken) + " --out " + dir_ + "/run-broken",
                 "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("llama-server exited before it was ready (exited with status 3)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this server cannot start"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir_ + "/run-broken/manifest.json"));
  // A server that never answers /health: stopped after start_timeout_s, one line says so.
  const std::string hanging = dir_ + "/hanging-server.sh";
  std::ofstream(hanging) << "#!/bin/sh\nexec sleep 60\n";
  chmod(hanging.c_str(), 0755);
  spec = writeSpec("hang", "", 32, hanging);
  text = readFile(spec);
  text.replace(text.find("start_timeout_s = 60"), 20, "start_timeout_s = 1");
  std::ofstream(spec) << text;
  r = runTpscope("arms " + spec + " --out " + dir_ + "/run-hang", "TPSCOPE_METER_FAKE=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("llama-server was not ready after 1 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 15"), std::string::npos) << r.err;
  // A port in use.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  listen(fd, 1);
  r = runTpscope(
      "arms " + writeSpec("port", "port = " + std::to_string(ntohs(a.sin_port))) + " --out " + dir_ + "/run-port",
      "TPSCOPE_METER_FAKE=1");
  close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is in use"), std::string::npos) << r.err;
  EXPECT_TRUE(serversNaming(model_).empty());
}

}  // namespace
}  // namespace tpscope::testing
