// SPDX-License-Identifier: Apache-2.0
// pm_edges.cc - a transfer's edges from PM-sampling records (pm_edges.h says how).
#include "meter/pm_edges.h"

#include <algorithm>

namespace tpscope::detail {

namespace {

double rateOf(const MeterRecord& m, int dir) {
  const int64_t span = m.t_end_ns - m.t_start_ns;
  return span > 0 ? m.bytes[dir] * 1e9 / static_cast<double>(span) : 0;
}

}  // namespace

PmEdges pmTrafficEdges(const std::vector<MeterRecord>& samples, int gpu, int dir, int64_t from_ns, int64_t to_ns,
                       double active_share, double min_bps) {
  PmEdges e;
  std::vector<const MeterRecord*> in;
  for (const MeterRecord& m : samples)
    if (m.gpu == gpu && m.t_end_ns > from_ns && m.t_start_ns < to_ns && m.t_end_ns > m.t_start_ns) in.push_back(&m);
  double busiest = 0;
  const MeterRecord* peak = nullptr;
  for (const MeterRecord* m : in)
    if (rateOf(*m, dir) > busiest) busiest = rateOf(*m, dir), peak = m;
  if (peak == nullptr || busiest <= min_bps) return e;
  std::vector<const MeterRecord*> active;
  for (const MeterRecord* m : in)
    if (rateOf(*m, dir) > std::max(active_share * busiest, min_bps)) active.push_back(m);
  e.records = static_cast<int>(active.size());
  std::vector<double> inner;
  for (size_t i = 1; i + 1 < active.size(); ++i) inner.push_back(rateOf(*active[i], dir));
  if (inner.empty()) {
    e.full_bps = rateOf(*peak, dir);
  } else {
    std::nth_element(inner.begin(), inner.begin() + inner.size() / 2, inner.end());
    e.full_bps = inner[inner.size() / 2];
  }
  if (e.full_bps <= 0) return e;
  // The time the record's bytes take at the full rate, at most the record itself.
  auto filled = [&](const MeterRecord& m) {
    const double ns = m.bytes[dir] / e.full_bps * 1e9;
    return std::min<int64_t>(static_cast<int64_t>(ns + 0.5), m.t_end_ns - m.t_start_ns);
  };
  e.rise_ns = active.front()->t_end_ns - filled(*active.front());
  e.fall_ns = active.back()->t_start_ns + filled(*active.back());
  return e;
}

}  // namespace tpscope::detail
