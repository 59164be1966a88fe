// SPDX-License-Identifier: Apache-2.0
// spec.cc - TOML experiment specs (toml++ used header-only: nothing extra to load at run time).
#define TOML_HEADER_ONLY 1
#define TOML_ENABLE_FORMATTERS 0
#include "experiment/spec.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace tpscope::experiment {

std::optional<workload::SplitMode> workloadSplit(SplitMode m) {
  switch (m) {
    case SplitMode::kNone: return workload::SplitMode::kNone;
    case SplitMode::kLayer: return workload::SplitMode::kLayer;
    case SplitMode::kTensor: return workload::SplitMode::kTensor;
    case SplitMode::kRow: break;
  }
  return std::nullopt;
}

const char* splitModeName(SplitMode m) {
  const std::optional<workload::SplitMode> w = workloadSplit(m);
  return w ? workload::splitModeName(*w) : "row";
}

const char* engineName(Engine e) {
  switch (e) {
    case Engine::kSynthetic: return "synthetic";
    case Engine::kLlamaServer: return "llama-server";
    case Engine::kCommand: return "command";
  }
  return "?";
}

std::optional<SplitMode> parseSplitMode(const std::string& text) {
  for (SplitMode m : {SplitMode::kNone, SplitMode::kLayer, SplitMode::kTensor, SplitMode::kRow})
    if (text == splitModeName(m)) return m;
  return std::nullopt;
}

SpecError::SpecError(const std::string& source, int line_, const std::string& message_)
    : std::runtime_error(line_ > 0 ? fmt::format("{}:{}: {}", source, line_, message_)
                                   : fmt::format("{}: {}", source, message_)),
      line(line_),
      message(message_) {}

