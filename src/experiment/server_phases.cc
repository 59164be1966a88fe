// SPDX-License-Identifier: Apache-2.0
// server_phases.cc - an arm's effective settings -> a llama-server (or a marked command) -> windows.
#include "experiment/server_phases.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "allreduce/wire.h"
#include "common/utf8.h"
#include "engine/command.h"
#include "engine/llama_server.h"
#include "meter/meter.h"

namespace tpscope::experiment {

namespace {

using nlohmann::json;

bool hasFlag(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const std::string& a : args)
    for (const char* n : names)
      if (a == n || a.rfind(std::string(n) + "=", 0) == 0) return true;
  return false;
}

std::optional<double> number(const json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// A line in the server's log before each start, so one file tells probe and measurement apart.
void logHeader(const std::string& path, const std::string& line) {
  std::ofstream f(path, std::ios::app);
  f << "# tpscope arms: " << line << "\n";
}

// Prompt token ids: the same for every arm and repetition, spread over the vocabulary away from the
// special and byte tokens at its start.
std::vector<int> promptIds(int n, int64_t vocab) {
  const int64_t lo = vocab > 2000 ? 1000 : 3;
  const int64_t span = std::max<int64_t>(1, std::min<int64_t>(vocab, 30000) - lo);
  std::vector<int> ids(n);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids[i] = static_cast<int>(lo + static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(span)));
  }
  return ids;
}

// Whether two wire settings are the same policy ("auto:0.01" and "auto:0.0100" are).
bool sameWire(const std::string& a, const std::string& b) {
  tpscope::detail::WirePolicy pa, pb;
  std::string why;
  if (!tpscope::detail::parseWirePolicy(a, &pa, &why) || !tpscope::detail::parseWirePolicy(b, &pb, &why)) return a == b;
  if (pa.automatic != pb.automatic) return false;
  // The log prints a float budget (%g): equal to six significant digits.
  return pa.automatic ? std::fabs(pa.budget - pb.budget) <= 1e-6 * std::max(pa.budget, pb.budget) : pa.wire == pb.wire;
}

// Why the server's log shows it is not running what the arm asked for, or "" when it is: an AllReduce
// fallback, no Meta device under -sm tensor, no internal AllReduce pipeline, no speculation.
std::string notAsAsked(const EffectiveSettings& arm, const std::string& log, const std::string& speculative) {
  const bool tensor = arm.value("split") == "tensor";
  if (const std::vector<std::string> fb = engine::fallbacksInLog(log); tensor && !fb.empty())
    return fmt::format("llama-server did not run the AllReduce asked for (allreduce = {}): its log says \"{}\"",
                       arm.value("allreduce"), fb.front());
  if (tensor && log.find("creating a Meta device") == std::string::npos)
    return "llama-server did not split the model by tensor (its log has no \"creating a Meta device\" line)";
  if (tensor && arm.value("allreduce") == "internal" && log.find("initialized AllReduce pipeline") == std::string::npos)
    return "llama-server did not start its internal AllReduce (its log has no \"initialized AllReduce pipeline\" "
           "line)";
  if (tensor && arm.value("allreduce") == "tpscope" && !engine::tpscopeInLog(log))
    return "llama-server did not start tpscope's AllReduce (its log has no \"tpscope AllReduce (tpscope ...) over "
           "CUDA devices\" line: build it with scripts/llama/build-llama-server --with-tpscope PREFIX)";
  if (tensor && arm.value("allreduce") == "tpscope") {
    // The wire the communicator took (TPSCOPE_WIRE as tpscope read it), where the patch says it.
    const std::string asked = arm.value("wire").empty() ? "exact" : arm.value("wire");
    const std::optional<std::string> ran = engine::tpscopeWireInLog(log);
    if (ran ? !sameWire(*ran, asked) : asked != "exact")
      return ran ? fmt::format("llama-server's tpscope AllReduce runs wire {}, the arm asks for {}", *ran, asked)
                 : fmt::format(
                       "llama-server's log does not say which wire tpscope runs, and the arm asks for {}: "
                       "rebuild it with the current patch (scripts/llama/build-llama-server --with-tpscope "
                       "PREFIX)",
                       asked);
  }
  const bool drafting = arm.value("draft") != "none" || arm.value("spec_type") != "none";
  if (drafting && speculative == "none")
    return "llama-server started without speculative decoding although the arm asks for it (draft = " +
           arm.value("draft") + ", spec_type = " + arm.value("spec_type") + "); its log names no implementation";
  return "";
}

