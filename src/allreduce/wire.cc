// SPDX-License-Identifier: Apache-2.0
// wire.cc - wire names, the user's wire setting, and the codec's CPU reference over whole messages.
#include "allreduce/wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

namespace tpscope::detail {

const char* wireName(WireCode w) {
  switch (w) {
    case WireCode::kExact: return "exact";
    case WireCode::kBf16: return "bf16";
    case WireCode::kInt8: return "int8";
    case WireCode::kFp8: return "fp8";
    case WireCode::kInt4: return "int4";
  }
  return "unknown";
}

const std::vector<WireCode>& allWires() {
  static const std::vector<WireCode> all = {WireCode::kExact, WireCode::kBf16, WireCode::kInt8, WireCode::kFp8,
                                            WireCode::kInt4};
  return all;
}

std::optional<WireCode> parseWireName(std::string_view text) {
  for (WireCode w : allWires())
    if (text == wireName(w)) return w;
  return std::nullopt;
}

bool parseWirePolicy(std::string_view text, WirePolicy* out, std::string* error) {
  constexpr std::string_view kAuto = "auto:";
  if (text.substr(0, kAuto.size()) == kAuto) {
    const std::string number(text.substr(kAuto.size()));
    char* end = nullptr;
    const double b = number.empty() ? NAN : std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(b) || !(b > 0) || !(b < 1)) {
      *error = fmt::format(
          "wire '{}': the budget after auto: is a relative RMS error per call in (0, 1), e.g. "
          "auto:0.01",
          text);
      return false;
    }
    *out = WirePolicy{true, WireCode::kExact, b};
    return true;
  }
  const std::optional<WireCode> w = parseWireName(text);
  if (!w) {
    *error = fmt::format("wire '{}' is not one of exact, bf16, int8, fp8, int4, auto:BUDGET", text);
    return false;
  }
  *out = WirePolicy{false, *w, 0};
  return true;
}

std::string wirePolicyText(const WirePolicy& p) {
  return p.automatic ? fmt::format("auto:{}", p.budget) : std::string(wireName(p.wire));
}

