// SPDX-License-Identifier: Apache-2.0
// llama_server.cc - start/health/props/metrics/completion/stop, and what the log says it decided.
#include "engine/llama_server.h"

#include <fmt/format.h>
#include <wordexp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/bounded_input.h"
#include "common/utf8.h"
#include "engine/http.h"
#include "meter/meter.h"

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
  // The model's size and vocabulary come from /v1/models (same server, no extra flag needed).
  const HttpResult m = httpGet(options_.host, port_, "/v1/models", 10);
  std::string why;
  if (!propsFromBodies(h.body, m.ok() ? std::optional<std::string>(m.body) : std::nullopt, out, &why)) {
    *reason = "llama-server's /props is not JSON: " + why;
    return tpsSystemError;
  }
  return tpsSuccess;
}

bool propsFromBodies(const std::string& props, const std::optional<std::string>& models_body, json* out,
                     std::string* why) {
  // Both bodies within the depth limit (common/bounded_input.h): what is kept of them is copied and dumped.
  std::string error;
  std::optional<json> parsed = parseJsonBounded(props, &error);
  if (!parsed || !parsed->is_object()) {
    *why = !parsed ? "its body does not parse (" + error + ")" : "its body is JSON but not an object";
    return false;
  }
  json p = std::move(*parsed);
  // data[0].meta, looked up with find(): a missing key must never be read through const operator[].
  const json models = models_body ? parseJsonBounded(*models_body, &error).value_or(json()) : json();
  if (auto data = models.is_object() ? models.find("data") : models.end();
      data != models.end() && data->is_array() && !data->empty() && data->front().is_object())
    if (auto meta = data->front().find("meta"); meta != data->front().end()) p["tpscope_model_meta"] = *meta;
  *out = std::move(p);
  return true;
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
  if (const std::string bad = nonFiniteServerMetric(*out); !bad.empty()) {
    *reason = "llama-server's /metrics gives " + bad;
    return tpsSystemError;
  }
  return tpsSuccess;
}

tpsResult_t LlamaServer::complete(const std::vector<int>& prompt, int n_predict, Completion* out, std::string* reason) {
  const json body = {{"prompt", prompt},   {"n_predict", n_predict}, {"stream", true},   {"cache_prompt", false},
                     {"ignore_eos", true}, {"return_tokens", true},  {"seed", 20261201}, {"n_probs", 0}};
  CompletionStream stream([] { return Meter::now(); });
  const int64_t sent_ns = Meter::now();
  const HttpResult h = httpPostStream(options_.host, port_, "/completion", body.dump(), options_.request_timeout_s,
                                      [&](const char* data, size_t size) {
                                        stream.feed(std::string_view(data, size));
                                        return true;
                                      });
  *out = stream.completion();
  out->sent_ns = sent_ns;
  out->done_ns = Meter::now();
  if (!h.error.empty()) {
    *reason = gone(fmt::format("broke off the request after {} of {} tokens ({})", out->tokens, n_predict, h.error));
    return alive() ? tpsTimeout : tpsSystemError;
  }
  if (h.status < 200 || h.status >= 300) {
    *reason = fmt::format("llama-server answered HTTP {} to POST /completion: {}", h.status, tailLines(h.body, 3));
    return tpsSystemError;
  }
  if (!stream.error().empty()) {
    *reason = "llama-server reported an error in the stream: " + stream.error();
    return tpsSystemError;
  }
  if (!stream.stopped() || out->token_events == 0) {
    *reason = gone(fmt::format("ended the stream without finishing ({} of {} tokens)", out->tokens, n_predict));
    return tpsSystemError;
  }
  return tpsSuccess;
}

void CompletionStream::feed(std::string_view bytes) {
  lines_.feed(bytes, [this](const std::string& l) { line(l); });
}