// The speculative implementations the server says it added ("none" when it added none).
std::string speculationInLog(const std::string& log) {
  std::vector<std::string> types;
  const std::string key = "adding speculative implementation '";
  for (size_t i = log.find(key); i != std::string::npos; i = log.find(key, i + 1)) {
    const size_t a = i + key.size(), b = log.find('\'', a);
    if (b == std::string::npos) break;
    const std::string t = toUtf8(log.substr(a, b - a));  // a setting in the manifest (JSON)
    if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  }
  return types.empty() ? "none" : fmt::format("{}", fmt::join(types, ","));
}

// A child process another thread may ask to stop: a pidfd names it, so the signal reaches that process
// or none (never another one that took its pid after it was reaped).
class StoppableProcess {
 public:
  ~StoppableProcess() { watch(-1); }
  // The process to stop from now on (-1: none).
  void watch(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0) close(fd_);
    fd_ = pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
  }
  // SIGTERM to it, if there is one; any thread.
  void terminate() {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ >= 0) (void)syscall(SYS_pidfd_send_signal, fd_, SIGTERM, nullptr, 0);
  }

 private:
  std::mutex mu_;
  int fd_ = -1;
};

class ServerArmPhases : public ArmPhases {
 public:
  ServerArmPhases(const EngineSettings& engine, std::string run_dir, std::vector<std::string> visible)
      : engine_(engine), run_dir_(std::move(run_dir)), visible_(std::move(visible)) {}

  tpsResult_t prepare(const EffectiveSettings& arm, std::vector<Setting>* decisions, std::string* reason) override {
    arm_ = arm;
    stoppable_.watch(-1);
    server_.reset();
    ServerLaunch launch;
    if (!serverLaunch(engine_, arm, visible_, &launch, reason)) return tpsInvalidArgument;
    engine::LlamaServerOptions o;
    o.binary = engine_.server;
    o.args = launch.args;
    o.env = launch.env;
    o.unset = launch.unset;
    o.port = engine_.port;
    o.start_timeout_s = engine_.start_timeout_s;
    o.request_timeout_s = engine_.request_timeout_s;
    o.log_path = run_dir_ + "/server-" + armFileName(arm.arm) + ".log";
    std::string env;
    for (const auto& [k, v] : launch.env) env += k + "=" + v + " ";
    logHeader(o.log_path, fmt::format("arm {}, start at {}: {}{} {}", arm.arm, isoTimeUtc(), env, o.binary,
                                      fmt::join(launch.args, " ")));
    if (tpsResult_t r = engine::LlamaServer::start(o, &server_, reason); r != tpsSuccess) return r;
    stoppable_.watch(server_->pid());

    json props;
    if (tpsResult_t r = server_->props(&props, reason); r != tpsSuccess) return r;
    if (tpsResult_t r = serverDecisions(arm, launch, props, server_->log(), decisions, &vocab_, reason);
        r != tpsSuccess)
      return r;
    const int prompt = std::stoi(arm.value("prompt_tokens")), decode = std::stoi(arm.value("decode_tokens"));
    // One warm-up request (allocations, graph capture, kernel selection), not measured.
    engine::Completion warm;
    if (tpsResult_t r = server_->complete(promptIds(std::min(prompt, 64), vocab_), std::min(decode, 8), &warm, reason);
        r != tpsSuccess) {
      *reason = "warm-up: " + *reason;
      return r;
    }
    return tpsSuccess;
  }

  std::vector<unsigned> processes() const override {
    return server_ ? std::vector<unsigned>{static_cast<unsigned>(server_->pid())} : std::vector<unsigned>{};
  }

  void interrupt() override { stoppable_.terminate(); }

