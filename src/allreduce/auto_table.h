// SPDX-License-Identifier: Apache-2.0
// auto_table.h - the tune file's "auto" table: which backend `auto` uses per size range on this box.
//
// `tpscope bench allreduce --tune` times every available backend over a size sweep and writes, beside
// the host backend's keys (tuning.h), the fastest backend per size with adjacent equal choices merged:
//
//   "auto": {
//     "fingerprint": "2xNVIDIA H200 NV18",       the box: boxFingerprint() of the measured GPUs
//     "measured": "2026-11-29T10:00:00Z",         when (ISO 8601 UTC)
//     "ranges": [                                 ascending; the last has "max_bytes": null (no bound)
//       {"max_bytes": 1048576, "backend": "p2p"}, calls of at most 1 MiB per GPU
//       {"max_bytes": null, "backend": "nccl"}    everything larger
//     ]
//   }
//
// A communicator (and `tpscope topo`) uses the table only when its fingerprint is this box's: a file
// measured on another box or another device set is ignored with one INFO line saying why. A malformed
// table is a WARN and the built-in defaults (selector.h), never a failure. Unknown keys are ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/selector.h"
#include "topology/topology.h"

namespace tpscope::detail {

// "2xNVIDIA H200 NV18": the GPU count and names (grouped, sorted), the distinct links between the pairs
// (sorted, joined with '/': "PIX/SYS", "NV12/NV18"), and " no-P2P" when some pair has no peer access.
// Device ordinals are not in it: GPUs 2,3 of a box measure like GPUs 0,1 of the same kind.
std::string boxFingerprint(const Topology& topo);

// Parses the value of a tune file's "auto" key. False with *error (one phrase) when it is malformed:
// not an object, no string fingerprint, ranges empty or not ascending, a backend other than host, p2p
// or nccl, a max_bytes that is not a whole number, or a last row with a bound.
bool parseAutoTable(const nlohmann::json& value, AutoTable* out, std::string* error);
// The "auto" value for `t` (path is not written: it is where the file is).
nlohmann::json autoTableJson(const AutoTable& t);
// `doc` (a tune file's document; anything but an object starts a new one) with "auto" set to `t`.
nlohmann::json withAutoTable(nlohmann::json doc, const AutoTable& t);

// What a tune file's document says for a box with `fingerprint`: the table, or why there is none.
struct AutoTableLoad {
  std::optional<AutoTable> table;
  std::string why;    // empty when the table is used; else one sentence for logs and `tpscope topo`
  bool warn = false;  // the file or table is malformed (WARN); a table for another box is INFO
};
// `fingerprint` is called only when the document has an "auto" key (a topology query costs time).
AutoTableLoad selectAutoTable(const nlohmann::json& doc, const std::string& path,
                              const std::function<std::string()>& fingerprint);
// Reads the tune file at `path` and selects as above, logging `why` once: WARN for a malformed table,
// INFO for a table measured elsewhere; nothing for a missing file or table, nor for a file that is not
// JSON (resolveHostTuning(), which every caller runs first, has said so).
AutoTableLoad loadAutoTable(const std::string& path, const std::function<std::string()>& fingerprint);

// One timing of the crossover sweep; time_us <= 0 means not measured.
struct AutoTiming {
  uint64_t bytes = 0;
  tpsBackend_t backend = tpsBackendAuto;
  double time_us = 0;
};
// The fastest backend at each measured size (a tie keeps the backend listed first), adjacent sizes
// with the same winner merged. A range ends at the largest size its backend won, so a crossover sits
// at the measured boundary: sizes between two measured sizes go to the larger size's winner. The last
// range is unbounded. Empty when nothing was measured.
std::vector<AutoRange> rangesFromTimings(const std::vector<AutoTiming>& timings);

// "8 KiB", "1 MiB", "1 GiB" for whole binary multiples, else "12345 B".
std::string bytesLabel(uint64_t bytes);
// "<= 1 MiB p2p, then nccl" (logs and tables).
std::string describeRanges(const std::vector<AutoRange>& ranges);

}  // namespace tpscope::detail
