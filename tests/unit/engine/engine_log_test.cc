// SPDX-License-Identifier: Apache-2.0
// What llama-server's log and endpoints say, read without a server: startup settings, AllReduce
// fallbacks, Prometheus counters; and a child process that cannot outlive its parent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
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
  EXPECT_FALSE(tpscopeWireInLog(started));  // a build that did not say its wire
  const std::string fp8 =
      "ggml_cuda_tpscope_init: tpscope AllReduce (tpscope 0.1.0, auto, wire fp8) over CUDA devices 0,1\n";
  EXPECT_TRUE(tpscopeInLog(fp8));
  EXPECT_EQ(tpscopeWireInLog(fp8), "fp8");
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

// Found by fuzz/engine/server_text_fuzz.cc (one input in tens of milliseconds): std::regex recursed once
// per character, so one long log line after a known prefix overflowed the stack.
TEST(EngineLog, AVeryLongLineIsReadWithoutRecursion) {
  const std::string big(200000, 'x');
  KeyValues s = settingsFromLog("llama_context: n_ctx = " + big + "\nload_tensors: offloaded " +
                                std::string(200000, '1') + "\nllama_kv_cache: size = " + big + "K (f16) V (q8_0)\n");
  EXPECT_EQ(s[0].second, big);
  EXPECT_EQ(s[6].second, "K f16, V q8_0");
  EXPECT_EQ(s[7].second, "not in the log");
  s = settingsFromLog("failed to fit params to free device memory: " + big);
  EXPECT_EQ(s.back().second, "failed: " + big);
  EXPECT_FALSE(tpscopeInLog("tpscope AllReduce (tpscope " + big));
  EXPECT_TRUE(tpscopeInLog("tpscope AllReduce (tpscope " + big + ") over CUDA devices 0,1\n"));
}

// Found by fuzz/engine/server_text_fuzz.cc: a log value that is not UTF-8 reached the manifest, whose
// JSON writer throws on it.
TEST(EngineLog, ValuesThatAreNotUtf8AreRepaired) {
  const KeyValues s = settingsFromLog(
      "llama_context: n_ctx                 = 16\xff\n"
      "failed to fit params to free device memory: no \xc3\n");
  EXPECT_EQ(s[0].second, "16\xef\xbf\xbd");
  EXPECT_EQ(s.back().second, "failed: no \xef\xbf\xbd");
  for (const auto& kv : s) EXPECT_NO_THROW((void)nlohmann::json(kv.second).dump()) << kv.first;
}

TEST(EngineLog, LogLinesAsTheServerWritesThem) {
  const KeyValues s = settingsFromLog(
      "llama_context: n_ctx_seq             = 16384\nllama_context: n_batch   =   2048\r\n"
      "x llama_context: n_ubatch = 512 tail\nllama_context: flash_attn =\nllama_context: n_seq_max= 1\n"
      "llama_kv_cache: size = 1 MiB, K (f16): 1 MiB, K (bf16): 2, V (q8_0): 1, V (q4_0): 2\n"
      "offloaded 5/x layers to GPU offloaded 12/37 layers to GPU\n");
  EXPECT_EQ(s[0].second, "not in the log");  // n_ctx_seq is not n_ctx
  EXPECT_EQ(s[1].second, "2048");            // \r is a blank, not part of the value
  EXPECT_EQ(s[2].second, "512");             // anywhere in the line
  EXPECT_EQ(s[3].second, "not in the log");  // no '=' after blanks
  EXPECT_EQ(s[4].second, "not in the log");  // flash_attn had no value
  EXPECT_EQ(s[6].second, "K bf16, V q4_0");  // the last K before the last V, as the greedy pattern took them
  EXPECT_EQ(s[7].second, "12/37");
}

TEST(EngineStream, CountsTokensAndTakesTheEdgesAndTimings) {
  int64_t t = 0;
  CompletionStream s([&t] { return ++t; });
  const std::string body =
      ": ping\n\ndata: {\"content\":\"He\",\"tokens\":[9906,1],\"stop\":false}\r\n\r\n"
      "event: x\ndata: {\"content\":\"llo\",\"stop\":false}\n\n"
      "data: {\"content\":\"\",\"tokens\":[],\"stop\":true,\"timings\":{\"predicted_n\":3}}\n\n";
  for (char c : body) s.feed(std::string_view(&c, 1));  // one byte per read
  const Completion& c = s.completion();
  EXPECT_EQ(c.tokens, 3);
  EXPECT_EQ(c.first_tokens, 2);
  EXPECT_EQ(c.token_events, 2);
  EXPECT_EQ(c.first_ns, 1);
  EXPECT_EQ(c.last_ns, 2);
  EXPECT_EQ(c.timings["predicted_n"], 3);
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.error(), "");
}

// Found by fuzz/engine/sse_fuzz.cc: json::value() threw on a field of another type ("content": -2), out
// of the HTTP client's callback.
TEST(EngineStream, FieldsOfAnotherTypeCarryNothing) {
  int64_t t = 0;
  CompletionStream s([&t] { return ++t; });
  s.feed(
      "data: {\"index\":0,\"content\":-2,\"tokens\":[],\"stop\":false}\n\ndata: 5\n\ndata: [1]\n\n"
      "data: {\"stop\":\"yes\",\"tokens\":{}}\n\ndata: \"[DONE]\"\n\n");
  EXPECT_EQ(s.completion().tokens, 0);
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.error(), "");
  s.feed("data: {\"error\":{\"code\":500}}\n");
  EXPECT_EQ(s.error(), "{\"code\":500}");
}

