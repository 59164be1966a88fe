// SPDX-License-Identifier: Apache-2.0
// run_folder.cc - run folder JSON and JSONL, written as the run goes and read back for the report.
#include "experiment/run_folder.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "common/bounded_input.h"
#include "common/memory_reserve.h"
#include "common/utf8.h"
#include "meter/pm_bursts.h"
#include "meter/window.h"

namespace tpscope::experiment {

using nlohmann::json;

namespace {

// A whole number of type T, at least `lo`. nlohmann's get<T>() casts whatever number it holds, and a
// float outside T's range (an integer literal too large for 64 bits parses as one) makes that cast
// undefined; a run folder is outside input, so every integer field is read through this, which throws
// json's own errors naming the field (`key`, where the caller gives it) and the value.
template <typename T>
T whole(const json& v, T lo = std::numeric_limits<T>::min(), const char* key = nullptr) {
  static_assert(std::is_integral_v<T>);
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<T>::max());
  const std::string what = key ? fmt::format("\"{}\" = {}", key, v.dump()) : v.dump();
  std::optional<T> out;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= kMax) out = static_cast<T>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s >= 0 ? static_cast<uint64_t>(s) <= kMax
               : std::is_signed_v<T> && s >= static_cast<int64_t>(std::numeric_limits<T>::min()))
      out = static_cast<T>(s);
  } else if (v.is_number_float()) {
    throw json::type_error::create(302, fmt::format("{} is not a whole number", what), &v);
  } else {
    throw json::type_error::create(
        302,
        fmt::format("{}type must be a whole number, but is {}", key ? fmt::format("\"{}\": ", key) : "", v.type_name()),
        &v);
  }
  if (!out) throw json::out_of_range::create(406, fmt::format("{} is out of range for this field", what), &v);
  if (*out < lo)
    throw json::out_of_range::create(406, fmt::format("{} is below this field's minimum of {}", what, lo), &v);
  return *out;
}
template <typename T>
std::vector<T> wholes(const json& v, T lo = std::numeric_limits<T>::min(), const char* key = nullptr) {
  if (!v.is_array())
    throw json::type_error::create(302, fmt::format("type must be array, but is {}", v.type_name()), &v);
  std::vector<T> out;
  for (const json& x : v) out.push_back(whole<T>(x, lo, key));
  return out;
}
// j[key] as a whole number of at least lo.
template <typename T>
T wholeAt(const json& j, const char* key, T lo = std::numeric_limits<T>::min()) {
  return whole<T>(j.at(key), lo, key);
}
// j[key] as a whole number, or `absent` where j has no such key (as json::value).
template <typename T>
T wholeOr(const json& j, const char* key, T absent, T lo = std::numeric_limits<T>::min()) {
  return j.contains(key) ? whole<T>(j.at(key), lo, key) : absent;
}

template <typename T>
std::optional<T> getOpt(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return whole<T>(j.at(key), std::numeric_limits<T>::min(), key);
  else
    return j.at(key).get<T>();
}

json toJson(const EffectiveSettings& e) {
  json s = json::array();
  for (const Setting& x : e.settings)
    s.push_back({{"key", x.key}, {"value", x.value}, {"source", settingSourceName(x.source)}});
  return {{"arm", e.arm}, {"settings", s}};
}

EffectiveSettings effectiveFromJson(const json& j) {
  EffectiveSettings e;
  e.arm = j.at("arm").get<std::string>();
  for (const json& x : j.at("settings")) {
    Setting s{x.at("key").get<std::string>(), x.at("value").get<std::string>(), SettingSource::kDefault};
    const std::string src = x.value("source", "default");
    for (SettingSource c : {SettingSource::kDefault, SettingSource::kShared, SettingSource::kArm,
                            SettingSource::kDerived, SettingSource::kAuto, SettingSource::kEngine})
      if (src == settingSourceName(c)) s.source = c;
    e.settings.push_back(s);
  }
  return e;
}

json toJson(const QuiesceRecord& q) {
  json idle = json::array();
  for (const auto& gpu : q.idle_mbps) {
    json row = json::object();
    for (int c = 0; c < kMeterCounters; ++c) row[meterCounterName(static_cast<MeterCounter>(c))] = jsonOrNull(gpu[c]);
    idle.push_back(row);
  }
  return {{"passed", q.passed},         {"idle_ms", (q.end_ns - q.start_ns) / 1000000}, {"start_ns", q.start_ns},
          {"end_ns", q.end_ns},         {"threshold_mbps", q.threshold_mbps},           {"idle_mbps", idle},
          {"other_pids", q.other_pids}, {"processes_checked", q.processes_checked},     {"reason", q.reason}};
}

