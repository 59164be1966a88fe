// SPDX-License-Identifier: Apache-2.0
// sources/source_registry.cc - every source the meter knows, by name; what a source list says.
//
// A source is a file of this folder, named for it (pm_source.cc), that defines its SourceEntry
// (source.h), and one line below. The order is the order they start (and the reverse of the order they
// stop): PM first, so that its own traffic is measured on a link no other source reads yet; NVML next,
// so that its calibration sees PM's steady traffic in both of its alternating intervals, where it
// cancels, and measures the dmon call beside its own reads; dmon last, once the calibration is done.
#include <algorithm>

#include "meter/source.h"

namespace tpscope::detail {

// One line per source; each line ends in a backslash, so a new source is one new line.
#define TPS_METER_SOURCES(X) \
  X(kPmSource)               \
  X(kNvmlSource)             \
  X(kDmonSource)             \
  /* the end of the list */

#define TPS_DECLARE_SOURCE(entry) extern const SourceEntry entry;
TPS_METER_SOURCES(TPS_DECLARE_SOURCE)
#undef TPS_DECLARE_SOURCE

const std::vector<const SourceEntry*>& sourceRegistry() {
#define TPS_LIST_SOURCE(entry) &entry,
  static const std::vector<const SourceEntry*> kAll = {TPS_METER_SOURCES(TPS_LIST_SOURCE)};
#undef TPS_LIST_SOURCE
  return kAll;
}

const SourceEntry* findSource(const std::string& name) {
  for (const SourceEntry* e : sourceRegistry())
    if (name == e->name) return e;
  return nullptr;
}

}  // namespace tpscope::detail

namespace tpscope {

std::vector<std::string> meterSourceNames() {
  std::vector<std::string> out;
  for (const detail::SourceEntry* e : detail::sourceRegistry()) out.push_back(e->name);
  return out;
}

std::optional<std::vector<std::string>> parseMeterSources(const std::string& text, std::string* error) {
  std::vector<std::string> out;
  const std::string list = text == "both" ? "nvml,pm" : text;  // the shorthand of the NVML-and-PM runs
  size_t from = 0;
  for (;;) {
    const size_t comma = list.find(',', from);
    const std::string name = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (!detail::findSource(name) || std::find(out.begin(), out.end(), name) != out.end()) {
      std::string names;
      for (const std::string& n : meterSourceNames()) names += (names.empty() ? "" : ", ") + n;
      if (error)
        *error =
            name.empty() || !detail::findSource(name)
                ? "'" + text + "' names no meter source: use one or more of " + names + " (comma-separated), or both"
                : "'" + text + "' names the source " + name + " twice";
      return std::nullopt;
    }
    out.push_back(name);
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

std::string meterSourcesText(const std::vector<std::string>& sources) {
  if (sources == std::vector<std::string>{"nvml", "pm"}) return "both";
  std::string out;
  for (const std::string& s : sources) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace tpscope