TEST(EngineStream, AnOverlongEventLineIsAnError) {
  CompletionStream s([] { return int64_t{1}; });
  s.feed("data: {\"content\":\"" + std::string(CompletionStream::kMaxEventLine, 'a'));
  s.feed("\"}\n\n");
  EXPECT_NE(s.error().find("longer than"), std::string::npos) << s.error();
  EXPECT_EQ(s.completion().tokens, 0);
}

// Found by fuzz/experiment/server_answers_fuzz.cc (ASan: heap-use-after-free): /v1/models with a model
// that has no "meta" was read through const operator[], which reads past a missing key.
TEST(EngineLog, PropsTakeTheModelsMetaOnlyWhereThereIsOne) {
  nlohmann::json p;
  std::string why;
  ASSERT_TRUE(propsFromBodies(R"({"total_slots":1})", std::string(R"({"data":[{"id":"m"}]})"), &p, &why)) << why;
  EXPECT_FALSE(p.contains("tpscope_model_meta"));
  for (const char* models : {"[]", "{\"data\":7}", "{\"data\":[3]}", "not json", "{\"data\":[]}"}) {
    ASSERT_TRUE(propsFromBodies("{}", std::string(models), &p, &why)) << models;
    EXPECT_FALSE(p.contains("tpscope_model_meta")) << models;
  }
  ASSERT_TRUE(propsFromBodies("{}", std::string(R"({"data":[{"meta":{"n_vocab":7}}]})"), &p, &why));
  EXPECT_EQ(p["tpscope_model_meta"]["n_vocab"], 7);
  EXPECT_FALSE(propsFromBodies("[1, 2]", std::nullopt, &p, &why));
  EXPECT_NE(why.find("not an object"), std::string::npos) << why;
  EXPECT_FALSE(propsFromBodies("{", std::nullopt, &p, &why));
  EXPECT_NE(why.find("does not parse"), std::string::npos) << why;
}

// A server's answer nested a million deep: the props body is refused with why, a models body that deep
// adds nothing (its meta was copied, recursing once per level until the stack ran out), and a stream
// event that deep is skipped while the events around it count.
TEST(EngineLog, AnswersNestedTooDeepAreRefusedNotCopied) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  nlohmann::json p;
  std::string why;
  EXPECT_FALSE(propsFromBodies("{\"a\": " + deep + "}", std::nullopt, &p, &why));
  EXPECT_NE(why.find("its body does not parse (line 1: arrays and objects nested deeper than 64 levels)"),
            std::string::npos)
      << why;
  ASSERT_TRUE(propsFromBodies("{}", "{\"data\":[{\"meta\":" + deep + "}]}", &p, &why)) << why;
  EXPECT_FALSE(p.contains("tpscope_model_meta"));
  int64_t t = 0;
  CompletionStream s([&t] { return ++t; });
  s.feed("data: {\"content\":\"a\",\"tokens\":[1]}\n\ndata: {\"timings\":" + deep.substr(0, 300000) +
         deep.substr(deep.size() - 300000) + "}\n\ndata: {\"content\":\"b\",\"tokens\":[2],\"stop\":true}\n\n");
  EXPECT_EQ(s.completion().tokens, 2);
  EXPECT_TRUE(s.stopped());
  EXPECT_TRUE(s.completion().timings.is_null());
}

// Prometheus text may say NaN or +Inf: llama.cpp's own metrics never do, and one that does is refused
// with its name and value where it comes in (a run folder could not hold it).
TEST(EngineLog, NonFiniteServerMetricsAreNamed) {
  EXPECT_EQ(nonFiniteServerMetric(parsePrometheus("llamacpp:tokens_predicted_total 12\nllamacpp:x 0.5\n")), "");
  EXPECT_EQ(nonFiniteServerMetric(parsePrometheus("process_cpu_seconds NaN\n")), "");  // not llama.cpp's own
  EXPECT_EQ(nonFiniteServerMetric(parsePrometheus("llamacpp:tokens_predicted_total NaN\n")),
            "llamacpp:tokens_predicted_total = nan, not a finite number");
  EXPECT_EQ(nonFiniteServerMetric(parsePrometheus("llamacpp:prompt_tokens_total{a=\"b\"} +Inf\n")),
            "llamacpp:prompt_tokens_total = inf, not a finite number");
  EXPECT_EQ(nonFiniteServerMetric(parsePrometheus("llamacpp:requests_deferred -Inf\n")),
            "llamacpp:requests_deferred = -inf, not a finite number");
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

// What `tpscope meter -- CMD` reads back: a blocking wait, the shell's exit code, and why a start failed.
TEST(EngineProcess, WaitsAndSaysHowItEndedAsAShellWould) {
  std::unique_ptr<ChildProcess> p;
  std::string error;
  SpawnOptions o{{"sh", "-c", "exit 3"}, {}, {}, ""};
  o.inherit_stdio = true;
  o.die_with_parent = false;
  ASSERT_TRUE(ChildProcess::spawn(o, &p, &error)) << error;
  EXPECT_EQ(p->exitCode(), -1);
  EXPECT_TRUE(p->wait());
  EXPECT_EQ(p->exitCode(), 3);
  ASSERT_TRUE(ChildProcess::spawn({{"sh", "-c", "kill -TERM $$"}, {}, {}, ""}, &p, &error)) << error;
  EXPECT_TRUE(p->wait());
  EXPECT_EQ(p->exitCode(), 128 + SIGTERM);
  int e = 0;
  EXPECT_FALSE(ChildProcess::spawn({{"tpscope-no-such-program"}, {}, {}, ""}, &p, &error, &e));
  EXPECT_EQ(e, ENOENT) << error;
  EXPECT_FALSE(ChildProcess::spawn({{"/tmp"}, {}, {}, ""}, &p, &error, &e));
  EXPECT_EQ(e, EACCES) << error;
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