QuiesceRecord quiesceFromJson(const json& j) {
  QuiesceRecord q;
  q.passed = j.at("passed").get<bool>();
  q.start_ns = wholeOr<int64_t>(j, "start_ns", 0);
  q.end_ns = wholeOr<int64_t>(j, "end_ns", 0);
  q.threshold_mbps = j.value("threshold_mbps", 0.0);
  for (const json& row : j.value("idle_mbps", json::array())) {
    std::array<std::optional<double>, kMeterCounters> a{};
    for (int c = 0; c < kMeterCounters; ++c) a[c] = getOpt<double>(row, meterCounterName(static_cast<MeterCounter>(c)));
    q.idle_mbps.push_back(a);
  }
  q.other_pids =
      j.contains("other_pids") ? wholes<unsigned>(j.at("other_pids"), 0, "other_pids") : std::vector<unsigned>{};
  q.processes_checked = j.value("processes_checked", false);
  q.reason = j.value("reason", std::string());
  return q;
}

json toJson(const PmStep& s) {
  json gpus = json::array();
  for (const PmStepGpu& g : s.gpus) {
    json samples = json::array();
    for (const PmStepSample& x : g.samples) samples.push_back(json::array({x.t_ns, x.tx_bytes, x.rx_bytes}));
    gpus.push_back({{"gpu", g.gpu}, {"samples", samples}});
  }
  return {{"interval_us", s.interval_us},
          {"step", s.step},
          {"step_start_ns", s.start_ns},
          {"step_end_ns", s.end_ns},
          {"allreduce_calls_per_step", jsonOrNull(s.allreduce_calls_per_step)},
          {"complete", s.complete},
          {"note", s.note},
          {"gpus", gpus}};
}

PmStep pmStepFromJson(const json& j) {
  PmStep s;
  s.interval_us = wholeAt<int64_t>(j, "interval_us", 1);
  s.step = wholeAt<int64_t>(j, "step", 0);
  s.start_ns = wholeAt<int64_t>(j, "step_start_ns");
  s.end_ns = wholeAt<int64_t>(j, "step_end_ns");
  s.allreduce_calls_per_step = getOpt<double>(j, "allreduce_calls_per_step");
  s.complete = j.at("complete").get<bool>();
  s.note = j.value("note", std::string());
  for (const json& g : j.at("gpus")) {
    PmStepGpu out;
    out.gpu = wholeAt<int>(g, "gpu", 0);
    for (const json& x : g.at("samples"))  // [t_ns, tx_bytes, rx_bytes]
      out.samples.push_back({whole<int64_t>(x.at(0)), x.at(1).get<double>(), x.at(2).get<double>()});
    s.gpus.push_back(std::move(out));
  }
  return s;
}

}  // namespace

json toJson(const Manifest& m) {
  json eff = json::array();
  for (const EffectiveSettings& e : m.effective) eff.push_back(toJson(e));
  return {{"format", m.format},
          {"experiment", m.experiment},
          {"spec_path", m.spec_path},
          {"spec_toml", m.spec_toml},
          {"arms", m.arms},
          {"phases", m.phases},
          {"effective", eff},
          {"versions", m.versions},
          {"topology", m.topology},
          {"machine", m.machine},
          {"start_time", m.start_time},
          {"recording", m.recording},
          {"invocation", m.invocation}};
}

namespace {

// The settings the report computes with (reportArm) must parse as it parses them and lie in the ranges
// a spec allows: a damaged or hand-edited manifest is refused here, naming the arm, the key and the value,
// not thrown out of the report.
void checkReportSettings(const EffectiveSettings& e) {
  const char* key = "devices";
  try {
    const std::vector<int> devices = e.devices();
    if (devices.size() > kMaxArmDevices) throw std::invalid_argument(key);
    for (int d : devices)
      if (d < 0 || d > kMaxDeviceIndex) throw std::invalid_argument(key);
    key = "tokens_per_step";
    if (!e.value(key).empty() && (std::stoi(e.value(key)) < 1 || std::stoi(e.value(key)) > kMaxTokensPerStep))
      throw std::invalid_argument(key);
    key = "acceptance";
    if (const std::string a = e.value(key); !a.empty()) {
      char* end = nullptr;
      const double v = std::strtod(a.c_str(), &end);
      // (0, 1], as the spec takes it; NaN fails both comparisons, so it is refused by the negation.
      if (end != a.c_str() + a.size() || !(v > 0 && v <= 1)) throw std::invalid_argument(key);
    }
  } catch (const std::logic_error&) {  // std::stoi's invalid_argument and out_of_range too
    throw RecordError(fmt::format("manifest.json: arm {} has a {} that does not parse or is out of its range: \"{}\"",
                                  toUtf8(e.arm), key, toUtf8(e.value(key))));
  }
}

// Names listed once each: a repeated arm or phase would be counted twice by the report (and would cost
// it work for nothing), so a manifest that repeats one is refused as the spec parser refuses it.
void checkDistinct(const std::vector<std::string>& names, const char* what) {
  std::set<std::string> seen;
  for (const std::string& n : names)
    if (!seen.insert(n).second) throw RecordError(fmt::format("manifest.json lists {} \"{}\" twice", what, toUtf8(n)));
}

}  // namespace

