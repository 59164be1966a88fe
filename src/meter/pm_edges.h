// SPDX-License-Identifier: Apache-2.0
// pm_edges.h - where a transfer starts and stops on the bus, read from PM-sampling records.
//
// A transfer at a steady rate R covers the records between its edges fully; the record it starts in
// holds R x (time from the start to the record's end), the record it stops in R x (time from the
// record's start to the stop). So each edge lies inside its record at the share of the record its
// bytes fill, exact for steady traffic (bulk copies), to within one record otherwise. This is how
// the benchmark meter_pm_edges checks PM's time axis against marker kernels stamped on the GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "meter/meter.h"

namespace tpscope::detail {

struct PmEdges {
  std::optional<int64_t> rise_ns, fall_ns;  // the meter's monotonic clock; nullopt: no traffic
  double full_bps = 0;                      // the rate the edges are placed with
  int records = 0;                          // records above the activity threshold
};

// The edges of the traffic in direction `dir` (0 TX, 1 RX) of GPU position `gpu` among the records
// touching [from_ns, to_ns]. A record is active when its rate exceeds both `active_share` of the
// busiest record's and `min_bps` (the sampler's own trickle, a few MB/s, stays below both); the full
// rate is the median rate of the active records strictly between the first and the last (the
// busiest record's rate when there are none: a transfer shorter than three records).
PmEdges pmTrafficEdges(const std::vector<MeterRecord>& samples, int gpu, int dir, int64_t from_ns, int64_t to_ns,
                       double active_share = 0.05, double min_bps = 1e9);

}  // namespace tpscope::detail
