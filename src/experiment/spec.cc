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

const char* splitModeName(SplitMode m) {
  switch (m) {
    case SplitMode::kNone:
      return "none";
    case SplitMode::kLayer:
      return "layer";
    case SplitMode::kTensor:
      return "tensor";
    case SplitMode::kRow:
      return "row";
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
    } else {
      return false;
    }
    return true;
  }
};

const char* kSharedKeys =
    "name, preset, prompt_tokens, decode_tokens, context, phases, repetitions, idle_seconds, "
    "baseline_threshold_mbps, baseline_retries, meter_period_ms, recorded_run, devices, split, backend, "
    "tokens_per_step, acceptance";
const char* kArmKeys = "name, devices, split, backend, tokens_per_step, acceptance";

void parseShared(const Reader& r, const toml::table& t, ExperimentSpec* spec) {
  SharedSettings& s = spec->shared;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (key == "name")
      spec->name = r.string(v, key);
    else if (key == "preset") {
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
  if (s.prompt_tokens + s.decode_tokens > s.context)
    throw SpecError(r.source, lineOf(t),
                    fmt::format("prompt_tokens + decode_tokens = {} does not fit context = {}",
                                s.prompt_tokens + s.decode_tokens, s.context));
}

ArmSpec parseArm(const Reader& r, const toml::table& t, const SharedSettings& shared) {
  ArmSpec arm;
  arm.line = lineOf(t);
  bool named = false;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (key == "name") {
      arm.name = r.string(v, key);
      named = true;
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
  if (const toml::node* e = root.get("experiment")) {
    if (!e->is_table()) r.error(*e, "'experiment' must be a table: [experiment]");
    parseShared(r, *e->as_table(), &spec);
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
    ArmSpec arm = parseArm(r, *n.as_table(), spec.shared);
    if (!names.insert(arm.name).second)
      throw SpecError(source, arm.line, fmt::format("duplicate arm name '{}'", arm.name));
    spec.arms.push_back(std::move(arm));
  }
  if (spec.arms.empty()) throw SpecError(source, 0, "no arms: add at least one [[arm]] table with a name");
  return spec;
}

ExperimentSpec loadSpec(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw SpecError(path, 0, "cannot read the spec file");
  std::stringstream ss;
  ss << f.rdbuf();
  ExperimentSpec spec = parseSpec(ss.str(), path);
  if (!spec.recorded_run.empty() && std::filesystem::path(spec.recorded_run).is_relative())
    spec.recorded_run = (std::filesystem::path(path).parent_path() / spec.recorded_run).lexically_normal().string();
  return spec;
}

}  // namespace tpscope::experiment
