// SPDX-License-Identifier: Apache-2.0
// llama_server.h - llama.cpp's llama-server as a workload: start it, learn what it decided, send one
// request at a time, take the phase edges from its token stream, stop it.
//
// One server per arm. start() returns once GET /health answers 200 (the model is loaded), or fails
// with the reason and the last lines of the server's log when it exits, hangs or cannot bind its port.
// complete() streams one /completion: the prompt as token ids (no tokenizer in the way, the same
// prompt in every arm), exactly n_predict tokens (ignore_eos), no prompt cache, greedy sampling. The
// edges come from the client's clock (Meter::now's CLOCK_MONOTONIC): sent = just before the request
// is written, first = the first event carrying a token, last = the last such event. The server's own
// `timings` ride along; they are the study's figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/process.h"
#include "meter/control.h"
#include "tpscope/tpscope.h"

namespace tpscope::engine {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct LlamaServerOptions {
  std::string binary;              // llama-server
  std::vector<std::string> args;   // everything after the binary except --host/--port (added here)
  KeyValues env;                   // e.g. CUDA_VISIBLE_DEVICES, GGML_CUDA_ALLREDUCE
  std::vector<std::string> unset;  // variables the server must not inherit
  std::string host = "127.0.0.1";
  int port = 0;                    // 0: a free port picked here
  std::string log_path;            // the server's stdout and stderr
  double start_timeout_s = 600;    // model load included
  double request_timeout_s = 300;  // longest silence inside a request
  double stop_grace_s = 10;        // SIGTERM, then SIGKILL
};

struct Completion {
  int64_t sent_ns = 0, first_ns = 0, last_ns = 0, done_ns = 0;
  int64_t tokens = 0;        // tokens streamed
  int64_t first_tokens = 0;  // tokens in the first token event (the rest are the decode window's)
  int64_t token_events = 0;  // events that carried tokens
  nlohmann::json timings;    // the server's: prompt_n, prompt_ms, predicted_n, predicted_ms, ...
};

// One streamed /completion as it arrives: the server-sent event lines, however the reads cut them, into
// the token counts, the edges (`clock` stamps each event that carries tokens) and the server's timings.
// A "data: " line is one JSON event (an object); an "error:" line, or an event with an "error" key, is
// the stream's error; other lines (SSE comments, "event:" fields) are skipped, as are events that are
// not JSON objects (nested deeper than kMaxJsonDepth included) and fields of another type than
// llama-server's. A line over kMaxEventLine bytes is an error (the memory a stream holds stays bounded).
class CompletionStream {
 public:
  static constexpr size_t kMaxEventLine = 1 << 20;
  explicit CompletionStream(std::function<int64_t()> clock) : clock_(std::move(clock)), lines_(kMaxEventLine) {}
  void feed(std::string_view bytes);
  const Completion& completion() const { return c_; }
  bool stopped() const { return stopped_; }            // an event said "stop": true
  const std::string& error() const { return error_; }  // what the stream reported; "" when nothing

 private:
  void line(std::string line);
  std::function<int64_t()> clock_;
  detail::LineSplitter lines_;
  Completion c_;
  bool stopped_ = false;
  std::string error_;
};

class LlamaServer {
 public:
  static tpsResult_t start(const LlamaServerOptions& options, std::unique_ptr<LlamaServer>* out, std::string* reason);
  ~LlamaServer();  // stop()

  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  bool alive() { return child_->running(); }

  tpsResult_t props(nlohmann::json* out, std::string* reason);
  // GET /metrics (needs --metrics): Prometheus counters by name; tpsUnavailable when not enabled;
  // tpsSystemError when a llamacpp: value is NaN or infinite (named in *reason).
  tpsResult_t metrics(std::map<std::string, double>* out, std::string* reason);
  tpsResult_t complete(const std::vector<int>& prompt, int n_predict, Completion* out, std::string* reason);
  // SIGTERM, SIGKILL after the grace period; how it ended. Idempotent.
  std::string stop();
  // The server's log so far.
  std::string log() const;

 private:
  LlamaServer() = default;
  // Why the server is gone or did not answer, with the last lines of its log.
  std::string gone(const std::string& what);
  LlamaServerOptions options_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> child_;
};

// GET /props' body, with the model's meta from GET /v1/models' body (its data[0].meta) added as
// "tpscope_model_meta" when there is one (`models`: nullopt when that request failed). False with *why
// when the props body is not a JSON object (or nests deeper than kMaxJsonDepth); a models body without
// meta, or one that does not parse, adds nothing.
bool propsFromBodies(const std::string& props, const std::optional<std::string>& models, nlohmann::json* out,
                     std::string* why);

// What a server decided for itself, from its startup log: n_ctx, n_batch, n_ubatch, n_seq_max,
// flash_attn, kv_unified, kv_cache (K and V types), offloaded_layers ("37/37"), fit (what --fit did,
// "no message" when it said nothing). The first occurrence wins: a draft model's context comes second.
KeyValues settingsFromLog(const std::string& log);
// The same from GET /props: slot_n_ctx, total_slots, model_path, model_ftype, build_info.
KeyValues settingsFromProps(const nlohmann::json& props);
// Log lines where llama.cpp says it did not do what it was asked: an AllReduce that fell back to
// another, an unknown GGML_CUDA_ALLREDUCE value. Empty when there are none.
std::vector<std::string> fallbacksInLog(const std::string& log);

// Whether the log shows tpscope's AllReduce started (integrations/llama.cpp's patch, GGML_CUDA_ALLREDUCE=tpscope):
// "tpscope AllReduce (tpscope VERSION, BACKEND, wire WIRE) over CUDA devices 0,1".
bool tpscopeInLog(const std::string& log);
// The wire that line names ("exact", "fp8", "auto:0.01"); nullopt where no such line names one (a build of
// the patch from before it said its wire).
std::optional<std::string> tpscopeWireInLog(const std::string& log);
// The last `n` non-empty lines of a log, for error messages.
std::string tailLines(const std::string& log, int n);
// Prometheus text format -> name -> value (labels dropped; comments skipped).
std::map<std::string, double> parsePrometheus(const std::string& text);
// "NAME = nan, not a finite number" for the first of llama.cpp's metrics ("llamacpp:...") that is NaN or
// infinite, else "". The text format may say NaN or +Inf; llama.cpp's counters and gauges never do, and
// a run folder's JSON could not hold either, so one is refused where it comes in (LlamaServer::metrics).
std::string nonFiniteServerMetric(const std::map<std::string, double>& metrics);
// Shell words ("-c 16384 --chat-template-kwargs '{\"a\":1}'") -> argv items; false with *error for
// unbalanced quotes or substitutions, which are never run.
bool splitShellWords(const std::string& text, std::vector<std::string>* words, std::string* error);

}  // namespace tpscope::engine
