// SPDX-License-Identifier: Apache-2.0
// call_error_report.cc - the captured calls through the wires, pooled per phase and size.
#include "call_error_report.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "workload/capture.h"

namespace tpscope::wires {

namespace {

constexpr const char* kDefinition =
    "W = bf16(float32 sum in rank order of decode(encode(x_r))), S = float64 sum of the ranks' inputs x_r; "
    "rel_rms = sqrt(sum (W-S)^2 / sum S^2) over the calls' values; max_abs_rel = max |W-S| over the call's RMS "
    "of S, the largest of the calls; exact: W = bf16(float32 sum of x_r), the result's rounding alone";

struct Key {
  int phase_order;  // decode first
  int tokens;
  int wire;
  int block;  // 0 for exact
  bool operator<(const Key& o) const {
    return std::tie(phase_order, tokens, wire, block) < std::tie(o.phase_order, o.tokens, o.wire, o.block);
  }
};

struct Pool {
  std::string phase;
  CallError error;
  int calls = 0;
  size_t rows = 0;
  double worst = 0;
};

}  // namespace

bool callErrorReport(const std::string& dir, const ReportOptions& o, nlohmann::json* out, std::string* error) {
  for (WireCode w : o.wires)
    if (w == WireCode::kBf16 || w == WireCode::kExact) {
      *error = w == WireCode::kBf16
                   ? "the bf16 wire carries float32 calls only, and a capture is bfloat16: leave bf16 out of --wires"
                   : "exact is always measured: leave it out of --wires";
      return false;
    }
  for (int b : o.blocks)
    if (b < 1 || b > 4096) {
      *error = fmt::format("block size {} is outside 1..4096", b);
      return false;
    }
  workload::CaptureIndex index;
  if (!workload::readCaptureIndex(dir, &index, error)) return false;
  if (index.calls.empty()) {
    *error = fmt::format("the capture in {} holds no calls", dir);
    return false;
  }
  std::map<Key, Pool> pools;
  nlohmann::json per_call = nlohmann::json::array();
  std::vector<std::vector<float>> ranks;
  for (const workload::CapturedCall& c : index.calls) {
    if (!workload::readCapturedCall(dir, c, &ranks, error)) return false;
    std::vector<std::pair<WireCode, int>> runs = {{WireCode::kExact, 0}};
    for (WireCode w : o.wires)
      for (int b : o.blocks) runs.emplace_back(w, b);
    for (const auto& [w, b] : runs) {
      const CallError e = callError(w, b ? b : detail::kWireBlock, ranks);
      Pool& p = pools[Key{c.phase == "decode" ? 0 : 1, c.tokens, static_cast<int>(w), b}];
      p.phase = c.phase, p.error += e, p.calls += 1, p.rows = c.rows.size();
      p.worst = std::max(p.worst, e.relRms());
      per_call.push_back({{"phase", c.phase},
                          {"forward", c.forward},
                          {"layer", c.layer},
                          {"which", c.which},
                          {"tokens", c.tokens},
                          {"wire", detail::wireName(w)},
                          {"block", b ? nlohmann::json(b) : nlohmann::json(nullptr)},
                          {"rel_rms", e.relRms()},
                          {"max_abs_rel", e.max_abs_rel}});
    }
  }
  nlohmann::json results = nlohmann::json::array();
  const int hidden = index.calls.front().hidden;
  for (const auto& [k, p] : pools) {
    const auto w = static_cast<WireCode>(k.wire);
    results.push_back({{"phase", p.phase},
                       {"tokens", k.tokens},
                       {"size_bytes", static_cast<uint64_t>(k.tokens) * hidden * 2},
                       {"calls", p.calls},
                       {"rows_per_call", p.rows},
                       {"values", p.error.values},
                       {"wire", detail::wireName(w)},
                       {"block", k.block ? nlohmann::json(k.block) : nlohmann::json(nullptr)},
                       {"wire_bytes_per_value", wireBytesPerValue(w, k.block ? k.block : 1, 2)},
                       {"rel_rms", p.error.relRms()},
                       {"worst_call_rel_rms", p.worst},
                       {"max_abs_rel", p.error.max_abs_rel},
                       {"nonfinite", p.error.nonfinite}});
  }
  *out = {{"capture", dir},
          {"model", index.model},
          {"definition", kDefinition},
          {"results", results},
          {"per_call", per_call}};
  return true;
}

std::string formatReport(const nlohmann::json& report) {
  std::string s =
      fmt::format("# call_error: capture {} ({})\n", report["capture"].get<std::string>(), report["model"].dump());
  s += "# " + report["definition"].get<std::string>() + "\n";
  s += "# rel_rms pools every value of the calls of one phase and size; worst: the largest call's rel_rms\n";
  s += fmt::format("{:<8} {:>10} {:>7} {:>6} {:>6} {:>6} {:>6} {:>11} {:>11} {:>11}\n", "phase", "size(B)", "calls",
                   "rows", "wire", "block", "B/val", "rel_rms", "worst", "max_abs_rel");
  for (const nlohmann::json& r : report["results"])
    s += fmt::format("{:<8} {:>10} {:>7} {:>6} {:>6} {:>6} {:>6.4f} {:>11.3e} {:>11.3e} {:>11.3e}\n",
                     r["phase"].get<std::string>(), r["size_bytes"].get<uint64_t>(), r["calls"].get<int>(),
                     r["rows_per_call"].get<size_t>(), r["wire"].get<std::string>(),
                     r["block"].is_null() ? std::string("-") : std::to_string(r["block"].get<int>()),
                     r["wire_bytes_per_value"].get<double>(), r["rel_rms"].get<double>(),
                     r["worst_call_rel_rms"].get<double>(), r["max_abs_rel"].get<double>());
  return s;
}

}  // namespace tpscope::wires