namespace {

int lineOf(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

struct Reader {
  std::string source;

  [[noreturn]] void error(const toml::node& n, const std::string& msg) const {
    throw SpecError(source, lineOf(n), msg);
  }

  int integer(const toml::node& n, const std::string& key, int lo, int hi) const {
    if (!n.is_integer()) error(n, fmt::format("'{}' must be an integer", key));
    const int64_t v = n.as_integer()->get();
    if (v < lo || v > hi) error(n, fmt::format("'{}' = {} is out of range [{}, {}]", key, v, lo, hi));
    return static_cast<int>(v);
  }
  double number(const toml::node& n, const std::string& key, double lo, double hi, bool lo_open = false) const {
    double v = 0;
    if (n.is_integer())
      v = static_cast<double>(n.as_integer()->get());
    else if (n.is_floating_point())
      v = n.as_floating_point()->get();
    else
      error(n, fmt::format("'{}' must be a number", key));
    if (v < lo || v > hi || (lo_open && v == lo))
      error(n, fmt::format("'{}' = {} is out of range {}{}, {}]", key, v, lo_open ? "(" : "[", lo, hi));
    return v;
  }
  std::string string(const toml::node& n, const std::string& key) const {
    if (!n.is_string()) error(n, fmt::format("'{}' must be a string", key));
    return n.as_string()->get();
  }
  // One of a workload option's names (`names` lists them for the message).
  template <typename T>
  T choice(const toml::node& n, const std::string& key, std::optional<T> (*parse)(const std::string&),
           const char* names) const {
    const std::string s = string(n, key);
    const std::optional<T> v = parse(s);
    if (!v) error(n, fmt::format("'{}' = \"{}\" is not one of {}", key, s, names));
    return *v;
  }

  // Returns true when `key` is one of the arm-delta keys and was stored.
  bool delta(const std::string& key, const toml::node& n, ArmDelta* d) const {
    if (key == "devices") {
      const toml::array* a = n.as_array();
      if (!a || a->empty()) error(n, "'devices' must be a non-empty list of GPU indices, e.g. [0, 1]");
      std::vector<int> devs;
      for (const toml::node& e : *a) devs.push_back(integer(e, "devices", 0, 63));
      std::set<int> uniq(devs.begin(), devs.end());
      if (uniq.size() != devs.size()) error(n, "'devices' lists a GPU twice");
      d->devices = devs;
    } else if (key == "split") {
      const std::string s = string(n, key);
      const auto m = parseSplitMode(s);
      if (!m) error(n, fmt::format("'split' = \"{}\" is not one of none, layer, tensor", s));
      d->split = m;
    } else if (key == "backend") {
      const std::string s = string(n, key);
      if (s != "host" && s != "p2p" && s != "nccl" && s != "auto")
        error(n, fmt::format("'backend' = \"{}\" is not one of host, p2p, nccl, auto", s));
      d->backend = s;
    } else if (key == "tokens_per_step") {
      d->tokens_per_step = integer(n, key, 1, 16);
    } else if (key == "acceptance") {
      d->acceptance = number(n, key, 0, 1, /*lo_open=*/true);
    } else if (key == "reduction") {
      d->reduction = choice(n, key, workload::parseReduction, "pushed, fused, plain");
    } else if (key == "rope_kernel") {
      d->rope_kernel = choice(n, key, workload::parseRopeKernel, "attention, kernel");
    } else if (key == "attention_pdl") {
      d->attention_pdl = choice(n, key, workload::parseAttentionPdl, "auto, on, off");
    } else if (key == "allreduce") {
      const std::string s = string(n, key);
      if (s != "internal" && s != "nccl" && s != "none" && s != "tpscope")
        error(n,
              fmt::format("'allreduce' = \"{}\" is not one of internal, nccl, none, tpscope (GGML_CUDA_ALLREDUCE)", s));
      d->allreduce = s;
    } else if (key == "tpscope_backend") {
      const std::string s = string(n, key);
      if (s != "host" && s != "p2p" && s != "nccl" && s != "auto")
        error(n, fmt::format("'tpscope_backend' = \"{}\" is not one of host, p2p, nccl, auto (TPSCOPE_ALLREDUCE)", s));
      d->tpscope_backend = s;
    } else if (key == "draft") {
      d->draft = string(n, key);
      if (d->draft->empty()) error(n, "'draft' is empty: name a draft GGUF, \"self\" or \"none\"");
    } else if (key == "spec_type") {
      d->spec_type = string(n, key);
      if (d->spec_type->empty() || d->spec_type->find_first_of(" \t") != std::string::npos)
        error(n, "'spec_type' must be one of llama-server's --spec-type names, e.g. \"ngram-simple\"");
    } else if (key == "draft_max") {
      d->draft_max = integer(n, key, 1, 16);
    } else {
      return false;
    }
    return true;
  }
};

const char* kSharedKeys =
    "name, engine, preset, prompt_tokens, decode_tokens, context, phases, repetitions, idle_seconds, "
    "baseline_threshold_mbps, baseline_retries, meter_period_ms, meter_idle_period_ms, recorded_run, devices, split, "
    "backend, "
    "tokens_per_step, acceptance, reduction, rope_kernel, attention_pdl; engine llama-server: server, model, flags, "
    "port, start_timeout_s, "
    "request_timeout_s, allreduce, tpscope_backend, draft, spec_type, draft_max; engine command: command";
const char* kArmKeys =
    "name, devices, split, backend, tokens_per_step, acceptance, reduction, rope_kernel, attention_pdl, allreduce, "
    "tpscope_backend, draft, spec_type, draft_max";

// Names become file and folder names (the run folder, a server's log): nothing that leaves the folder.
void checkName(const Reader& r, const toml::node& n, const std::string& what, const std::string& name) {
  if (name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
    r.error(n, fmt::format("{} \"{}\" would name a path outside the run folder: use a plain name without '/', "
                           "'\\', \".\" or \"..\"",
                           what, name));
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) r.error(n, fmt::format("{} \"{}\" holds a control character", what, name));
  if (name.size() > 100) r.error(n, fmt::format("{} is longer than 100 characters", what));
}

// Keys each engine does not take, with what to write instead.
struct Foreign {
  const char* key;
  const char* instead;
};
const Foreign kNotForServer[] = {
    {"preset", "llama-server loads 'model' (scripts/llama/make-gguf writes one of a preset's shape)"},
    {"backend", "tpscope's AllReduce belongs to the synthetic engine; llama-server takes 'allreduce'"},
    {"tokens_per_step", "llama-server drafts with 'draft' and 'draft_max'"},
    {"acceptance", "llama-server's acceptance is measured, not set: use 'draft' and 'draft_max'"},
    {"reduction", "the decode kernel choices belong to the synthetic engine"},
    {"rope_kernel", "the decode kernel choices belong to the synthetic engine"},
    {"attention_pdl", "the decode kernel choices belong to the synthetic engine"},
    {"context", "give llama-server its context in 'flags' (-c N); the guards compare what it reports"},
    {"command", "'command' is for engine = \"command\""},
};
const Foreign kNotForSynthetic[] = {
    {"server", "set engine = \"llama-server\""},
    {"model", "set engine = \"llama-server\""},
    {"flags", "set engine = \"llama-server\""},
    {"port", "set engine = \"llama-server\""},
    {"start_timeout_s", "set engine = \"llama-server\""},
    {"request_timeout_s", "set engine = \"llama-server\""},
    {"allreduce", "the synthetic engine's AllReduce is 'backend'"},
    {"tpscope_backend", "the synthetic engine's AllReduce is 'backend'"},
    {"draft", "the synthetic engine drafts with 'tokens_per_step' and 'acceptance'"},
    {"draft_max", "the synthetic engine drafts with 'tokens_per_step' and 'acceptance'"},
    {"spec_type", "the synthetic engine drafts with 'tokens_per_step' and 'acceptance'"},
    {"command", "set engine = \"command\""},
};
const Foreign kNotForCommand[] = {
    {"preset", "the command runs its own model"},
    {"backend", "the command chooses its own AllReduce"},
    {"tokens_per_step", "the command runs its own steps"},
    {"acceptance", "the command runs its own steps"},
    {"reduction", "the command runs its own kernels"},
    {"rope_kernel", "the command runs its own kernels"},
    {"attention_pdl", "the command runs its own kernels"},
    {"context", "the command sizes its own context"},
    {"server", "set engine = \"llama-server\""},
    {"model", "set engine = \"llama-server\""},
    {"flags", "set engine = \"llama-server\""},
    {"port", "set engine = \"llama-server\""},
    {"allreduce", "set engine = \"llama-server\""},
    {"tpscope_backend", "set engine = \"llama-server\""},
    {"draft", "set engine = \"llama-server\""},
    {"draft_max", "set engine = \"llama-server\""},
    {"spec_type", "set engine = \"llama-server\""},
    {"start_timeout_s", "set engine = \"llama-server\""},
    {"request_timeout_s", "set engine = \"llama-server\""},
};

// Keys given in [experiment] and in any [[arm]], with the line of the first, for the engine check.
using GivenKeys = std::vector<std::pair<std::string, const toml::node*>>;

void parseShared(const Reader& r, const toml::table& t, ExperimentSpec* spec, GivenKeys* given) {
  SharedSettings& s = spec->shared;
  EngineSettings& e = s.engine;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    given->emplace_back(key, &v);
    if (key == "name") {
      spec->name = r.string(v, key);
      checkName(r, v, "experiment name", spec->name);
    } else if (key == "engine") {
      const std::string name = r.string(v, key);
      if (name == "synthetic")
        e.engine = Engine::kSynthetic;
      else if (name == "llama-server")
        e.engine = Engine::kLlamaServer;
      else if (name == "command")
        e.engine = Engine::kCommand;
      else
        r.error(v, fmt::format("'engine' = \"{}\" is not one of synthetic, llama-server, command", name));
    } else if (key == "server") {
      e.server = r.string(v, key);
    } else if (key == "model") {
      e.model = r.string(v, key);
      if (e.model.empty()) r.error(v, "'model' is empty: name a GGUF file");
    } else if (key == "flags") {
      e.flags = r.string(v, key);
    } else if (key == "port") {
      e.port = r.integer(v, key, 1, 65535);
    } else if (key == "start_timeout_s") {
      e.start_timeout_s = r.number(v, key, 0, 86400, true);
    } else if (key == "request_timeout_s") {
      e.request_timeout_s = r.number(v, key, 0, 86400, true);
    } else if (key == "command") {
      const toml::array* a = v.as_array();
      if (!a || a->empty()) r.error(v, "'command' must be a non-empty list: the program and its arguments");
      for (const toml::node& x : *a) e.command.push_back(r.string(x, key));
    } else if (key == "preset") {
      s.preset = r.string(v, key);
      if (s.preset.empty()) r.error(v, "'preset' is empty");
    } else if (key == "prompt_tokens")
      s.prompt_tokens = r.integer(v, key, 1, 1 << 20);
    else if (key == "decode_tokens")
      s.decode_tokens = r.integer(v, key, 1, 1 << 20);
    else if (key == "context")
      s.context = r.integer(v, key, 1, 1 << 24);
    else if (key == "repetitions")
      s.repetitions = r.integer(v, key, 1, 1000);
    else if (key == "idle_seconds")
      s.idle_seconds = r.number(v, key, 0, 3600);
    else if (key == "baseline_threshold_mbps")
      s.baseline_threshold_mbps = r.number(v, key, 0, 1e7, true);
    else if (key == "baseline_retries")
      s.baseline_retries = r.integer(v, key, 0, 100);
    else if (key == "meter_period_ms")
      s.meter_period_ms = r.number(v, key, 0.1, 50);
    else if (key == "meter_idle_period_ms")
      s.meter_idle_period_ms = r.number(v, key, 0.1, 50);
    else if (key == "recorded_run") {
      spec->recorded_run = r.string(v, key);
      if (spec->recorded_run.empty()) r.error(v, "'recorded_run' is empty: name a run folder or leave the key out");
    } else if (key == "phases") {
      const toml::array* a = v.as_array();
      if (!a || a->empty()) r.error(v, "'phases' must be a non-empty list, e.g. [\"prefill\", \"decode\"]");
      s.phases.clear();
      for (const toml::node& e : *a) {
        const std::string p = r.string(e, key);
        if (p != "prefill" && p != "decode") r.error(e, fmt::format("phase \"{}\" is not prefill or decode", p));
        if (std::find(s.phases.begin(), s.phases.end(), p) != s.phases.end())
          r.error(e, fmt::format("phase \"{}\" is listed twice", p));
        s.phases.push_back(p);
      }
    } else if (!r.delta(key, v, &s.base)) {
      throw SpecError(r.source, static_cast<int>(k.source().begin.line),
                      fmt::format("unknown key '{}' in [experiment] (known: {})", key, kSharedKeys));
    }
  }
  if (e.engine == Engine::kSynthetic && s.prompt_tokens + s.decode_tokens > s.context)
    throw SpecError(r.source, lineOf(t),
                    fmt::format("prompt_tokens + decode_tokens = {} does not fit context = {}",
                                s.prompt_tokens + s.decode_tokens, s.context));
}

ArmSpec parseArm(const Reader& r, const toml::table& t, const SharedSettings& shared, GivenKeys* given) {
  ArmSpec arm;
  arm.line = lineOf(t);
  bool named = false;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    given->emplace_back(key, &v);
    if (key == "name") {
      arm.name = r.string(v, key);
      named = true;
      checkName(r, v, "arm name", arm.name);
    } else if (!r.delta(key, v, &arm.delta)) {
      throw SpecError(r.source, static_cast<int>(k.source().begin.line),
                      fmt::format("unknown key '{}' in [[arm]] (known: {})", key, kArmKeys));
    }
  }
  if (!named || arm.name.empty()) throw SpecError(r.source, arm.line, "an [[arm]] has no name");
  // The arm as it will run: its delta over the shared base.
  const auto devices = arm.delta.devices ? arm.delta.devices : shared.base.devices;
  const auto split = arm.delta.split ? arm.delta.split : shared.base.split;
  const SplitMode mode = split.value_or(SplitMode::kNone);
  const size_t ndev = devices ? devices->size() : 1;
  if (mode == SplitMode::kNone && ndev != 1)
    throw SpecError(r.source, arm.line,
                    fmt::format("arm '{}': split \"none\" runs on one GPU, devices lists {}", arm.name, ndev));
  if (mode != SplitMode::kNone && ndev < 2)
    throw SpecError(r.source, arm.line,
                    fmt::format("arm '{}': split \"{}\" needs at least 2 devices", arm.name, splitModeName(mode)));
  if (ndev > 8) throw SpecError(r.source, arm.line, fmt::format("arm '{}': at most 8 devices", arm.name));
  return arm;
}