void CompletionStream::line(std::string line) {
  if (lines_.cutLines() > 0) {
    error_ = fmt::format("an event line longer than {} bytes", kMaxEventLine);
    return;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) return;
  if (line.rfind("error:", 0) == 0) {
    error_ = line.substr(6);
    return;
  }
  if (line.rfind("data: ", 0) != 0) return;
  // Every field is looked up and type-checked: a server's event is outside input, and json::value()
  // throws on a field of another type.
  std::string error;
  const json ev = parseJsonBounded(std::string_view(line).substr(6), &error).value_or(json());
  if (!ev.is_object()) return;
  if (auto e = ev.find("error"); e != ev.end()) {
    error_ = e->dump();
    return;
  }
  const int64_t now = clock_();
  int64_t n = 0;
  if (auto t = ev.find("tokens"); t != ev.end() && t->is_array()) n = static_cast<int64_t>(t->size());
  if (auto c = ev.find("content");
      n == 0 && c != ev.end() && c->is_string() && !c->get_ref<const std::string&>().empty())
    n = 1;
  if (n > 0) {
    if (c_.token_events == 0) {
      c_.first_ns = now;
      c_.first_tokens = n;
    }
    c_.last_ns = now;
    c_.tokens += n;
    ++c_.token_events;
  }
  if (auto t = ev.find("timings"); t != ev.end()) c_.timings = *t;
  if (auto s = ev.find("stop"); s != ev.end() && s->is_boolean() && s->get<bool>()) stopped_ = true;
}

