// SPDX-License-Identifier: Apache-2.0
// wire.h - the wire a call's bytes travel in, host side: names, the setting users give
// (tpsConfig_t.wire, TPSCOPE_WIRE), and the CPU reference of the codec (wire_codec.h) over whole messages,
// which the unit tests and the accuracy tools use.
//
// `exact` (the dtype's own bytes) is the default and never changes by itself: a lossy wire runs only when
// the user names it, or gives `auto` an error budget (relative RMS error per call) that the wire measured
// on the box stays inside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "allreduce/wire_codec.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

// "exact", "bf16", "int8", "fp8", "int4".
const char* wireName(WireCode w);
// The wire named `text` (exactly as wireName writes it); nullopt for anything else.
std::optional<WireCode> parseWireName(std::string_view text);
// Every wire, exact first.
const std::vector<WireCode>& allWires();

// What a communicator's calls may use: one named wire, or `auto` under a budget.
struct WirePolicy {
  bool automatic = false;
  WireCode wire = WireCode::kExact;  // the named wire (automatic false)
  double budget = 0;                 // automatic: the largest relative RMS error per call allowed, in (0, 1)
};
// "exact" | "bf16" | "int8" | "fp8" | "int4" | "auto:BUDGET" (BUDGET a number in (0, 1), e.g. auto:0.01).
// False with *error (one phrase naming the text) for anything else: empty, an unknown name, a budget that
// is not a finite number in range, trailing characters.
bool parseWirePolicy(std::string_view text, WirePolicy* out, std::string* error);
// The policy as parseWirePolicy reads it ("int8", "auto:0.01").
std::string wirePolicyText(const WirePolicy& p);

// The communicator's policy from its config (`config_wire`: tpsConfig_t.wire read as an int, `budget`:
// wire_error_budget) and TPSCOPE_WIRE (`env`, may be null), which applies when the config says 0 (exact).
// tpsInvalidArgument with *error for a value out of range, an auto budget outside (0, 1), or an env value
// parseWirePolicy refuses.
tpsResult_t requestedWire(int config_wire, float budget, const char* env, WirePolicy* out, std::string* error);

struct WireTable;
// The wire a call of `bytes` on `backend` takes from the communicator's policy: the wire it names; under
// auto, `table`'s pick (null: no table, exact) on the host backend, where `bench allreduce --tune` measured
// it, and exact on any other backend (the p2p two-shot's wires were not measured, and carry the sum on the
// wire too: their error is not the table's).
WireCode policyWire(const WirePolicy& policy, const WireTable* table, uint64_t bytes, tpsBackend_t backend);

// The wire one call names (tpsAllReduceWire's `call_wire`, a tpsWire_t read as an int): exact or a
// compressed wire overrides the communicator's; tpsWireAuto leaves it (*out nullopt). tpsInvalidArgument
// with *error for a value outside tpsWire_t.
tpsResult_t callWireOverride(int call_wire, std::optional<WireCode>* out, std::string* error);

// The tune file's "wires" table: per message size measured, each wire's time and its relative RMS error
// against the exact sum, on `bench allreduce --tune`'s data, on one box:
//   "wires": {"fingerprint": "1xNVIDIA H200", "measured": "2026-12-06T10:00:00Z", "dtype": "bfloat16",
//             "rows": [{"bytes": 16777216, "wire": "int8", "time_us": 420.0, "rel_rms": 0.0041}, ...]}
struct WireTiming {
  uint64_t bytes = 0;
  WireCode wire = WireCode::kExact;
  double time_us = 0;
  double rel_rms = 0;  // 0 for exact
};
struct WireTable {
  std::string fingerprint, measured, dtype, path;
  std::vector<WireTiming> rows;
  // The wire auto takes for a call of `bytes` under `budget`: at the smallest measured size at or above
  // it (the largest measured size past them all), the fastest wire whose error is within the budget; exact
  // where no row of that size is within it.
  WireCode choose(uint64_t bytes, double budget) const;
};
// False with *error (one phrase) for a value that is not such a table: a wire name not known, a number
// not finite or negative, rows empty.
bool parseWireTable(const nlohmann::json& value, WireTable* out, std::string* error);
nlohmann::json wireTableJson(const WireTable& t);

// What a tune file's document (`doc`, read from `path`; anything but an object is no table) says of the
// wires for the box whose boxFingerprint() `fingerprint` returns (called only when the document has a
// "wires" key): the table (its path set), or why there is none, one phrase for logs and `tpscope topo`.
struct WireTableLoad {
  std::optional<WireTable> table;
  std::string why;
};
WireTableLoad selectWireTable(const nlohmann::json& doc, const std::string& path,
                              const std::function<std::string()>& fingerprint);

// CPU reference: n values into one rank's payload (wirePayloadBytes(w, n) bytes, layout in wire_codec.h),
// and a payload back to values. Not for exact.
void encodeMessage(WireCode w, const float* x, size_t n, uint8_t* payload);
void decodeMessage(WireCode w, const uint8_t* payload, size_t n, float* out);

}  // namespace tpscope::detail
