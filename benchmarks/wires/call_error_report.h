// SPDX-License-Identifier: Apache-2.0
// call_error_report.h - call_error's work: every captured call through every wire and block size, the
// errors pooled per phase and call size, as JSON and as a table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "call_error_stats.h"

namespace tpscope::wires {

struct ReportOptions {
  std::vector<WireCode> wires = {WireCode::kInt8, WireCode::kFp8, WireCode::kInt4};  // exact is always measured
  std::vector<int> blocks = {32, 64, 128};
};

// The report of capture folder `dir` (workload/capture.h):
//   {"capture": DIR, "model": {...the capture's settings}, "definition": "...",
//    "results": [{"phase", "tokens", "size_bytes", "calls", "rows_per_call", "values", "wire", "block",
//                 "wire_bytes_per_value", "rel_rms", "worst_call_rel_rms", "max_abs_rel", "nonfinite"}, ...],
//    "per_call": [{"phase", "forward", "layer", "which", "tokens", "wire", "block", "rel_rms", "max_abs_rel"}, ...]}
// A result pools the calls of one phase and size (tokens): rel_rms over all their values, the worst call's
// rel_rms, the largest max_abs_rel of a call. Exact comes first (block null), then each wire and block.
// False with *error (one sentence) for a capture that cannot be read, a bf16 wire on a bfloat16 capture
// (bf16 carries float32 calls only), or a block size outside 1..4096.
bool callErrorReport(const std::string& dir, const ReportOptions& o, nlohmann::json* out, std::string* error);

// The report's results as a table (`#` lines first, then one row per result).
std::string formatReport(const nlohmann::json& report);

}  // namespace tpscope::wires