Manifest manifestFromJson(const json& j) {
  Manifest m;
  try {
    m.format = j.at("format").get<std::string>();
    if (m.format != kRunFormat)
      throw RecordError(
          fmt::format("manifest.json has format \"{}\", this tpscope reads \"{}\"", m.format, kRunFormat));
    m.experiment = j.value("experiment", std::string());
    m.spec_path = j.value("spec_path", std::string());
    m.spec_toml = j.value("spec_toml", std::string());
    m.arms = j.at("arms").get<std::vector<std::string>>();
    if (m.arms.size() > kMaxArms)
      throw RecordError(
          fmt::format("manifest.json lists {} arms, more than the {} a spec may have", m.arms.size(), kMaxArms));
    checkDistinct(m.arms, "arm");
    m.phases = j.at("phases").get<std::vector<std::string>>();
    checkDistinct(m.phases, "phase");
    for (const std::string& p : m.phases)
      if (p != "prefill" && p != "decode")
        throw RecordError(fmt::format("manifest.json lists phase \"{}\", which is not prefill or decode", toUtf8(p)));
    const std::set<std::string> arms(m.arms.begin(), m.arms.end());
    std::set<std::string> described;
    for (const json& e : j.value("effective", json::array())) {
      m.effective.push_back(effectiveFromJson(e));
      const EffectiveSettings& last = m.effective.back();
      if (!arms.count(last.arm))
        throw RecordError(
            fmt::format("manifest.json has settings for arm \"{}\", which its arms do not list", toUtf8(last.arm)));
      if (!described.insert(last.arm).second)
        throw RecordError(fmt::format("manifest.json has the settings of arm \"{}\" twice", toUtf8(last.arm)));
      std::set<std::string> keys;
      for (const Setting& x : last.settings)
        if (!keys.insert(x.key).second)
          throw RecordError(
              fmt::format("manifest.json: arm {} has setting \"{}\" twice", toUtf8(last.arm), toUtf8(x.key)));
      checkReportSettings(last);
    }
    m.versions = j.value("versions", json::object());
    m.topology = j.value("topology", json::object());
    m.machine = j.value("machine", json::object());
    m.invocation = j.value("invocation", json::object());
    m.start_time = j.value("start_time", std::string());
    m.recording = j.value("recording", std::string());
  } catch (const json::exception& e) {
    throw RecordError(fmt::format("manifest.json is missing a field or has a wrong type ({})", e.what()));
  }
  return m;
}

json toJson(const RepetitionResult& r) {
  json phases = json::array();
  for (const PhaseResult& p : r.phases) {
    json ar = json::array();
    for (const PathCalls& c : p.allreduce)
      ar.push_back({{"path", c.path},
                    {"calls", c.calls},
                    {"payload_bytes", c.payload_bytes},
                    {"tx_bytes", c.tx_bytes},
                    {"rx_bytes", c.rx_bytes}});
    json gpus = json::array();
    for (const GpuTraffic& g : p.gpus)
      gpus.push_back({{"gpu", g.gpu},
                      {"pcie_rx_bytes", jsonOrNull(g.rx_bytes)},
                      {"pcie_tx_bytes", jsonOrNull(g.tx_bytes)},
                      {"pcie_rx_own_bytes", jsonOrNull(g.own_rx_bytes)},
                      {"pcie_tx_own_bytes", jsonOrNull(g.own_tx_bytes)},
                      {"pcie_rx_mbps", jsonOrNull(g.rx_mbps)},
                      {"pcie_tx_mbps", jsonOrNull(g.tx_mbps)},
                      {"nvlink_rx_mbps", jsonOrNull(g.nvlink_rx_mbps)},
                      {"nvlink_tx_mbps", jsonOrNull(g.nvlink_tx_mbps)},
                      {"samples", g.samples},
                      {"dmon_rx_mbps", jsonOrNull(g.dmon_rx_mbps)},
                      {"dmon_tx_mbps", jsonOrNull(g.dmon_tx_mbps)},
                      {"dmon_samples", g.dmon_samples},
                      {"pcie_ceiling_mbps", jsonOrNull(g.ceiling_mbps)}});
    json pj = {{"phase", p.phase},     {"start_ns", p.start_ns}, {"end_ns", p.end_ns},
               {"tokens", p.tokens},   {"steps", p.steps},       {"tok_s", p.tok_s},
               {"step_ms", p.step_ms}, {"allreduce", ar},        {"gpus", gpus}};
    // An engine's own figures only where it reports them, so synthetic runs keep their shape.
    if (p.engine_tok_s || p.engine_ms || !p.engine.is_null()) {
      pj["engine_tok_s"] = jsonOrNull(p.engine_tok_s);
      pj["engine_ms"] = jsonOrNull(p.engine_ms);
      pj["engine"] = p.engine;
    }
    if (p.pm_step) pj["pm_step"] = toJson(*p.pm_step);  // runs metered by NVML alone keep their shape
    if (!p.output.empty()) {
      // bfloat16 bit patterns: exact for the workload's bfloat16 activations, five digits a value at most.
      std::vector<uint16_t> bits(p.output.size());
      for (size_t i = 0; i < bits.size(); ++i) {
        uint32_t u = 0;
        std::memcpy(&u, &p.output[i], 4);
        // Nearest, ties to even (a value already in bfloat16 keeps its bits); a NaN stays a NaN.
        bits[i] = std::isnan(p.output[i]) ? static_cast<uint16_t>((u >> 16) | 0x40)
                                          : static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      }
      pj["output_bf16"] = bits;
    }
    phases.push_back(std::move(pj));
  }
  json out = {{"arm", r.arm},         {"repetition", r.repetition},   {"attempt", r.attempt}, {"valid", r.valid},
              {"devices", r.devices}, {"quiesce", toJson(r.quiesce)}, {"phases", phases}};
  if (!r.disturbed.empty()) out["disturbed"] = r.disturbed;
  if (!r.meter.is_null()) out["meter"] = r.meter;
  return out;
}

