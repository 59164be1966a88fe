// SPDX-License-Identifier: Apache-2.0
// auto_table.cc - the tune file's "auto" table: fingerprint, parse, write, and ranges from timings.
#include "allreduce/auto_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "allreduce/tuning.h"
#include "common/log.h"

namespace tpscope::detail {

std::string boxFingerprint(const Topology& topo) {
  std::map<std::string, int> names;
  for (const GpuInfo& g : topo.gpus) names[g.name] += 1;
  std::set<std::string> links;
  bool all_access = true;
  for (const auto& row : topo.pairs)
    for (const PairInfo& p : row) {
      if (p.from == p.to) continue;
      links.insert(linkLabel(p));
      all_access = all_access && p.p2p_access;
    }
  std::string s;
  for (const auto& [name, count] : names) s += fmt::format("{}{}x{}", s.empty() ? "" : "+", count, name);
  std::string l;
  for (const std::string& link : links) l += (l.empty() ? "" : "/") + link;
  if (!l.empty()) s += " " + l;
  if (!all_access) s += " no-P2P";
  return s;
}

bool parseAutoTable(const nlohmann::json& v, AutoTable* out, std::string* error) {
  auto bad = [&](std::string why) {
    *error = std::move(why);
    return false;
  };
  if (!v.is_object()) return bad("\"auto\" is not an object");
  AutoTable t;
  auto fp = v.find("fingerprint");
  if (fp == v.end() || !fp->is_string()) return bad("\"auto\" has no string \"fingerprint\"");
  t.fingerprint = fp->get<std::string>();
  if (auto m = v.find("measured"); m != v.end() && m->is_string()) t.measured = m->get<std::string>();
  auto ranges = v.find("ranges");
  if (ranges == v.end() || !ranges->is_array() || ranges->empty())
    return bad("\"auto.ranges\" is not a non-empty list");
  for (size_t i = 0; i < ranges->size(); ++i) {
    const nlohmann::json& r = (*ranges)[i];
    if (!r.is_object()) return bad(fmt::format("auto.ranges[{}] is not an object", i));
    AutoRange row;
    auto b = r.find("backend");
    if (b == r.end() || !b->is_string() || !parseBackendName(b->get<std::string>(), &row.backend) ||
        row.backend == tpsBackendAuto)
      return bad(fmt::format("auto.ranges[{}].backend is not host, p2p or nccl", i));
    auto m = r.find("max_bytes");
    const bool last = i + 1 == ranges->size();
    if (m == r.end() || m->is_null()) {
      if (!last) return bad(fmt::format("auto.ranges[{}] has no max_bytes but is not the last range", i));
    } else {
      if (!m->is_number_unsigned()) return bad(fmt::format("auto.ranges[{}].max_bytes is not a whole number", i));
      if (last) return bad("the last of auto.ranges must have \"max_bytes\": null (no bound)");
      row.max_bytes = m->get<size_t>();
      if (!t.ranges.empty() && *row.max_bytes <= *t.ranges.back().max_bytes)
        return bad(fmt::format("auto.ranges[{}].max_bytes does not ascend", i));
    }
    t.ranges.push_back(row);
  }
  *out = std::move(t);
  return true;
}

nlohmann::json autoTableJson(const AutoTable& t) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const AutoRange& r : t.ranges)
    ranges.push_back({{"max_bytes", r.max_bytes ? nlohmann::json(*r.max_bytes) : nlohmann::json(nullptr)},
                      {"backend", tpsBackendName(r.backend)}});
  return {{"fingerprint", t.fingerprint}, {"measured", t.measured}, {"ranges", ranges}};
}

nlohmann::json withAutoTable(nlohmann::json doc, const AutoTable& t) {
  if (!doc.is_object()) doc = nlohmann::json::object();
  doc["auto"] = autoTableJson(t);
  return doc;
}

AutoTableLoad selectAutoTable(const nlohmann::json& doc, const std::string& path,
                              const std::function<std::string()>& fingerprint) {
  AutoTableLoad out;
  if (!doc.is_object()) {
    out.why = fmt::format("tune file {} is not a JSON object", path);
    out.warn = true;
    return out;
  }
  auto it = doc.find("auto");
  if (it == doc.end()) {
    out.why = fmt::format("tune file {} has no \"auto\" table (tpscope bench allreduce --tune writes one)", path);
    return out;
  }
  AutoTable t;
  std::string error;
  if (!parseAutoTable(*it, &t, &error)) {
    out.why = fmt::format("tune file {}: {}", path, error);
    out.warn = true;
    return out;
  }
  const std::string here = fingerprint();
  if (t.fingerprint != here) {
    out.why = fmt::format("tune file {} was measured on \"{}\", these GPUs are \"{}\"", path, t.fingerprint, here);
    return out;
  }
  t.path = path;
  out.table = std::move(t);
  return out;
}

AutoTableLoad loadAutoTable(const std::string& path, const std::function<std::string()>& fingerprint) {
  std::string why;
  const std::optional<nlohmann::json> read = readTuneFile(path, &why);
  // A file that cannot be read, or is not a JSON object, was reported already by resolveHostTuning(),
  // which reads it first.
  if (!read)
    return why.empty() ? AutoTableLoad{std::nullopt, fmt::format("no tune file at {}", path), false}
                       : AutoTableLoad{std::nullopt, why, true};
  const nlohmann::json& doc = *read;
  AutoTableLoad out = selectAutoTable(doc, path, fingerprint);
  if (out.warn && doc.is_object())
    TPS_LOG_WARN("auto: {}; using the built-in defaults", out.why);
  else if (!out.table && doc.is_object() && doc.contains("auto"))
    TPS_LOG_INFO("auto: {}; ignoring its table, using the built-in defaults", out.why);
  return out;
}

std::vector<AutoRange> rangesFromTimings(const std::vector<AutoTiming>& timings) {
  // Winner per size, ascending; the first timing listed wins a tie.
  std::map<uint64_t, std::pair<tpsBackend_t, double>> best;
  for (const AutoTiming& t : timings) {
    if (!(t.time_us > 0)) continue;
    auto it = best.find(t.bytes);
    if (it == best.end() || t.time_us < it->second.second) best[t.bytes] = {t.backend, t.time_us};
  }
  std::vector<AutoRange> ranges;
  for (const auto& [bytes, winner] : best) {
    if (!ranges.empty() && ranges.back().backend == winner.first)
      ranges.back().max_bytes = bytes;
    else
      ranges.push_back({bytes, winner.first});
  }
  if (!ranges.empty()) ranges.back().max_bytes.reset();
  return ranges;
}

std::string bytesLabel(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return fmt::format("{} {}", bytes, kUnits[u]);
}

std::string describeRanges(const std::vector<AutoRange>& ranges) {
  if (ranges.size() == 1) return fmt::format("{} at every size", tpsBackendName(ranges[0].backend));
  std::string s;
  for (const AutoRange& r : ranges) {
    if (!s.empty()) s += ", ";
    s += r.max_bytes ? fmt::format("{} up to {}", tpsBackendName(r.backend), bytesLabel(*r.max_bytes))
                     : fmt::format("{} above", tpsBackendName(r.backend));
  }
  return s;
}

}  // namespace tpscope::detail
