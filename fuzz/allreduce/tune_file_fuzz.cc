// SPDX-License-Identifier: Apache-2.0
// tune_file_fuzz.cc - the tuning file (src/allreduce/tuning.h applyTuneDocument, auto_table.h
// selectAutoTable / parseAutoTable) as a communicator and `tpscope topo` read it, and the backend
// `auto` then picks per size.
//
// Contract: any bytes give the built-in values or values in range, never a failure; a table that is
// used has ascending rows ending unbounded, writes back (autoTableJson) to JSON that parses to the same
// table, and picks an available backend at every size.
#include <string>

#include "allreduce/auto_table.h"
#include "allreduce/selector.h"
#include "allreduce/tuning.h"
#include "fuzz_util.h"

namespace td = tpscope::detail;

namespace {
bool sameTable(const td::AutoTable& a, const td::AutoTable& b) {
  if (a.fingerprint != b.fingerprint || a.measured != b.measured || a.ranges.size() != b.ranges.size()) return false;
  for (size_t i = 0; i < a.ranges.size(); ++i)
    if (a.ranges[i].max_bytes != b.ranges[i].max_bytes || a.ranges[i].backend != b.ranges[i].backend) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tpscope::fuzz::quietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // As resolveHostTuning() and loadAutoTable() read the file: within the depth limit, or not at all.
  std::string why;
  const std::optional<nlohmann::json> parsed = td::parseTuneText(text, "tune.json", &why);
  FUZZ_CHECK(parsed || why.find("tune.json") != std::string::npos);
  const nlohmann::json doc = parsed ? *parsed : nlohmann::json(nlohmann::json::value_t::discarded);

  td::HostTuning t{4u << 20, 4u << 20, 32, 10000, "built-in"};
  td::applyTuneDocument(doc, "tune.json", &t);
  FUZZ_CHECK(t.copy_threshold >= 1 && t.chunk_bytes >= (64u << 10) && t.blocks >= 1 && t.blocks <= 64);

  const td::AutoTableLoad load =
      td::selectAutoTable(doc, "tune.json", [] { return std::string("2xNVIDIA H200 NV18"); });
  if (!load.table) {
    FUZZ_CHECK(!load.why.empty());
    return 0;
  }
  const td::AutoTable& table = *load.table;
  FUZZ_CHECK(!table.ranges.empty() && !table.ranges.back().max_bytes);
  for (size_t i = 0; i + 1 < table.ranges.size(); ++i) {
    FUZZ_CHECK(table.ranges[i].max_bytes);
    if (i > 0) FUZZ_CHECK(*table.ranges[i].max_bytes > *table.ranges[i - 1].max_bytes);
  }
  td::AutoTable again;
  std::string error;
  FUZZ_CHECK(td::parseAutoTable(nlohmann::json::parse(td::autoTableJson(table).dump()), &again, &error));
  FUZZ_CHECK(sameTable(table, again));
  (void)td::describeRanges(table.ranges);

  const td::Availability all{true, true, true, true}, host_only{true, false, false, false};
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{8} << 10, size_t{1} << 20, size_t{1} << 30, SIZE_MAX}) {
    for (const td::Availability& a : {all, host_only}) {
      const tpsBackend_t b = td::chooseAuto(a, bytes, &table);
      FUZZ_CHECK(td::isAvailable(a, b));
    }
    for (const td::AutoRange& r : table.ranges)
      if (r.max_bytes) (void)td::bytesLabel(*r.max_bytes);
  }
  return 0;
}