RepetitionResult repetitionFromJson(const json& j) {
  RepetitionResult r;
  r.arm = j.at("arm").get<std::string>();
  r.repetition = wholeAt<int>(j, "repetition", 0);
  r.attempt = wholeOr<int>(j, "attempt", 0, 0);
  r.valid = j.at("valid").get<bool>();
  r.devices = j.contains("devices") ? wholes<int>(j.at("devices"), 0, "devices") : std::vector<int>{};
  r.quiesce = quiesceFromJson(j.at("quiesce"));
  r.disturbed = j.value("disturbed", std::string());
  r.meter = j.value("meter", json(nullptr));
  for (const json& pj : j.at("phases")) {
    PhaseResult p;
    p.phase = pj.at("phase").get<std::string>();
    p.start_ns = wholeAt<int64_t>(pj, "start_ns");
    p.end_ns = wholeAt<int64_t>(pj, "end_ns");
    p.tokens = wholeAt<int64_t>(pj, "tokens", 0);
    p.steps = wholeAt<int64_t>(pj, "steps", 0);
    p.tok_s = pj.at("tok_s").get<double>();
    p.step_ms = pj.at("step_ms").get<double>();
    p.engine_tok_s = getOpt<double>(pj, "engine_tok_s");
    p.engine_ms = getOpt<double>(pj, "engine_ms");
    p.engine = pj.value("engine", json(nullptr));
    if (pj.contains("pm_step") && !pj.at("pm_step").is_null()) p.pm_step = pmStepFromJson(pj.at("pm_step"));
    if (pj.contains("output_bf16"))
      for (uint16_t b : wholes<uint16_t>(pj.at("output_bf16"))) {
        const uint32_t u = static_cast<uint32_t>(b) << 16;
        float v = 0;
        std::memcpy(&v, &u, 4);
        p.output.push_back(v);
      }
    for (const json& c : pj.value("allreduce", json::array()))
      p.allreduce.push_back({c.at("path").get<std::string>(), wholeAt<uint64_t>(c, "calls"),
                             wholeAt<uint64_t>(c, "payload_bytes"), wholes<uint64_t>(c.at("tx_bytes"), 0, "tx_bytes"),
                             wholes<uint64_t>(c.at("rx_bytes"), 0, "rx_bytes")});
    for (const json& g : pj.at("gpus")) {
      GpuTraffic t;
      t.gpu = wholeAt<int>(g, "gpu", 0);
      t.rx_bytes = getOpt<double>(g, "pcie_rx_bytes");
      t.tx_bytes = getOpt<double>(g, "pcie_tx_bytes");
      t.own_rx_bytes = getOpt<double>(g, "pcie_rx_own_bytes");
      t.own_tx_bytes = getOpt<double>(g, "pcie_tx_own_bytes");
      t.rx_mbps = getOpt<double>(g, "pcie_rx_mbps");
      t.tx_mbps = getOpt<double>(g, "pcie_tx_mbps");
      t.nvlink_rx_mbps = getOpt<double>(g, "nvlink_rx_mbps");
      t.nvlink_tx_mbps = getOpt<double>(g, "nvlink_tx_mbps");
      t.samples = wholeOr<int>(g, "samples", 0, 0);
      t.dmon_rx_mbps = getOpt<double>(g, "dmon_rx_mbps");
      t.dmon_tx_mbps = getOpt<double>(g, "dmon_tx_mbps");
      t.dmon_samples = wholeOr<int>(g, "dmon_samples", 0, 0);
      t.ceiling_mbps = getOpt<double>(g, "pcie_ceiling_mbps");
      p.gpus.push_back(t);
    }
    r.phases.push_back(std::move(p));
  }
  return r;
}

