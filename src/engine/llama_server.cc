// SPDX-License-Identifier: Apache-2.0
// llama_server.cc - start/health/props/metrics/completion/stop, and what the log says it decided.
#include "engine/llama_server.h"

#include <fmt/format.h>
#include <wordexp.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "engine/http.h"
#include "tpscope/meter.h"

namespace tpscope::engine {

using nlohmann::json;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

tpsResult_t LlamaServer::start(const LlamaServerOptions& o, std::unique_ptr<LlamaServer>* out, std::string* reason) {
  std::unique_ptr<LlamaServer> s(new LlamaServer());
  s->options_ = o;
  s->port_ = o.port;
  if (s->port_ == 0) {
    s->port_ = freeLocalPort();
    if (s->port_ == 0) {
      *reason = "no free TCP port on " + o.host + " for llama-server";
      return tpsSystemError;
    }
  } else if (portInUse(o.host, s->port_)) {
    *reason = fmt::format(
        "port {} on {} is in use: name another port in [experiment] port, or leave it out and "
        "tpscope picks a free one",
        s->port_, o.host);
    return tpsInvalidArgument;
  }
  SpawnOptions sp;
  sp.argv = {o.binary};
  sp.argv.insert(sp.argv.end(), o.args.begin(), o.args.end());
  for (const std::string& a : {std::string("--host"), o.host, std::string("--port"), std::to_string(s->port_)})
    sp.argv.push_back(a);
  sp.env = o.env;
  sp.unset = o.unset;
  sp.log_path = o.log_path;
  if (!ChildProcess::spawn(sp, &s->child_, reason)) return tpsInvalidArgument;

  // Ready when /health answers 200; 503 while the model loads; no answer before the port is bound.
  const auto t0 = std::chrono::steady_clock::now();
  std::string last;
  while (true) {
    if (!s->child_->running()) {
      *reason = s->gone("exited before it was ready");
      return tpsSystemError;
    }
    const HttpResult h = httpGet(o.host, s->port_, "/health", 2);
    if (h.ok()) break;
    last = h.error.empty() ? fmt::format("HTTP {}", h.status) : h.error;
    if (secondsSince(t0) > o.start_timeout_s) {
      const std::string how = s->child_->stop(o.stop_grace_s);
      *reason = s->gone(fmt::format("was not ready after {:g} s (last answer from /health: {}; stopped: {})",
                                    o.start_timeout_s, last, how));
      return tpsTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *out = std::move(s);
  return tpsSuccess;
}

LlamaServer::~LlamaServer() { stop(); }

std::string LlamaServer::stop() { return child_ ? child_->stop(options_.stop_grace_s) : "not started"; }

std::string LlamaServer::log() const {
  std::ifstream f(options_.log_path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string LlamaServer::gone(const std::string& what) {
  std::string s = fmt::format("llama-server {}", what);
  // A connection that broke because the server died can be seen before the exit is: wait a moment.
  for (int i = 0; i < 50 && child_->running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!child_->running()) s += fmt::format(" ({})", child_->exitDescription());
  const std::string tail = tailLines(log(), 6);
  if (!tail.empty()) s += "; the end of its log (" + options_.log_path + "):\n" + tail;
  return s;
}

tpsResult_t LlamaServer::props(json* out, std::string* reason) {
  const HttpResult h = httpGet(options_.host, port_, "/props", 10);
  if (!h.ok()) {
    *reason = gone("did not answer GET /props: " + (h.error.empty() ? fmt::format("HTTP {}", h.status) : h.error));
    return tpsSystemError;
  }
  try {
    *out = json::parse(h.body);
    // The model's size and vocabulary come from /v1/models (same server, no extra flag needed).
    const HttpResult m = httpGet(options_.host, port_, "/v1/models", 10);
    if (m.ok()) {
      const json models = json::parse(m.body);
      if (models.contains("data") && !models["data"].empty()) (*out)["tpscope_model_meta"] = models["data"][0]["meta"];
    }
  } catch (const std::exception& e) {
    *reason = std::string("llama-server's /props is not JSON: ") + e.what();
    return tpsSystemError;
  }
  return tpsSuccess;
}

tpsResult_t LlamaServer::metrics(std::map<std::string, double>* out, std::string* reason) {
  const HttpResult h = httpGet(options_.host, port_, "/metrics", 10);
  if (h.status == 501 || h.status == 404) {
    *reason = "llama-server's /metrics is off (add --metrics to the flags)";
    return tpsUnavailable;
  }
  if (!h.ok()) {
    *reason = gone("did not answer GET /metrics: " + (h.error.empty() ? fmt::format("HTTP {}", h.status) : h.error));
    return tpsSystemError;
  }
  *out = parsePrometheus(h.body);
  return tpsSuccess;
}

tpsResult_t LlamaServer::complete(const std::vector<int>& prompt, int n_predict, Completion* out, std::string* reason) {
  *out = Completion{};
  const json body = {{"prompt", prompt},   {"n_predict", n_predict}, {"stream", true},   {"cache_prompt", false},
                     {"ignore_eos", true}, {"return_tokens", true},  {"seed", 20261201}, {"n_probs", 0}};
  std::string pending, stream_error;
  bool stopped = false;
  auto onLine = [&](const std::string& line) {
    if (line.rfind("error:", 0) == 0) {
      stream_error = line.substr(6);
      return;
    }
    if (line.rfind("data: ", 0) != 0) return;
    json ev = json::parse(line.substr(6), nullptr, /*allow_exceptions=*/false);
    if (ev.is_discarded()) return;
    if (ev.contains("error")) {
      stream_error = ev["error"].dump();
      return;
    }
    const int64_t now = Meter::now();
    int64_t n = ev.contains("tokens") && ev["tokens"].is_array() ? static_cast<int64_t>(ev["tokens"].size()) : 0;
    if (n == 0 && ev.value("content", std::string()).size() > 0) n = 1;
    if (n > 0) {
      if (out->token_events == 0) {
        out->first_ns = now;
        out->first_tokens = n;
      }
      out->last_ns = now;
      out->tokens += n;
      ++out->token_events;
    }
    if (ev.contains("timings")) out->timings = ev["timings"];
    if (ev.value("stop", false)) stopped = true;
  };
  out->sent_ns = Meter::now();
  const HttpResult h = httpPostStream(options_.host, port_, "/completion", body.dump(), options_.request_timeout_s,
                                      [&](const char* data, size_t size) {
                                        pending.append(data, size);
                                        size_t nl;
                                        while ((nl = pending.find('\n')) != std::string::npos) {
                                          std::string line = pending.substr(0, nl);
                                          if (!line.empty() && line.back() == '\r') line.pop_back();
                                          pending.erase(0, nl + 1);
                                          if (!line.empty()) onLine(line);
                                        }
                                        return true;
                                      });
  out->done_ns = Meter::now();
  if (!h.error.empty()) {
    *reason = gone(fmt::format("broke off the request after {} of {} tokens ({})", out->tokens, n_predict, h.error));
    return alive() ? tpsTimeout : tpsSystemError;
  }
  if (h.status < 200 || h.status >= 300) {
    *reason = fmt::format("llama-server answered HTTP {} to POST /completion: {}", h.status, tailLines(h.body, 3));
    return tpsSystemError;
  }
  if (!stream_error.empty()) {
    *reason = "llama-server reported an error in the stream: " + stream_error;
    return tpsSystemError;
  }
  if (!stopped || out->token_events == 0) {
    *reason = gone(fmt::format("ended the stream without finishing ({} of {} tokens)", out->tokens, n_predict));
    return tpsSystemError;
  }
  return tpsSuccess;
}

KeyValues settingsFromLog(const std::string& log) {
  KeyValues out;
  auto put = [&out](const std::string& k, const std::string& v) {
    for (const auto& kv : out)
      if (kv.first == k) return;
    out.emplace_back(k, v);
  };
  static const std::regex ctx(R"(llama_context: (n_ctx|n_batch|n_ubatch|n_seq_max|flash_attn|kv_unified) +=\s*(\S+))");
  static const std::regex offload(R"(offloaded (\d+/\d+) layers to GPU)");
  static const std::regex kv(R"(llama_kv_cache: size = .*K \((\w+)\).*V \((\w+)\))");
  static const std::regex fit(R"(failed to fit params to free device memory: (.*))");
  std::istringstream in(log);
  std::string fit_result = "no message";
  bool fit_seen = false;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, ctx))
      put(m[1], m[2]);
    else if (std::regex_search(line, m, offload))
      put("offloaded_layers", m[1]);
    else if (std::regex_search(line, m, kv))
      put("kv_cache", fmt::format("K {}, V {}", m[1].str(), m[2].str()));
    else if (!fit_seen && std::regex_search(line, m, fit)) {
      fit_result = "failed: " + m[1].str();
      fit_seen = true;
    }
  }
  // In a fixed order, so two arms' lists line up.
  KeyValues ordered;
  for (const char* k :
       {"n_ctx", "n_batch", "n_ubatch", "n_seq_max", "flash_attn", "kv_unified", "kv_cache", "offloaded_layers"}) {
    std::string v = "not in the log";
    for (const auto& kv : out)
      if (kv.first == k) v = kv.second;
    ordered.emplace_back(k, v);
  }
  ordered.emplace_back("fit", fit_result);
  return ordered;
}

KeyValues settingsFromProps(const json& p) {
  auto str = [](const json& j) { return j.is_string() ? j.get<std::string>() : j.is_null() ? "null" : j.dump(); };
  auto at = [&](const json& j, const char* k) { return j.contains(k) ? str(j[k]) : std::string("not reported"); };
  KeyValues out;
  const json gen = p.value("default_generation_settings", json::object());
  out.emplace_back("slot_n_ctx", at(gen, "n_ctx"));
  out.emplace_back("total_slots", at(p, "total_slots"));
  out.emplace_back("model_path", at(p, "model_path"));
  out.emplace_back("model_ftype", at(p, "model_ftype"));
  out.emplace_back("build_info", at(p, "build_info"));
  const json meta = p.value("tpscope_model_meta", json::object());
  out.emplace_back("model_n_params", at(meta, "n_params"));
  out.emplace_back("model_bytes", at(meta, "size"));
  out.emplace_back("model_n_vocab", at(meta, "n_vocab"));
  return out;
}

std::vector<std::string> fallbacksInLog(const std::string& log) {
  // ggml-cuda.cu's comm init: every path that does not run the AllReduce asked for says so in a warning;
  // the tpscope path (integrations/llama.cpp) when it cannot start, is not built in, or hands tensors
  // of a kind it does not take to llama.cpp's own AllReduce.
  static const std::regex re(
      R"((falling back to|unknown GGML_CUDA_ALLREDUCE value|AllReduce init failed|tpscope AllReduce unavailable|)"
      R"(tpscope is not compiled in|use llama.cpp's own AllReduce))");
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, re)) out.push_back(line);
  return out;
}

