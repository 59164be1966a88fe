// SPDX-License-Identifier: Apache-2.0
// bench/stats.cc - statistics snapshots to per-call bytes by medium.
#include "bench/stats.h"

#include <algorithm>

#include "allreduce/registry.h"

namespace tpscope::cli {

Medium pathMedium(int path) {
  const detail::AlgorithmInfo* a = detail::algorithmOf(path);
  if (a == nullptr) return Medium::kNccl;
  switch (a->medium) {
    case detail::Medium::kHostMemory: return Medium::kHost;
    case detail::Medium::kPeerLinks: return Medium::kPeer;
    default: return Medium::kNccl;
  }
}

StatsDelta statsDelta(const std::vector<PathStats>& before, const std::vector<PathStats>& after, int ndev) {
  StatsDelta d;
  MediumBytes sum;
  const int n = std::clamp(ndev, 1, TPS_MAX_DEVICES);
  const size_t paths = std::min(before.size(), after.size());
  for (size_t p = 0; p < paths; ++p) {
    unsigned long long calls = 0;
    double tx = 0, rx = 0;  // summed over size classes and GPUs
    for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) {
      const tpsStatsCell_t& a = before[p].cells[c];
      const tpsStatsCell_t& b = after[p].cells[c];
      calls += b.calls - a.calls;
      for (int r = 0; r < n; ++r) {
        tx += static_cast<double>(b.tx_bytes[r] - a.tx_bytes[r]);
        rx += static_cast<double>(b.rx_bytes[r] - a.rx_bytes[r]);
      }
    }
    if (calls == 0) continue;
    d.calls += calls;
    d.paths += (d.paths.empty() ? "" : "+") + after[p].name;
    static constexpr double MediumBytes::*kTx[] = {&MediumBytes::host_tx, &MediumBytes::peer_tx, &MediumBytes::nccl_tx};
    static constexpr double MediumBytes::*kRx[] = {&MediumBytes::host_rx, &MediumBytes::peer_rx, &MediumBytes::nccl_rx};
    const int m = static_cast<int>(pathMedium(static_cast<int>(p)));
    sum.*kTx[m] += tx / n;
    sum.*kRx[m] += rx / n;
  }
  if (d.calls == 0) {
    d.paths = "-";
    return d;
  }
  for (double* v : {&sum.host_tx, &sum.host_rx, &sum.peer_tx, &sum.peer_rx, &sum.nccl_tx, &sum.nccl_rx})
    *v /= static_cast<double>(d.calls);
  d.bytes_per_call = sum;
  return d;
}

std::optional<detail::WireCode> statsWire(const std::vector<PathStats>& before, const std::vector<PathStats>& after,
                                          bool* sum_on_wire) {
  std::optional<detail::WireCode> wire;
  bool on_wire = false;
  for (size_t p = 0; p < std::min(before.size(), after.size()); ++p) {
    unsigned long long calls = 0;
    for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) calls += after[p].cells[c].calls - before[p].cells[c].calls;
    const detail::AlgorithmInfo* a = detail::algorithmOf(static_cast<int>(p));
    if (calls == 0 || a == nullptr) continue;
    if (wire && (*wire != a->wire || on_wire != a->sum_on_wire)) return std::nullopt;
    wire = a->wire;
    on_wire = a->sum_on_wire;
  }
  if (sum_on_wire) *sum_on_wire = on_wire;
  return wire.value_or(detail::WireCode::kExact);
}

}  // namespace tpscope::cli