json toJson(const SampleRow& s) {
  return {{"arm", s.arm},
          {"repetition", s.repetition},
          {"gpu", s.gpu},
          {"t_ns", s.t_ns},
          {"pcie_rx_bytes", jsonOrNull(s.pcie_rx_bytes)},
          {"pcie_tx_bytes", jsonOrNull(s.pcie_tx_bytes)},
          {"nvlink_rx_bytes", jsonOrNull(s.nvlink_rx_bytes)},
          {"nvlink_tx_bytes", jsonOrNull(s.nvlink_tx_bytes)},
          {"pcie_rx_t_ns", jsonOrNull(s.pcie_rx_t_ns)},
          {"pcie_tx_t_ns", jsonOrNull(s.pcie_tx_t_ns)},
          {"nvlink_rx_t_ns", jsonOrNull(s.nvlink_rx_t_ns)},
          {"nvlink_tx_t_ns", jsonOrNull(s.nvlink_tx_t_ns)}};
}

SampleRow sampleFromJson(const json& j) {
  SampleRow s;
  s.arm = j.at("arm").get<std::string>();
  s.repetition = wholeAt<int>(j, "repetition", 0);
  s.gpu = wholeAt<int>(j, "gpu", 0);
  s.t_ns = wholeAt<int64_t>(j, "t_ns");
  s.pcie_rx_bytes = getOpt<uint64_t>(j, "pcie_rx_bytes");
  s.pcie_tx_bytes = getOpt<uint64_t>(j, "pcie_tx_bytes");
  s.nvlink_rx_bytes = getOpt<uint64_t>(j, "nvlink_rx_bytes");
  s.nvlink_tx_bytes = getOpt<uint64_t>(j, "nvlink_tx_bytes");
  s.pcie_rx_t_ns = getOpt<int64_t>(j, "pcie_rx_t_ns");
  s.pcie_tx_t_ns = getOpt<int64_t>(j, "pcie_tx_t_ns");
  s.nvlink_rx_t_ns = getOpt<int64_t>(j, "nvlink_rx_t_ns");
  s.nvlink_tx_t_ns = getOpt<int64_t>(j, "nvlink_tx_t_ns");
  return s;
}

namespace {

// Cuts `path` after its last newline: a line a writer left without one was interrupted and is not part
// of the file. Nothing happens to a missing file.
void cutUnfinishedLine(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  uintmax_t keep = size;
  char c = 0;
  while (keep > 0) {
    in.seekg(static_cast<std::streamoff>(keep - 1));
    if (!in.get(c) || c == '\n') break;
    --keep;
  }
  if (keep < size) std::filesystem::resize_file(path, keep, ec);
  if (ec) throw RecordError(fmt::format("cannot cut the unfinished last line of {}: {}", path, ec.message()));
}

}  // namespace

RunWriter::RunWriter(const std::string& dir, const Manifest& manifest, Mode mode) : dir_(dir) {
  std::error_code ec;
  if (mode == Mode::kNew) {
    if (std::filesystem::exists(dir + "/manifest.json", ec))
      throw RecordError(
          fmt::format("{} holds a run already: continue it with `tpscope arms --resume {}`, or name "
                      "another folder with --out",
                      dir, dir));
    std::filesystem::create_directories(dir, ec);
    if (ec) throw RecordError(fmt::format("cannot create the run folder {}: {}", dir, ec.message()));
    std::ofstream m(dir + "/manifest.json");
    m << toJson(manifest).dump(2) << "\n";
    if (!m) throw RecordError(fmt::format("cannot write into the run folder {}", dir));
  } else {
    cutUnfinishedLine(dir + "/results.jsonl");
    cutUnfinishedLine(dir + "/samples.jsonl");
    rewrite(manifest);
  }
  const auto how = mode == Mode::kNew ? std::ios::out : std::ios::app;
  results_.open(dir + "/results.jsonl", how);
  samples_.open(dir + "/samples.jsonl", how);
  if (!results_ || !samples_) throw RecordError(fmt::format("cannot write into the run folder {}", dir));
}