bool tpscopeInLog(const std::string& log) {
  static const std::regex re(R"(tpscope AllReduce \(tpscope [^)]*\) over CUDA devices)");
  return std::regex_search(log, re);
}

std::string tailLines(const std::string& log, int n) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  std::string s;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    s += "  " + lines[i] + "\n";
  return s;
}

std::map<std::string, double> parsePrometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    std::string name = line.substr(0, sp);
    name = name.substr(0, name.find('{'));
    try {
      out[name] = std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return out;
}

bool splitShellWords(const std::string& text, std::vector<std::string>* words, std::string* error) {
  words->clear();
  if (text.find_first_not_of(" \t\n") == std::string::npos) return true;
  wordexp_t we{};
  // WRDE_NOCMD: a $(...) or `...` is an error, never run; WRDE_UNDEF: an unset $VAR is an error.
  const int rc = wordexp(text.c_str(), &we, WRDE_NOCMD | WRDE_UNDEF);
  if (rc != 0) {
    if (rc == WRDE_NOSPACE) wordfree(&we);
    *error = rc == WRDE_BADCHAR  ? "an unquoted |, &, ;, <, >, (, ), { or }"
             : rc == WRDE_CMDSUB ? "a command substitution, which is never run"
             : rc == WRDE_BADVAL ? "an unset environment variable"
             : rc == WRDE_SYNTAX ? "unbalanced quotes"
                                 : "a shell expansion that failed";
    return false;
  }
  for (size_t i = 0; i < we.we_wordc; ++i) words->push_back(we.we_wordv[i]);
  wordfree(&we);
  return true;
}

}  // namespace tpscope::engine
