// SPDX-License-Identifier: Apache-2.0
// bench/stats.h - what the library's accounting says one benchmark step moved: the difference of two
// snapshots of every path's statistics (tpsCommGetPathStats), turned into the `path` column and bytes per
// call per GPU by medium.
//
// The library counts a call when it is enqueued, so a graph captured once and launched many times counts
// once per captured call: the benchmark takes its snapshots around the eager timed loop, or around the
// capture, and divides by the calls the library counted there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "allreduce/wire_codec.h"
#include "bench/table.h"
#include "tpscope/tpscope.h"
#include "tpscope/tpscope.hpp"

namespace tpscope::cli {

struct StatsDelta {
  unsigned long long calls = 0;               // calls the library counted between the snapshots
  std::string paths;                          // "host-kernel", "host-kernel+host-copy", ..., "-" when none
  std::optional<MediumBytes> bytes_per_call;  // mean over GPUs, per counted call; nullopt when calls == 0
};

// The medium a path moves its bytes over: host memory, peer links, or NCCL (whatever transport it chose),
// as its algorithm declares it (allreduce/registry.h).
enum class Medium { kHost = 0, kPeer = 1, kNccl = 2 };
Medium pathMedium(int path);

// Snapshots of every path by number (allPathStats) before and after; `ndev` ranks in this process.
StatsDelta statsDelta(const std::vector<PathStats>& before, const std::vector<PathStats>& after, int ndev);

// The wire the calls between two snapshots travelled on: the wire of every path that counted calls (its
// algorithm's, allreduce/registry.h); exact when none counted (NCCL's own calls beside the library's);
// nullopt when those paths differ in wire, or in whether the sum travels it too (*sum_on_wire, when given:
// AlgorithmInfo::sum_on_wire of those paths).
std::optional<detail::WireCode> statsWire(const std::vector<PathStats>& before, const std::vector<PathStats>& after,
                                          bool* sum_on_wire = nullptr);

}  // namespace tpscope::cli