tpsResult_t requestedWire(int config_wire, float budget, const char* env, WirePolicy* out, std::string* error) {
  if (config_wire < tpsWireExact || config_wire >= tpsNumWires) {
    *error = fmt::format("config.wire {} is not a wire", config_wire);
    return tpsInvalidArgument;
  }
  if (config_wire == tpsWireAuto) {
    if (!std::isfinite(budget) || !(budget > 0) || !(budget < 1)) {
      *error = fmt::format(
          "config.wire is auto and config.wire_error_budget is {}: give a relative RMS error per "
          "call in (0, 1)",
          budget);
      return tpsInvalidArgument;
    }
    *out = WirePolicy{true, WireCode::kExact, budget};
    return tpsSuccess;
  }
  if (config_wire != tpsWireExact || env == nullptr || *env == '\0') {
    *out = WirePolicy{false, static_cast<WireCode>(config_wire), 0};
    return tpsSuccess;
  }
  std::string why;
  if (!parseWirePolicy(env, out, &why)) {
    *error = "TPSCOPE_WIRE: " + why;
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

tpsResult_t callWireOverride(int call_wire, std::optional<WireCode>* out, std::string* error) {
  if (call_wire < tpsWireExact || call_wire >= tpsNumWires) {
    *error = fmt::format("wire {} is not a wire (tpsWireExact..tpsWireInt4, or tpsWireAuto for the communicator's)",
                         call_wire);
    return tpsInvalidArgument;
  }
  *out = call_wire == tpsWireAuto ? std::nullopt : std::optional<WireCode>(static_cast<WireCode>(call_wire));
  return tpsSuccess;
}

WireCode policyWire(const WirePolicy& policy, const WireTable* table, uint64_t bytes, tpsBackend_t backend) {
  if (!policy.automatic) return policy.wire;
  return table != nullptr && backend == tpsBackendHost ? table->choose(bytes, policy.budget) : WireCode::kExact;
}

WireCode WireTable::choose(uint64_t bytes, double budget) const {
  std::map<uint64_t, std::vector<const WireTiming*>> by_size;
  for (const WireTiming& r : rows) by_size[r.bytes].push_back(&r);
  if (by_size.empty()) return WireCode::kExact;
  auto it = by_size.lower_bound(bytes);
  if (it == by_size.end()) --it;
  const WireTiming* best = nullptr;
  for (const WireTiming* r : it->second)
    if ((r->wire == WireCode::kExact || r->rel_rms <= budget) && (!best || r->time_us < best->time_us)) best = r;
  return best ? best->wire : WireCode::kExact;
}

bool parseWireTable(const nlohmann::json& v, WireTable* out, std::string* error) {
  auto bad = [&](std::string why) {
    *error = std::move(why);
    return false;
  };
  if (!v.is_object()) return bad("\"wires\" is not an object");
  WireTable t;
  for (auto [key, field] : {std::pair{"fingerprint", &t.fingerprint}, {"measured", &t.measured}, {"dtype", &t.dtype}}) {
    auto f = v.find(key);
    if (f == v.end() || !f->is_string()) return bad(fmt::format("\"wires\" has no string \"{}\"", key));
    *field = f->get<std::string>();
  }
  auto rows = v.find("rows");
  if (rows == v.end() || !rows->is_array() || rows->empty()) return bad("\"wires.rows\" is not a non-empty list");
  for (size_t i = 0; i < rows->size(); ++i) {
    const nlohmann::json& r = (*rows)[i];
    WireTiming w;
    auto name = r.is_object() ? r.find("wire") : r.end();
    std::optional<WireCode> code;
    if (name != r.end() && name->is_string()) code = parseWireName(name->get<std::string>());
    if (!code) return bad(fmt::format("wires.rows[{}].wire is not a wire", i));
    w.wire = *code;
    auto number = [&](const char* key, double* into) {
      auto f = r.find(key);
      if (f == r.end() || !f->is_number() || !std::isfinite(f->get<double>()) || f->get<double>() < 0) return false;
      *into = f->get<double>();
      return true;
    };
    auto bytes = r.find("bytes");
    if (bytes == r.end() || !bytes->is_number_integer() || (!bytes->is_number_unsigned() && bytes->get<int64_t>() < 0))
      return bad(fmt::format("wires.rows[{}].bytes is not a size", i));
    w.bytes = bytes->get<uint64_t>();
    if (!number("time_us", &w.time_us) || !number("rel_rms", &w.rel_rms))
      return bad(fmt::format("wires.rows[{}] needs time_us and rel_rms, finite and not negative", i));
    t.rows.push_back(w);
  }
  *out = std::move(t);
  return true;
}

nlohmann::json wireTableJson(const WireTable& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const WireTiming& r : t.rows)
    rows.push_back({{"bytes", r.bytes}, {"wire", wireName(r.wire)}, {"time_us", r.time_us}, {"rel_rms", r.rel_rms}});
  return {{"fingerprint", t.fingerprint}, {"measured", t.measured}, {"dtype", t.dtype}, {"rows", rows}};
}

WireTableLoad selectWireTable(const nlohmann::json& doc, const std::string& path,
                              const std::function<std::string()>& fingerprint) {
  WireTableLoad out;
  if (!doc.is_object() || !doc.contains("wires")) {
    out.why = fmt::format("no \"wires\" table in tune file {} (tpscope bench allreduce --tune)", path);
    return out;
  }
  WireTable t;
  std::string error;
  if (!parseWireTable(doc["wires"], &t, &error)) {
    out.why = fmt::format("tune file {}: {}", path, error);
    return out;
  }
  const std::string here = fingerprint();
  if (t.fingerprint != here) {
    out.why =
        fmt::format("tune file {} measured its wires on \"{}\", these GPUs are \"{}\"", path, t.fingerprint, here);
    return out;
  }
  t.path = path;
  out.table = std::move(t);
  return out;
}

namespace {

uint16_t toBf16(float x) {  // nearest, ties to even; NaN stays a (quiet) NaN
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (x != x) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

void encodeMessage(WireCode w, const float* x, size_t n, uint8_t* payload) {
  if (w == WireCode::kBf16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = toBf16(x[i]);
      std::memcpy(payload + 2 * i, &h, 2);
    }
    return;
  }
  uint8_t* codes = payload;
  std::memset(codes, 0, wireCodeBytes(w, n));
  float* scales = reinterpret_cast<float*>(payload + wireCodeBytes(w, n));
  for (size_t b = 0; b < wireBlocks(n); ++b) {
    const size_t i0 = b * kWireBlock, i1 = std::min(n, i0 + kWireBlock);
    float amax = 0;
    for (size_t i = i0; i < i1; ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    const float s = wireScale(w, amax);
    std::memcpy(&scales[b], &s, sizeof(float));
    for (size_t i = i0; i < i1; ++i) {
      const uint8_t c = wireEncode(w, x[i], s);
      if (w == WireCode::kInt4)
        codes[i / 2] |= static_cast<uint8_t>(i % 2 ? c << 4 : c);
      else
        codes[i] = c;
    }
  }
}

void decodeMessage(WireCode w, const uint8_t* payload, size_t n, float* out) {
  if (w == WireCode::kBf16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, payload + 2 * i, 2);
      out[i] = fromBf16(h);
    }
    return;
  }
  const uint8_t* codes = payload;
  const float* scales = reinterpret_cast<const float*>(payload + wireCodeBytes(w, n));
  for (size_t i = 0; i < n; ++i) {
    float s;
    std::memcpy(&s, &scales[i / kWireBlock], sizeof(float));
    const uint8_t c = w == WireCode::kInt4 ? static_cast<uint8_t>((codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xF) : codes[i];
    out[i] = wireDecode(w, c, s);
  }
}

}  // namespace tpscope::detail