  tpsResult_t runPhases(const std::vector<std::string>& phases, std::vector<PhaseOutcome>* out,
                        std::string* reason) override {
    if (!server_) {
      *reason = "runPhases before prepare";
      return tpsInvalidUsage;
    }
    const int prompt = std::stoi(arm_.value("prompt_tokens"));
    const bool decode = std::find(phases.begin(), phases.end(), "decode") != phases.end();
    const int n_predict = decode ? std::stoi(arm_.value("decode_tokens")) : 1;
    std::map<std::string, double> before, after;
    if (tpsResult_t r = server_->metrics(&before, reason); r != tpsSuccess) return r;
    engine::Completion c;
    if (tpsResult_t r = server_->complete(promptIds(prompt, vocab_), n_predict, &c, reason); r != tpsSuccess) return r;
    // The counters count the rig's request once it is released: wait for them to show it.
    const double predicted_n = number(c.timings, "predicted_n").value_or(static_cast<double>(c.tokens));
    for (int i = 0; i < 5; ++i) {
      if (tpsResult_t r = server_->metrics(&after, reason); r != tpsSuccess) return r;
      if (after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] >= predicted_n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return phasesFromRequest(arm_, phases, c, std::move(before), std::move(after), out, reason);
  }

 private:
  EngineSettings engine_;
  std::string run_dir_;
  std::vector<std::string> visible_;
  EffectiveSettings arm_;
  std::unique_ptr<engine::LlamaServer> server_;
  StoppableProcess stoppable_;  // the server, for interrupt()
  int64_t vocab_ = 32000;
};

class CommandArmPhases : public ArmPhases {
 public:
  CommandArmPhases(const EngineSettings& engine, std::string run_dir) : engine_(engine), run_dir_(std::move(run_dir)) {}

  tpsResult_t prepare(const EffectiveSettings& arm, std::vector<Setting>* decisions, std::string*) override {
    arm_ = arm;
    decisions->clear();
    return tpsSuccess;
  }

  tpsResult_t runPhases(const std::vector<std::string>& phases, std::vector<PhaseOutcome>* out,
                        std::string* reason) override {
    engine::CommandOptions o;
    o.argv = engine_.command;
    o.env = {
        {"TPSCOPE_ARM", arm_.arm}, {"TPSCOPE_DEVICES", arm_.value("devices")}, {"TPSCOPE_SPLIT", arm_.value("split")}};
    o.log_path = run_dir_ + "/command-" + armFileName(arm_.arm) + ".log";
    logHeader(o.log_path, fmt::format("arm {}, run at {}", arm_.arm, isoTimeUtc()));
    std::vector<engine::MarkedWindow> windows;
    if (tpsResult_t r = engine::runMarkedCommand(o, &windows, reason); r != tpsSuccess) return r;
    for (const std::string& p : phases) {
      auto w = std::find_if(windows.begin(), windows.end(), [&](const engine::MarkedWindow& x) { return x.name == p; });
      if (w == windows.end()) {
        *reason = fmt::format("the command marked no window \"{}\" (it marked: {}); write `begin {}` and `end {}` "
                              "to $TPSCOPE_METER_PIPE around that phase",
                              p, windows.empty() ? std::string("none") : [&] {
                                std::string s;
                                for (const auto& x : windows) s += (s.empty() ? "" : ", ") + x.name;
                                return s;
                              }(), p, p);
        return tpsInvalidArgument;
      }
      PhaseOutcome o2;
      o2.phase = p;
      o2.start_ns = w->start_ns;
      o2.end_ns = w->end_ns;
      out->push_back(o2);
    }
    return tpsSuccess;
  }

 private:
  EngineSettings engine_;
  std::string run_dir_;
  EffectiveSettings arm_;
};

}  // namespace

std::string armFileName(const std::string& arm) {
  std::string s = arm;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != '\'') c = '_';
  return s;
}

