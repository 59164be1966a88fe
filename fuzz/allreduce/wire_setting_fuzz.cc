// SPDX-License-Identifier: Apache-2.0
// wire_setting_fuzz.cc - what sets a communicator's wire (src/allreduce/wire.h): TPSCOPE_WIRE's text
// (parseWirePolicy), the config's wire and budget beside it (requestedWire), and the tune file's "wires"
// table (selectWireTable, parseWireTable) that TPSCOPE_WIRE=auto:BUDGET chooses from.
//
// Input: three sections cut at NUL bytes: TPSCOPE_WIRE's value; the config's wire (an int) and budget (a
// float), 8 raw bytes; the tune file.
//
// Contract: any bytes give a policy or a refusal that says why, never a failure. A policy names a wire
// (auto with a budget in (0, 1)) and writes back (wirePolicyText) to text that parses to the same policy;
// the config's own wire wins over the text, which applies only when the config says exact. A table that
// is used has rows of known wires with finite, non-negative numbers, writes back (wireTableJson) to the
// same rows, and at every size and budget auto picks the fastest wire of that size's rows within the
// budget (exact when none is).
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "allreduce/wire.h"
#include "fuzz_util.h"

namespace td = tpscope::detail;

namespace {

bool samePolicy(const td::WirePolicy& a, const td::WirePolicy& b) {
  return a.automatic == b.automatic && (a.automatic ? a.budget == b.budget : a.wire == b.wire);
}

void checkPolicy(const td::WirePolicy& p) {
  FUZZ_CHECK(static_cast<int>(p.wire) >= 0 && static_cast<int>(p.wire) <= static_cast<int>(td::WireCode::kInt4));
  if (p.automatic) FUZZ_CHECK(std::isfinite(p.budget) && p.budget > 0 && p.budget < 1);
}

// The rows auto chooses among for a call of `bytes`: those of the smallest size at or above it, else of
// the largest size (WireTable::choose's rule, restated).
std::vector<const td::WireTiming*> rowsFor(const td::WireTable& t, uint64_t bytes) {
  std::map<uint64_t, std::vector<const td::WireTiming*>> by_size;
  for (const td::WireTiming& r : t.rows) by_size[r.bytes].push_back(&r);
  auto it = by_size.lower_bound(bytes);
  if (it == by_size.end()) --it;
  return it->second;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tpscope::fuzz::quietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> in = tpscope::fuzz::sections(data, size, 3);
  const std::string& text = in[0];

  // TPSCOPE_WIRE's text.
  td::WirePolicy policy;
  std::string error;
  const bool parsed = td::parseWirePolicy(text, &policy, &error);
  if (parsed) {
    checkPolicy(policy);
    td::WirePolicy again;
    std::string why;
    FUZZ_CHECK(td::parseWirePolicy(td::wirePolicyText(policy), &again, &why));
    FUZZ_CHECK(samePolicy(policy, again));
  } else {
    FUZZ_CHECK(!error.empty());
  }

  // The config beside it.
  if (in.size() > 1 && in[1].size() >= 8) {
    int wire = 0;
    float budget = 0;
    std::memcpy(&wire, in[1].data(), 4);
    std::memcpy(&budget, in[1].data() + 4, 4);
    td::WirePolicy got;
    std::string why;
    const tpsResult_t r = td::requestedWire(wire, budget, text.empty() ? nullptr : text.c_str(), &got, &why);
    if (r == tpsSuccess) {
      checkPolicy(got);
      if (wire == tpsWireAuto) FUZZ_CHECK(got.automatic && got.budget == budget);
      if (wire > tpsWireExact && wire < tpsWireAuto) FUZZ_CHECK(!got.automatic && static_cast<int>(got.wire) == wire);
      // The text applies when the config says exact (and holds no NUL: a C string ends there).
      if (wire == tpsWireExact && !text.empty() && text.find('\0') == std::string::npos) {
        FUZZ_CHECK(parsed);
        FUZZ_CHECK(samePolicy(got, policy));
      }
      if (wire == tpsWireExact && text.empty()) FUZZ_CHECK(!got.automatic && got.wire == td::WireCode::kExact);
    } else {
      FUZZ_CHECK(r == tpsInvalidArgument && !why.empty());
    }
  }

  // The tune file's wires table.
  if (in.size() > 2) {
    const nlohmann::json doc = nlohmann::json::parse(in[2], nullptr, /*allow_exceptions=*/false);
    const td::WireTableLoad load = td::selectWireTable(doc, "tune.json", [] { return std::string("2xNVIDIA H100"); });
    if (!load.table) {
      FUZZ_CHECK(!load.why.empty());
      return 0;
    }
    const td::WireTable& t = *load.table;
    FUZZ_CHECK(!t.rows.empty() && t.fingerprint == "2xNVIDIA H100" && t.path == "tune.json");
    for (const td::WireTiming& r : t.rows)
      FUZZ_CHECK(std::isfinite(r.time_us) && r.time_us >= 0 && std::isfinite(r.rel_rms) && r.rel_rms >= 0);
    td::WireTable back;
    std::string why;
    FUZZ_CHECK(td::parseWireTable(nlohmann::json::parse(td::wireTableJson(t).dump()), &back, &why));
    FUZZ_CHECK(back.rows.size() == t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i)
      FUZZ_CHECK(back.rows[i].bytes == t.rows[i].bytes && back.rows[i].wire == t.rows[i].wire &&
                 back.rows[i].time_us == t.rows[i].time_us && back.rows[i].rel_rms == t.rows[i].rel_rms);
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{8} << 10, uint64_t{16} << 20, uint64_t{1} << 40,
                           t.rows.front().bytes, UINT64_MAX})
      for (double budget : {1e-9, 0.001, 0.01, 0.1, 0.999, parsed && policy.automatic ? policy.budget : 0.5}) {
        const td::WireCode w = t.choose(bytes, budget);
        const std::vector<const td::WireTiming*> rows = rowsFor(t, bytes);
        const td::WireTiming* fastest = nullptr;
        for (const td::WireTiming* r : rows)
          if ((r->wire == td::WireCode::kExact || r->rel_rms <= budget) && (!fastest || r->time_us < fastest->time_us))
            fastest = r;
        if (fastest == nullptr) {
          FUZZ_CHECK(w == td::WireCode::kExact);
        } else {
          // The wire picked has a row of that size within the budget and as fast as the fastest (a tie
          // may go to another row of the same time).
          bool found = false;
          for (const td::WireTiming* r : rows)
            found = found || (r->wire == w && (w == td::WireCode::kExact || r->rel_rms <= budget) &&
                              r->time_us == fastest->time_us);
          FUZZ_CHECK(found);
        }
      }
  }
  return 0;
}