void checkEngine(const Reader& r, const ExperimentSpec& spec, const GivenKeys& given) {
  const EngineSettings& e = spec.shared.engine;
  auto refuse = [&](const auto& table) {
    for (const auto& [key, node] : given)
      for (const Foreign& f : table)
        if (key == f.key)
          r.error(*node,
                  fmt::format("'{}' is not a setting of engine = \"{}\": {}", key, engineName(e.engine), f.instead));
  };
  switch (e.engine) {
    case Engine::kSynthetic: refuse(kNotForSynthetic); break;
    case Engine::kLlamaServer:
      refuse(kNotForServer);
      if (e.model.empty()) throw SpecError(r.source, 0, "engine = \"llama-server\" needs model = \"FILE.gguf\"");
      for (const ArmSpec& a : spec.arms) {
        const auto& draft = a.delta.draft ? a.delta.draft : spec.shared.base.draft;
        const auto& type = a.delta.spec_type ? a.delta.spec_type : spec.shared.base.spec_type;
        const auto& draft_max = a.delta.draft_max ? a.delta.draft_max : spec.shared.base.draft_max;
        const bool drafting = (draft && *draft != "none") || (type && *type != "none");
        if (draft_max && !drafting)
          throw SpecError(r.source, a.line,
                          fmt::format("arm '{}': draft_max needs a draft (a GGUF or \"self\") or a spec_type", a.name));
        const auto& allreduce = a.delta.allreduce ? a.delta.allreduce : spec.shared.base.allreduce;
        const auto& tpscope_backend =
            a.delta.tpscope_backend ? a.delta.tpscope_backend : spec.shared.base.tpscope_backend;
        if (tpscope_backend && allreduce.value_or("") != "tpscope")
          throw SpecError(r.source, a.line,
                          fmt::format("arm '{}': tpscope_backend chooses tpscope's backend under allreduce = "
                                      "\"tpscope\", but the arm's allreduce is {}",
                                      a.name, allreduce ? "\"" + *allreduce + "\"" : "unset"));
      }
      break;
    case Engine::kCommand:
      refuse(kNotForCommand);
      if (e.command.empty())
        throw SpecError(r.source, 0, "engine = \"command\" needs command = [\"PROGRAM\", \"ARG\", ...]");
      break;
  }
}

}  // namespace