namespace {

// The log is scanned with find() and character classes, never std::regex: libstdc++'s regex recurses
// once per character it matches, and one long line from a server overflowed the stack.
bool isBlank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool isWord(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Each match of `prefix` in `line`, left to right, until `at` (given the position right after the
// prefix) says it matched.
template <typename F>
bool eachAfter(std::string_view line, std::string_view prefix, F&& at) {
  for (size_t i = line.find(prefix); i != std::string_view::npos; i = line.find(prefix, i + 1))
    if (at(i + prefix.size())) return true;
  return false;
}

// "llama_context: NAME +=\s*(\S+)" for the context settings: the name and the value.
bool contextSetting(std::string_view line, std::string* name, std::string* value) {
  static const char* kNames[] = {"n_ctx", "n_batch", "n_ubatch", "n_seq_max", "flash_attn", "kv_unified"};
  return eachAfter(line, "llama_context: ", [&](size_t p) {
    for (const char* n : kNames) {
      const std::string_view key(n);
      if (line.substr(p, key.size()) != key) continue;
      size_t q = p + key.size(), spaces = 0;
      for (; q < line.size() && line[q] == ' '; ++q) ++spaces;
      if (spaces == 0 || q >= line.size() || line[q] != '=') continue;
      for (++q; q < line.size() && isBlank(line[q]); ++q) {
      }
      size_t e = q;
      for (; e < line.size() && !isBlank(line[e]); ++e) {
      }
      if (e == q) continue;
      *name = n;
      *value = std::string(line.substr(q, e - q));
      return true;
    }
    return false;
  });
}

// "offloaded (\d+/\d+) layers to GPU".
bool offloadedLayers(std::string_view line, std::string* value) {
  return eachAfter(line, "offloaded ", [&](size_t p) {
    size_t q = p;
    while (q < line.size() && isDigit(line[q])) ++q;
    if (q == p || q >= line.size() || line[q] != '/') return false;
    const size_t d = ++q;
    while (q < line.size() && isDigit(line[q])) ++q;
    if (q == d || line.substr(q, 14) != " layers to GPU") return false;
    *value = std::string(line.substr(p, q - p));
    return true;
  });
}

// The word of "LETTER (WORD)" starting at `at`, or "" when there is none there.
std::string_view typeAt(std::string_view line, size_t at, char letter) {
  if (line.substr(at, 3) != std::string{letter, ' ', '('}) return {};
  size_t q = at + 3;
  while (q < line.size() && isWord(line[q])) ++q;
  if (q == at + 3 || q >= line.size() || line[q] != ')') return {};
  return line.substr(at + 3, q - at - 3);
}

// "llama_kv_cache: size = .*K \((\w+)\).*V \((\w+)\)" as the greedy pattern took it: the last "V (type)",
// and the last "K (type)" that ends before it.
bool kvCacheTypes(std::string_view line, std::string* value) {
  const std::string_view prefix = "llama_kv_cache: size = ";
  const size_t p = line.find(prefix);
  if (p == std::string_view::npos) return false;
  const size_t from = p + prefix.size();
  for (size_t v = line.size(); v-- > from;) {
    const std::string_view vt = typeAt(line, v, 'V');
    if (vt.empty()) continue;
    for (size_t k = v; k-- > from;) {
      const std::string_view kt = typeAt(line, k, 'K');
      if (kt.empty() || k + 4 + kt.size() > v) continue;
      *value = fmt::format("K {}, V {}", kt, vt);
      return true;
    }
    return false;  // no K before the last V: none before any earlier V either
  }
  return false;
}

}  // namespace

KeyValues settingsFromLog(const std::string& log) {
  KeyValues out;
  auto put = [&out](const std::string& k, const std::string& v) {
    for (const auto& kv : out)
      if (kv.first == k) return;
    out.emplace_back(k, v);
  };
  const std::string_view fit = "failed to fit params to free device memory: ";
  std::istringstream in(log);
  std::string fit_result = "no message";
  bool fit_seen = false;
  for (std::string line; std::getline(in, line);) {
    std::string name, value;
    // The values go into the run's manifest (JSON): bytes that are not UTF-8 become U+FFFD.
    if (contextSetting(line, &name, &value))
      put(name, toUtf8(value));
    else if (offloadedLayers(line, &value))
      put("offloaded_layers", value);
    else if (kvCacheTypes(line, &value))
      put("kv_cache", value);
    else if (const size_t f = line.find(fit); !fit_seen && f != std::string::npos) {
      const std::string rest = line.substr(f + fit.size());
      fit_result = "failed: " + toUtf8(rest.substr(0, rest.find('\r')));  // the message, without a CRLF's '\r'
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
  static const char* kSigns[] = {"falling back to",
                                 "unknown GGML_CUDA_ALLREDUCE value",
                                 "AllReduce init failed",
                                 "tpscope AllReduce unavailable",
                                 "tpscope is not compiled in",
                                 "use llama.cpp's own AllReduce"};
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (std::any_of(std::begin(kSigns), std::end(kSigns),
                    [&](const char* s) { return line.find(s) != std::string::npos; }))
      out.push_back(line);
  return out;
}

bool tpscopeInLog(const std::string& log) {
  // "tpscope AllReduce (tpscope VERSION, BACKEND) over CUDA devices": the first ')' after the prefix
  // closes it.
  return eachAfter(log, "tpscope AllReduce (tpscope ", [&](size_t p) {
    const size_t close = log.find(')', p);
    return close != std::string::npos && log.compare(close, 19, ") over CUDA devices") == 0;
  });
}

std::optional<std::string> tpscopeWireInLog(const std::string& log) {
  std::optional<std::string> wire;
  eachAfter(log, "tpscope AllReduce (tpscope ", [&](size_t p) {
    const size_t close = log.find(')', p);
    if (close == std::string::npos || log.compare(close, 19, ") over CUDA devices") != 0) return false;
    const size_t w = log.rfind(", wire ", close);
    if (w == std::string::npos || w < p) return false;
    wire = toUtf8(log.substr(w + 7, close - (w + 7)));  // a setting compared and recorded (JSON)
    return true;
  });
  return wire;
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

std::string nonFiniteServerMetric(const std::map<std::string, double>& metrics) {
  for (const auto& [name, value] : metrics)
    if (name.rfind("llamacpp:", 0) == 0 && !std::isfinite(value))
      return fmt::format("{} = {}, not a finite number", name, value);
  return "";
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