std::string isoTimeUtc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void RunWriter::rewrite(const Manifest& manifest) {
  // Written beside and renamed over, so a reader never sees half a manifest.
  const std::string tmp = dir_ + "/manifest.json.tmp";
  {
    std::ofstream m(tmp);
    m << toJson(manifest).dump(2) << "\n";
    if (!m) throw RecordError(fmt::format("cannot write {}", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir_ + "/manifest.json", ec);
  if (ec) throw RecordError(fmt::format("cannot replace {}/manifest.json: {}", dir_, ec.message()));
}

void RunWriter::append(const RepetitionResult& r) { results_ << toJson(r).dump() << "\n" << std::flush; }

void RunWriter::append(const std::vector<SampleRow>& samples) {
  for (const SampleRow& s : samples) samples_ << toJson(s).dump() << "\n";
  samples_.flush();
}

namespace {

// Whether a parse error is the parser reaching the end of a line of `length` bytes: what a line cut short
// gives (the error's column lies past its last byte), and no other error does.
bool endsShort(const std::string& error, size_t length) {
  const size_t at = error.find(", column ");
  return at != std::string::npos && std::strtoull(error.c_str() + at + 9, nullptr, 10) > length;
}

// Each line of a JSONL file parsed (within the depth limit) and handed to `each` with its number. A line
// counts once its newline is written: a last line without one that ends before its JSON does is what a
// run stopped while writing leaves, and is left out with a note in *notes; any other line that does not
// parse, or that `each` refuses, is a RecordError naming the file and the line.
template <typename F>
void parseJsonl(const std::string& path, const std::string& text, std::vector<std::string>* notes, F&& each) {
  const std::string_view all(text);
  size_t n = 0;
  for (size_t at = 0; at < all.size();) {
    const size_t nl = all.find('\n', at);
    const bool terminated = nl != std::string_view::npos;
    const std::string_view line = all.substr(at, terminated ? nl - at : std::string_view::npos);
    at = terminated ? nl + 1 : all.size();
    ++n;
    if (line.empty()) continue;
    checkMemory();  // between two records: where running out of memory may throw (common/memory_reserve.h)
    std::string error;
    std::optional<json> j = parseJsonBounded(line, &error);
    if (!j && !terminated && endsShort(error, line.size())) {
      notes->push_back(
          fmt::format("{}:{}: the last line was cut off (the run stopped while writing it); it is left out", path, n));
      return;
    }
    try {
      if (!j) throw RecordError(error);
      each(*j, n);
    } catch (const json::exception& e) {
      throw RecordError(fmt::format("{}:{}: corrupt record ({})", path, n, e.what()));
    } catch (const RecordError& e) {
      throw RecordError(fmt::format("{}:{}: corrupt record ({})", path, n, e.what()));
    }
  }
}

// The file at dir/name, or nullopt where there is none; RecordError for anything else that keeps it
// from being read whole (not a regular file, larger than `cap`, unreadable).
std::optional<std::string> readRunFile(const std::string& dir, const char* name, size_t cap) {
  std::string text, error;
  switch (readRegularFile(dir + "/" + name, cap, &text, &error)) {
    case FileReadError::kNone: return text;
    case FileReadError::kMissing: return std::nullopt;
    default: throw RecordError(error);
  }
}

// A repetition's phases each once, and no more GPUs, AllReduce paths or PM records than a run writes:
// what the report reads from a line, bounded, so that its work grows with the folder and not with the
// square of repeats inside a line.
void checkRepetition(const RepetitionResult& r) {
  std::set<std::string> phases;
  for (const PhaseResult& p : r.phases) {
    if (!phases.insert(p.phase).second)
      throw RecordError(fmt::format("arm {} repetition {} records phase \"{}\" twice", toUtf8(r.arm), r.repetition + 1,
                                    toUtf8(p.phase)));
    if (p.gpus.size() > kMaxArmDevices || (p.pm_step && p.pm_step->gpus.size() > kMaxArmDevices))
      throw RecordError(
          fmt::format("phase {} holds the traffic of more than {} GPUs", toUtf8(p.phase), kMaxArmDevices));
    if (p.allreduce.size() > kMaxRecordedPaths)
      throw RecordError(fmt::format("phase {} lists {} AllReduce paths, more than the {} a run records",
                                    toUtf8(p.phase), p.allreduce.size(), kMaxRecordedPaths));
    if (p.pm_step)
      for (const PmStepGpu& g : p.pm_step->gpus)
        if (g.samples.size() > kPmStepMaxRecords)
          throw RecordError(fmt::format("phase {} keeps {} PM records of one GPU, more than the {} a step keeps",
                                        toUtf8(p.phase), g.samples.size(), kPmStepMaxRecords));
  }
}

// The same bounds on a line before it is converted: a line of 100,000 paths is refused at the count,
// not after 100,000 records are made of it.
void checkRepetitionSize(const json& j) {
  if (!j.is_object() || !j.contains("phases") || !j.at("phases").is_array()) return;  // the conversion says why
  for (const json& pj : j.at("phases")) {
    if (!pj.is_object()) continue;
    const std::string phase =
        pj.contains("phase") && pj.at("phase").is_string() ? pj.at("phase").get<std::string>() : "?";
    if (pj.contains("gpus") && pj.at("gpus").is_array() && pj.at("gpus").size() > kMaxArmDevices)
      throw RecordError(fmt::format("phase {} holds the traffic of more than {} GPUs", toUtf8(phase), kMaxArmDevices));
    if (pj.contains("allreduce") && pj.at("allreduce").is_array() && pj.at("allreduce").size() > kMaxRecordedPaths)
      throw RecordError(fmt::format("phase {} lists {} AllReduce paths, more than the {} a run records", toUtf8(phase),
                                    pj.at("allreduce").size(), kMaxRecordedPaths));
  }
}

}  // namespace

RunRecord readRun(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw RecordError(fmt::format("run folder {} does not exist", dir));
  const std::optional<std::string> manifest = readRunFile(dir, "manifest.json", kMaxManifestBytes);
  if (!manifest) throw RecordError(fmt::format("{}/manifest.json is missing: not a run folder", dir));
  return parseRun(dir, *manifest, readRunFile(dir, "results.jsonl", kMaxResultsBytes),
                  readRunFile(dir, "samples.jsonl", kMaxSamplesBytes),
                  readRunFile(dir, "recording.txt", kMaxRecordingBytes));
}

RunRecord parseRun(const std::string& dir, const std::string& manifest, const std::optional<std::string>& results,
                   const std::optional<std::string>& samples, const std::optional<std::string>& recording) {
  const std::string mpath = dir + "/manifest.json";
  RunRecord run;
  std::string error;
  const std::optional<json> mj = parseJsonBounded(manifest, &error);
  if (!mj) throw RecordError(fmt::format("{} is not valid JSON ({})", mpath, error));
  run.manifest = manifestFromJson(*mj);
  if (recording && run.manifest.recording.empty()) {
    std::string line = toUtf8(recording->substr(0, recording->find('\n')));  // plain text, shown in JSON too
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    const std::string date = run.manifest.start_time.substr(0, 10);  // ISO 8601: YYYY-MM-DD
    if (!line.empty())
      run.manifest.recording = fmt::format("Recorded run: {}on {}", date.empty() ? "" : date + " ", line);
  }
  if (!results) throw RecordError(fmt::format("{}/results.jsonl is missing", dir));
  // Each attempt once: the line that first recorded it, by (arm, repetition, attempt).
  std::map<std::tuple<std::string, int, int>, size_t> seen;
  parseJsonl(dir + "/results.jsonl", *results, &run.notes, [&](const json& j, size_t line) {
    checkRepetitionSize(j);
    RepetitionResult r = repetitionFromJson(j);
    checkRepetition(r);
    if (const auto [it, fresh] = seen.emplace(std::make_tuple(r.arm, r.repetition, r.attempt), line); !fresh)
      throw RecordError(fmt::format("arm {} repetition {} attempt {} is recorded twice (line {} has it too)",
                                    toUtf8(r.arm), r.repetition + 1, r.attempt + 1, it->second));
    run.repetitions.push_back(std::move(r));
  });
  if (samples)
    parseJsonl(dir + "/samples.jsonl", *samples, &run.notes,
               [&](const json& j, size_t) { run.samples.push_back(sampleFromJson(j)); });
  return run;
}

std::vector<GpuTraffic> trafficFromWindow(const MeterWindow& w, const std::vector<MeterGpu>& gpus) {
  std::vector<GpuTraffic> out;
  for (size_t i = 0; i < w.cells.size() && i < gpus.size(); ++i) {
    const auto& c = w.cells[i];
    const MeterCell& rx = c[static_cast<int>(MeterCounter::kPcieRx)];
    const MeterCell& tx = c[static_cast<int>(MeterCounter::kPcieTx)];
    GpuTraffic t;
    t.gpu = gpus[i].index;
    t.rx_bytes = rx.bytes;
    t.tx_bytes = tx.bytes;
    t.own_rx_bytes = rx.own_bytes;
    t.own_tx_bytes = tx.own_bytes;
    t.rx_mbps = rx.mean_mbps;
    t.tx_mbps = tx.mean_mbps;
    t.nvlink_rx_mbps = c[static_cast<int>(MeterCounter::kNvlinkRx)].mean_mbps;
    t.nvlink_tx_mbps = c[static_cast<int>(MeterCounter::kNvlinkTx)].mean_mbps;
    t.samples = rx.samples;
    // The dmon figure beside the first source's (the runner runs it beside NVML).
    const MeterCell::Beside *drx = rx.from("dmon"), *dtx = tx.from("dmon");
    if (drx) t.dmon_rx_mbps = drx->figure.mean_mbps, t.dmon_samples = drx->figure.samples;
    if (dtx) t.dmon_tx_mbps = dtx->figure.mean_mbps;
    t.ceiling_mbps = gpus[i].pcie_ceiling_mbps;
    out.push_back(t);
  }
  return out;
}

namespace {

// The counters a sample row keeps: its value and that value's read time, one pair of fields each.
struct RowCounter {
  MeterCounter counter;
  std::optional<uint64_t> SampleRow::*bytes;
  std::optional<int64_t> SampleRow::*t_ns;
};
constexpr RowCounter kRowCounters[] = {
    {MeterCounter::kPcieRx, &SampleRow::pcie_rx_bytes, &SampleRow::pcie_rx_t_ns},
    {MeterCounter::kPcieTx, &SampleRow::pcie_tx_bytes, &SampleRow::pcie_tx_t_ns},
    {MeterCounter::kNvlinkRx, &SampleRow::nvlink_rx_bytes, &SampleRow::nvlink_rx_t_ns},
    {MeterCounter::kNvlinkTx, &SampleRow::nvlink_tx_bytes, &SampleRow::nvlink_tx_t_ns},
};

}  // namespace

std::optional<double> windowBytesFromSamples(const RunRecord& run, const std::string& arm, int repetition, int gpu,
                                             MeterCounter c, int64_t start_ns, int64_t end_ns) {
  const RowCounter* field = nullptr;
  for (const RowCounter& f : kRowCounters)
    if (f.counter == c) field = &f;
  if (!field) return std::nullopt;
  // The rows back into the meter's samples: one counter's values and read times, in recorded order.
  const int k = static_cast<int>(c);
  ::tpscope::detail::Series series;
  for (const SampleRow& r : run.samples) {
    if (r.arm != arm || r.repetition != repetition || r.gpu != gpu || !(r.*field->bytes)) continue;
    MeterSample m;
    m.bytes[k] = r.*field->bytes;
    m.t_ns[k] = (r.*field->t_ns).value_or(r.t_ns);
    m.t_before_ns = m.t_after_ns = m.t_ns[k];
    series.push_back(m);
  }
  const std::optional<double> a = ::tpscope::detail::cumulativeAt(series, c, start_ns);
  const std::optional<double> b = ::tpscope::detail::cumulativeAt(series, c, end_ns);
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

std::optional<PmStep> pmStepFromSamples(int64_t start_ns, int64_t end_ns, int64_t steps,
                                        const std::vector<PathCalls>& allreduce,
                                        const std::vector<MeterRecord>& samples, const std::vector<MeterGpu>& gpus,
                                        int64_t interval_us) {
  if (steps < 1 || end_ns <= start_ns) return std::nullopt;
  PmStep s;
  s.interval_us = interval_us;
  s.step = steps / 2;
  // Steps are equal by construction of the window (length / steps); rounding down leaves the last
  // nanoseconds to the last step.
  const int64_t len = (end_ns - start_ns) / steps;
  s.start_ns = start_ns + s.step * len;
  s.end_ns = s.start_ns + len;
  uint64_t calls = 0;
  for (const PathCalls& pc : allreduce) calls += pc.calls;
  if (calls > 0) s.allreduce_calls_per_step = static_cast<double>(calls) / static_cast<double>(steps);
  for (size_t k = 0; k < gpus.size(); ++k) {
    std::vector<MeterRecord> mine;
    for (const MeterRecord& m : samples)
      if (m.gpu == static_cast<int>(k) && m.t_end_ns > s.start_ns && m.t_start_ns < s.end_ns) mine.push_back(m);
    std::string why =
        tpscope::detail::pmStepFigures(mine, s.start_ns, s.end_ns, interval_us, tpscope::detail::kStepBurstRule).why;
    if (mine.size() > kPmStepMaxRecords) {
      why = fmt::format("the step spans {} records, the first {} are kept", mine.size(), kPmStepMaxRecords);
      mine.resize(kPmStepMaxRecords);
    }
    if (!why.empty() && s.complete) {
      s.complete = false;
      s.note = fmt::format("GPU {}: {}", gpus[k].index, why);
    }
    PmStepGpu g;
    g.gpu = gpus[k].index;
    for (const MeterRecord& m : mine) g.samples.push_back({m.t_start_ns - s.start_ns, m.bytes[0], m.bytes[1]});
    s.gpus.push_back(std::move(g));
  }
  return s;
}

std::vector<SampleRow> rowsFromSamples(const std::string& arm, int repetition, const std::vector<MeterSample>& s,
                                       const std::vector<MeterGpu>& gpus) {
  std::vector<SampleRow> out;
  out.reserve(s.size());
  for (const MeterSample& m : s) {
    SampleRow r;
    r.arm = arm;
    r.repetition = repetition;
    r.gpu = m.gpu < static_cast<int>(gpus.size()) ? gpus[m.gpu].index : m.gpu;
    r.t_ns = (m.t_before_ns + m.t_after_ns) / 2;
    for (const RowCounter& f : kRowCounters) {
      const int k = static_cast<int>(f.counter);
      r.*f.bytes = m.bytes[k];
      if (m.bytes[k]) r.*f.t_ns = m.t_ns[k];
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace tpscope::experiment