ExperimentSpec parseSpec(const std::string& text, const std::string& source) {
  ExperimentSpec spec;
  spec.source = source;
  spec.text = text;
  const Reader r{source};
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw SpecError(source, static_cast<int>(e.source().begin.line),
                    fmt::format("malformed TOML: {}", e.description()));
  }
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (key != "experiment" && key != "arm")
      throw SpecError(source, static_cast<int>(k.source().begin.line),
                      fmt::format("unknown key '{}' at top level (known: [experiment], [[arm]])", key));
  }
  GivenKeys given;
  if (const toml::node* e = root.get("experiment")) {
    if (!e->is_table()) r.error(*e, "'experiment' must be a table: [experiment]");
    parseShared(r, *e->as_table(), &spec, &given);
  }
  if (spec.name.empty()) {
    std::string stem = source.substr(source.find_last_of('/') + 1);
    spec.name = stem.substr(0, stem.find('.'));
  }
  const toml::node* arms = root.get("arm");
  if (!arms) throw SpecError(source, 0, "no arms: add at least one [[arm]] table with a name");
  const toml::array* list = arms->as_array();
  if (!list || !list->is_array_of_tables()) r.error(*arms, "'arm' must be an array of tables: write [[arm]]");
  std::set<std::string> names;
  for (const toml::node& n : *list) {
    ArmSpec arm = parseArm(r, *n.as_table(), spec.shared, &given);
    if (!names.insert(arm.name).second)
      throw SpecError(source, arm.line, fmt::format("duplicate arm name '{}'", arm.name));
    spec.arms.push_back(std::move(arm));
  }
  if (spec.arms.empty()) throw SpecError(source, 0, "no arms: add at least one [[arm]] table with a name");
  checkEngine(r, spec, given);
  return spec;
}