bool serverLaunch(const EngineSettings& engine, const EffectiveSettings& arm, const std::vector<std::string>& visible,
                  ServerLaunch* out, std::string* error) {
  *out = ServerLaunch{};
  std::vector<std::string> flags;
  std::string why;
  if (!engine::splitShellWords(engine.flags, &flags, &why)) {
    *error = "flags = \"" + engine.flags + "\" are not plain shell words: " + why;
    return false;
  }
  for (const char* owned : {"-m", "--model", "-sm", "--split-mode", "--host", "--port", "-md", "--spec-draft-model",
                            "--model-draft", "--spec-type", "--spec-draft-n-max", "-dev", "--device"})
    if (hasFlag(flags, {owned})) {
      *error = fmt::format(
          "flags set {}, which tpscope sets per arm from the spec (model, split, devices, draft, "
          "spec_type, draft_max, port): remove it from flags",
          owned);
      return false;
    }
  out->args = {"-m", engine.model};
  out->args.insert(out->args.end(), flags.begin(), flags.end());
  out->args.insert(out->args.end(), {"-sm", arm.value("split")});
  // /metrics tells the rig whether another client used the server, and at verbosity 4 the log says
  // what the server decided (context, batch, offload, KV, AllReduce); neither changes the inference.
  if (!hasFlag(flags, {"--metrics"})) out->args.push_back("--metrics");
  if (!hasFlag(flags, {"-lv", "--verbosity", "--log-verbosity", "-v", "--verbose", "--log-verbose"}))
    out->args.insert(out->args.end(), {"-lv", "4"});
  const std::string draft = arm.value("draft");
  if (!draft.empty() && draft != "none")
    out->args.insert(out->args.end(), {"-md", draft == "self" ? engine.model : draft});
  // A draft model alone is loaded and then unused: llama-server needs the type named.
  std::string type = arm.value("spec_type");
  if ((type.empty() || type == "none") && !draft.empty() && draft != "none") type = "draft-simple";
  if (!type.empty() && type != "none") out->args.insert(out->args.end(), {"--spec-type", type});
  const std::string draft_max = arm.value("draft_max");
  if (!draft_max.empty() && draft_max != "default")
    out->args.insert(out->args.end(), {"--spec-draft-n-max", draft_max});

  // The server sees exactly the arm's GPUs, named as the meter names them.
  std::string cuda;
  for (int d : arm.devices()) {
    if (!visible.empty() && d >= static_cast<int>(visible.size())) {
      *error = fmt::format("device {} is not among CUDA_VISIBLE_DEVICES", d);
      return false;
    }
    cuda += (cuda.empty() ? "" : ",") + (visible.empty() ? std::to_string(d) : visible[d]);
  }
  out->env.emplace_back("CUDA_VISIBLE_DEVICES", cuda);
  const std::string allreduce = arm.value("allreduce");
  if (allreduce.empty() || allreduce == "default")
    out->unset.push_back("GGML_CUDA_ALLREDUCE");
  else
    out->env.emplace_back("GGML_CUDA_ALLREDUCE", allreduce);
  // tpscope's backend and wire inside the server are the arm's, never what tpscope's own environment had.
  if (allreduce == "tpscope") {
    out->env.emplace_back("TPSCOPE_ALLREDUCE", arm.value("tpscope_backend"));
    out->env.emplace_back("TPSCOPE_WIRE", arm.value("wire").empty() ? "exact" : arm.value("wire"));
  } else {
    out->unset.push_back("TPSCOPE_ALLREDUCE");
    out->unset.push_back("TPSCOPE_WIRE");
  }
  return true;
}

