// SPDX-License-Identifier: Apache-2.0
// bench/stats.h - what the library's accounting says one benchmark step moved: the difference of two
// tpsCommGetStats snapshots, turned into the `path` column and bytes per call per GPU by medium.
//
// The library counts a call when it is enqueued, so a graph captured once and launched many times counts
// once per captured call: the benchmark takes its snapshots around the eager timed loop, or around the
// capture, and divides by the calls the library counted there.
#pragma once

#include <optional>
#include <string>

#include "bench/table.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

struct StatsDelta {
  unsigned long long calls = 0;               // calls the library counted between the snapshots
  std::string paths;                          // "host-kernel", "host-kernel+host-copy", ..., "-" when none
  std::optional<MediumBytes> bytes_per_call;  // mean over GPUs, per counted call; nullopt when calls == 0
};

// The medium a path moves its bytes over: host memory, peer links, or NCCL (whatever transport it chose).
enum class Medium { kHost = 0, kPeer = 1, kNccl = 2 };
Medium pathMedium(tpsPath_t path);

StatsDelta statsDelta(const tpsStats_t& before, const tpsStats_t& after);

}  // namespace tpscope::cli