ExperimentSpec loadSpec(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw SpecError(path, 0, "cannot read the spec file");
  std::stringstream ss;
  ss << f.rdbuf();
  ExperimentSpec spec = parseSpec(ss.str(), path);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto resolve = [&dir](std::string* p) {
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (dir / *p).lexically_normal().string();
  };
  resolve(&spec.recorded_run);
  // Programs and models the engine starts: absolute, so "./server.sh" beside the spec stays a path.
  auto resolveAbsolute = [&dir](std::string* p) {
    if (!p->empty() && std::filesystem::path(*p).is_relative())
      *p = std::filesystem::absolute(dir / *p).lexically_normal().string();
  };
  EngineSettings& e = spec.shared.engine;
  resolveAbsolute(&e.model);
  // A bare program name is looked up in PATH; a path is the spec's.
  if (e.server.find('/') != std::string::npos) resolveAbsolute(&e.server);
  if (!e.command.empty() && e.command[0].find('/') != std::string::npos) resolveAbsolute(&e.command[0]);
  auto resolveDraft = [&](std::optional<std::string>& d) {
    if (d && *d != "self" && *d != "none") resolveAbsolute(&*d);
  };
  resolveDraft(spec.shared.base.draft);
  for (ArmSpec& a : spec.arms) resolveDraft(a.delta.draft);
  return spec;
}

}  // namespace tpscope::experiment