tpsResult_t serverDecisions(const EffectiveSettings& arm, const ServerLaunch& launch, const json& props,
                            const std::string& log, std::vector<Setting>* decisions, int64_t* vocab,
                            std::string* reason) {
  // The availability guard at run time: what ran must be what was asked for.
  const std::string speculative = speculationInLog(log);
  if (const std::string no = notAsAsked(arm, log, speculative); !no.empty()) {
    *reason = no;
    return tpsUnavailable;
  }
  decisions->clear();
  const engine::KeyValues from_props = engine::settingsFromProps(props);
  for (const auto& [k, v] : from_props) decisions->push_back({"server_" + k, v, SettingSource::kEngine});
  for (const auto& [k, v] : engine::settingsFromLog(log))
    decisions->push_back({"server_" + k, v, SettingSource::kEngine});
  decisions->push_back({"speculative_in_effect", speculative, SettingSource::kEngine});
  decisions->push_back({"server_args", fmt::format("{}", fmt::join(launch.args, " ")), SettingSource::kEngine});

  // The request must fit one slot's context (slot_n_ctx, the first of the /props settings).
  const std::string& slot_ctx = from_props[0].second;
  const int prompt = std::stoi(arm.value("prompt_tokens")), decode = std::stoi(arm.value("decode_tokens"));
  try {
    if (prompt + decode > std::stoll(slot_ctx)) {
      *reason = fmt::format(
          "prompt_tokens + decode_tokens = {} does not fit the server's context per slot "
          "({}): raise -c in flags or shorten the request",
          prompt + decode, slot_ctx);
      return tpsInvalidArgument;
    }
  } catch (const std::exception&) {
  }
  // n_vocab as a whole number in range: a float or a huge value would not convert to an id range.
  *vocab = 32000;
  if (auto meta = props.find("tpscope_model_meta"); meta != props.end() && meta->is_object())
    if (auto n = meta->find("n_vocab");
        n != meta->end() && n->is_number_integer() && n->get<int64_t>() > 0 && n->get<int64_t>() <= INT32_MAX)
      *vocab = n->get<int64_t>();
  return tpsSuccess;
}

tpsResult_t phasesFromRequest(const EffectiveSettings& arm, const std::vector<std::string>& phases,
                              const engine::Completion& c, std::map<std::string, double> before,
                              std::map<std::string, double> after, std::vector<PhaseOutcome>* out,
                              std::string* reason) {
  const int prompt = std::stoi(arm.value("prompt_tokens"));
  std::string disturbed;
  if (before["llamacpp:requests_processing"] > 0 || before["llamacpp:requests_deferred"] > 0)
    disturbed = fmt::format(
        "another client's request was running on the server ({:.0f} processing, {:.0f} "
        "deferred) when the repetition began",
        before["llamacpp:requests_processing"], before["llamacpp:requests_deferred"]);
  // The counters count the rig's request once it is released; anything beyond it was someone else's.
  const double prompt_n = number(c.timings, "prompt_n").value_or(prompt);
  const double predicted_n = number(c.timings, "predicted_n").value_or(static_cast<double>(c.tokens));
  const double extra_prompt = after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] - prompt_n;
  const double extra_predicted =
      after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] - predicted_n;
  if (disturbed.empty() && (extra_prompt > 0 || extra_predicted > 0))
    disturbed = fmt::format(
        "the server processed {:.0f} prompt and {:.0f} generated tokens beyond the rig's "
        "request: another client used it during the repetition",
        extra_prompt, extra_predicted);

  for (const std::string& p : phases) {
    PhaseOutcome o;
    o.phase = p;
    o.engine = c.timings;
    o.disturbed = disturbed;
    if (p == "prefill") {
      o.start_ns = c.sent_ns;
      o.end_ns = c.first_ns;
      o.tokens = static_cast<int64_t>(prompt_n);
      o.steps = 1;
      o.engine_tok_s = number(c.timings, "prompt_per_second");
      o.engine_ms = number(c.timings, "prompt_ms");
    } else if (p == "decode") {
      o.start_ns = c.first_ns;
      o.end_ns = c.last_ns;
      o.tokens = c.tokens - c.first_tokens;
      o.steps = std::max<int64_t>(0, c.token_events - 1);
      o.engine_tok_s = number(c.timings, "predicted_per_second");
      o.engine_ms = number(c.timings, "predicted_ms");
    } else {
      *reason = "unknown phase \"" + p + "\"";
      return tpsInvalidArgument;
    }
    out->push_back(o);
  }
  return tpsSuccess;
}

std::unique_ptr<ArmPhases> makeServerArmPhases(const EngineSettings& engine, const std::string& run_dir,
                                               std::vector<std::string> visible_devices) {
  return std::make_unique<ServerArmPhases>(engine, run_dir, std::move(visible_devices));
}

std::unique_ptr<ArmPhases> makeCommandArmPhases(const EngineSettings& engine, const std::string& run_dir) {
  return std::make_unique<CommandArmPhases>(engine, run_dir);
}

}  // namespace tpscope::experiment
