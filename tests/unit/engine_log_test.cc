// SPDX-License-Identifier: Apache-2.0
// What llama-server's log and endpoints say, read without a server: startup settings, AllReduce
// fallbacks, Prometheus counters; and a child process that cannot outlive its parent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/llama_server.h"
#include "engine/process.h"

namespace tpscope::engine {
namespace {

// Lines as llama.cpp 0c1e570 prints them (src/llama-context.cpp, llama-model.cpp, llama-kv-cache.cpp,
// common/fit.cpp, ggml-cuda.cu); the second llama_context block is a draft model's.
const char* kLog =
    R"(common_fit_params: failed to fit params to free device memory: llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort
load_tensors: offloaded 37/37 layers to GPU
llama_context: n_seq_max             = 1
llama_context: n_ctx                 = 16384
llama_context: n_batch               = 2048
llama_context: n_ubatch              = 512
llama_context: flash_attn            = enabled
llama_context: kv_unified            = false
llama_kv_cache: size = 2304.00 MiB ( 16384 cells,  36 layers,  1/1 seqs), K (f16): 1152.00 MiB, V (f16): 1152.00 MiB
NCCL not compiled in; falling back to internal AllReduce.  Recompile with -DGGML_CUDA_NCCL=ON for best multi-GPU performance.
llama_context: n_ctx                 = 4096
load_tensors: offloaded 5/5 layers to GPU
)";

TEST(EngineLog, SettingsFromTheStartupLog) {
  const KeyValues s = settingsFromLog(kLog);
  auto get = [&s](const std::string& k) {
    for (const auto& kv : s)
      if (kv.first == k) return kv.second;
    return std::string("missing");
  };
  EXPECT_EQ(get("n_ctx"), "16384");  // the target's, not the draft's
  EXPECT_EQ(get("n_batch"), "2048");
  EXPECT_EQ(get("n_ubatch"), "512");
  EXPECT_EQ(get("flash_attn"), "enabled");
  EXPECT_EQ(get("kv_cache"), "K f16, V f16");
  EXPECT_EQ(get("offloaded_layers"), "37/37");
  EXPECT_EQ(get("fit"), "failed: llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort");
  // Every key is always there, in one order, so two arms' lists line up.
  const KeyValues empty = settingsFromLog("");
  ASSERT_EQ(empty.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(empty[i].first, s[i].first);
  EXPECT_EQ(empty.back().second, "no message");
}

TEST(EngineLog, FallbacksAreFound) {
  const std::vector<std::string> f = fallbacksInLog(kLog);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("NCCL not compiled in"), std::string::npos);
  EXPECT_TRUE(fallbacksInLog("llama_context: n_ctx = 1\n").empty());
  EXPECT_EQ(fallbacksInLog("unknown GGML_CUDA_ALLREDUCE value: tpscope\n").size(), 1u);
  // The tpscope path's own lines (integrations/llama.cpp/ggml-cuda/tpscope-comm.cpp and the patch).
  EXPECT_EQ(fallbacksInLog("tpscope AllReduce unavailable; using llama.cpp's default AllReduce\n").size(), 1u);
  EXPECT_EQ(fallbacksInLog("GGML_CUDA_ALLREDUCE=tpscope but tpscope is not compiled in (-DGGML_CUDA_TPSCOPE=ON); "
                           "using llama.cpp's default AllReduce\n")
                .size(),
            1u);
  EXPECT_EQ(fallbacksInLog("ggml_cuda_tpscope_allreduce: tpscope AllReduce: tensors of type q8_0 (tpscope reduces "
                           "f32, f16 and bf16); such tensors use llama.cpp's own AllReduce (said once)\n")
                .size(),
            1u);
  const std::string started =
      "ggml_cuda_tpscope_init: tpscope AllReduce (tpscope 0.1.0, TPSCOPE_ALLREDUCE=p2p) over CUDA devices 0,1\n";
  EXPECT_TRUE(fallbacksInLog(started).empty());
  EXPECT_TRUE(tpscopeInLog(started));
  EXPECT_FALSE(
      tpscopeInLog("ggml_cuda_init: GGML_CUDA_ALLREDUCE=tpscope (tpscope 0.1.0, auto): tensor-parallel "
                   "splits reduce with tpscope\n"));
}

TEST(EngineLog, PrometheusAndProps) {
  const auto m = parsePrometheus(
      "# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total counter\n"
      "llamacpp:prompt_tokens_total 512\nllamacpp:requests_processing 0\nfoo{a=\"b\"} 2.5\n");
  EXPECT_DOUBLE_EQ(m.at("llamacpp:prompt_tokens_total"), 512);
  EXPECT_DOUBLE_EQ(m.at("llamacpp:requests_processing"), 0);
  EXPECT_DOUBLE_EQ(m.at("foo"), 2.5);
  const nlohmann::json props = {{"default_generation_settings", {{"n_ctx", 4096}}},
                                {"total_slots", 1},
                                {"model_path", "/m.gguf"},
                                {"build_info", "b1-0c1e570"},
                                {"tpscope_model_meta", {{"n_vocab", 32000}, {"size", 4900000000}}}};
  const KeyValues p = settingsFromProps(props);
  EXPECT_EQ(p[0], (std::pair<std::string, std::string>{"slot_n_ctx", "4096"}));
  EXPECT_EQ(p[2].second, "/m.gguf");
  EXPECT_EQ(p[4].second, "b1-0c1e570");
}

TEST(EngineLog, TailLines) {
  EXPECT_EQ(tailLines("a\n\nb\nc\n", 2), "  b\n  c\n");
  EXPECT_EQ(tailLines("", 3), "");
}

TEST(EngineProcess, StartsStopsAndReportsHowItEnded) {
  std::unique_ptr<ChildProcess> p;
  std::string error;
  ASSERT_TRUE(ChildProcess::spawn({{"sleep", "30"}, {}, {}, ""}, &p, &error)) << error;
  EXPECT_TRUE(p->running());
  EXPECT_EQ(p->stop(2), "killed by signal 15 (Terminated)");
  EXPECT_FALSE(p->running());
  // A program that ignores SIGTERM is killed after the grace period.
  ASSERT_TRUE(ChildProcess::spawn({{"sh", "-c", "trap '' TERM; sleep 30"}, {}, {}, ""}, &p, &error)) << error;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(p->stop(0.3), "killed by signal 9 (Killed)");
  ASSERT_TRUE(ChildProcess::spawn({{"sh", "-c", "exit 3"}, {}, {}, ""}, &p, &error)) << error;
  while (p->running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(p->exitDescription(), "exited with status 3");
  EXPECT_FALSE(ChildProcess::spawn({{"/nonexistent/llama-server"}, {}, {}, ""}, &p, &error));
  EXPECT_NE(error.find("is not an executable file"), std::string::npos) << error;
}

TEST(EngineProcess, EnvironmentIsSetAndUnset) {
  char log[] = "/tmp/tpscope_env_XXXXXX";
  close(mkstemp(log));
  setenv("TPSCOPE_TEST_DROP", "1", 1);
  std::unique_ptr<ChildProcess> p;
  std::string error;
  ASSERT_TRUE(ChildProcess::spawn({{"sh", "-c", "echo \"A=$TPSCOPE_TEST_A D=${TPSCOPE_TEST_DROP-unset}\""},
                                   {{"TPSCOPE_TEST_A", "x y"}},
                                   {"TPSCOPE_TEST_DROP"},
                                   log},
                                  &p, &error))
      << error;
  while (p->running()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  FILE* f = fopen(log, "r");
  char buf[128] = {};
  ASSERT_NE(fgets(buf, sizeof(buf), f), nullptr);
  fclose(f);
  remove(log);
  EXPECT_STREQ(buf, "A=x y D=unset\n");
}

// The child dies with the thread that started it, even when that thread is killed: a forked helper
// starts `sleep`, then is killed -9; the sleep must be gone.
TEST(EngineProcess, ChildDiesWithItsParent) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t helper = fork();
  if (helper == 0) {
    std::unique_ptr<ChildProcess> p;
    std::string error;
    if (!ChildProcess::spawn({{"sleep", "60"}, {}, {}, ""}, &p, &error)) _exit(1);
    const pid_t child = p->pid();
    (void)!write(pipefd[1], &child, sizeof(child));
    pause();
    _exit(0);
  }
  pid_t child = 0;
  ASSERT_EQ(read(pipefd[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  kill(helper, SIGKILL);
  waitpid(helper, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    // The orphan is reparented and reaped by init; until then it is a zombie or still exiting.
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", child);
    FILE* f = fopen(path, "r");
    if (!f) {
      gone = true;
      break;
    }
    char state = 0;
    (void)!fscanf(f, "%*d %*s %c", &state);
    fclose(f);
    gone = state == 'Z' || state == 'X';
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "sleep " << child << " outlived the process that started it";
  if (!gone) kill(child, SIGKILL);
}

}  // namespace
}  // namespace tpscope::engine
