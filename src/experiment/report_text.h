// SPDX-License-Identifier: Apache-2.0
// report_text.h - how the report writes its figures and arms, shared by the prose that buildReport()
// generates ("what this means") and the markdown renderer, so both read the same.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include "experiment/report.h"

namespace tpscope::experiment::detail {

// 1045.2 -> "1,045"; below 10 one decimal, so small rates do not all read 0.
inline std::string mbps(double v) {
  if (std::fabs(v) < 9.95) return fmt::format("{:.1f}", v);
  std::string d = fmt::format("{:.0f}", std::fabs(v));
  for (int i = static_cast<int>(d.size()) - 3; i > 0; i -= 3) d.insert(static_cast<size_t>(i), ",");
  return (v < 0 ? "-" : "") + d;
}
inline std::string mbps(const std::optional<double>& v) { return v ? mbps(*v) : "N/A"; }
inline std::string spread(const std::optional<MeterSpread>& s, std::string (*f)(double)) {
  if (!s) return "N/A";
  if (s->n == 1) return f(s->median);
  return fmt::format("{} ({}–{})", f(s->median), f(s->min), f(s->max));
}
inline std::string tok(double v) { return fmt::format("{:.1f}", v); }
inline std::string pct(double share) { return fmt::format("{:.1f}%", share * 100); }

inline const ReportArmPhase* armPhase(const Report& r, const std::string& arm, const std::string& phase) {
  for (const ReportArmPhase& a : r.arm_phases)
    if (a.arm == arm && a.phase == phase) return &a;
  return nullptr;
}

inline std::string describe(const ReportArm& a) {
  std::string s = a.positions > a.gpu_count ? fmt::format("{} positions on {} GPU{}, {}", a.positions, a.gpu_count,
                                                          a.gpu_count == 1 ? "" : "s", a.split)
                  : a.gpu_count == 1        ? "single GPU"
                                            : fmt::format("{} GPUs, {}", a.gpu_count, a.split);
  if (a.backend != "none") s += ", " + a.backend;
  if (a.wire != "exact" && a.wire != "none") s += ", wire " + a.wire;
  if (a.tokens_per_step > 1) s += fmt::format(", {} tokens/step", a.tokens_per_step);
  if (!a.speculative.empty()) s += ", " + a.speculative;
  return s;
}

}  // namespace tpscope::experiment::detail
