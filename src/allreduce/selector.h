// SPDX-License-Identifier: Apache-2.0
// selector.h - which backend a communicator uses, and which one carries each call.
//
// The choice is pure logic over what is available, so it is unit-tested without GPUs:
//   1. a forced backend (config field, else TPSCOPE_ALLREDUCE) is used for every call, or creation
//      fails with the reason it cannot run; an unknown TPSCOPE_ALLREDUCE value is an error;
//   2. `auto` picks per call: the backend the tune file's "auto" table names for the call's size
//      (auto_table.h: measured on this box by `tpscope bench allreduce --tune`), when there is such a
//      table for this box and that backend is available on the communicator;
//   3. otherwise the built-in default: p2p where it is built and every pair has peer access (faster
//      than NCCL over NVLink from 8 KiB to 1 GiB: docs/PERFORMANCE.md, "AllReduce"), else NCCL where every pair has
//      peer access (its NVLink/P2P transport beats staging), else host staging, else NCCL over host memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

// "host" | "p2p" | "nccl" | "auto" (case-sensitive, as documented). False for anything else.
bool parseBackendName(std::string_view text, tpsBackend_t* out);

// The backend requested for a communicator: config.backend (`config_backend`, configBackendValue())
// unless it is auto, then TPSCOPE_ALLREDUCE (`env`, may be null). tpsInvalidArgument with *error set for
// an unknown value.
tpsResult_t requestedBackend(int config_backend, const char* env, tpsBackend_t* out, std::string* error);
// config.backend as the int a C caller stored there, read as bytes: a value outside the enumerators'
// range must not be loaded as a tpsBackend_t (that is undefined behaviour in C++) before it is checked.
int configBackendValue(const tpsConfig_t& config);

struct Availability {
  bool host = false;
  bool p2p = false;
  bool nccl = false;
  bool all_peer_access = false;
};

// One row of a measured table: `backend` for calls up to `max_bytes` per GPU (inclusive) and above the
// previous row's max_bytes; nullopt means no upper bound (the last row).
struct AutoRange {
  std::optional<size_t> max_bytes;
  tpsBackend_t backend = tpsBackendAuto;
};

// The measured choice per size range for one box (auto_table.h reads and writes it). `ranges` ascend
// by max_bytes and end with an unbounded row, so every size has exactly one row.
struct AutoTable {
  std::string fingerprint;  // the box it was measured on (boxFingerprint())
  std::string measured;     // when, ISO 8601 UTC
  std::string path;         // the file it came from
  std::vector<AutoRange> ranges;
  // The row's backend for a call of `bytes` per GPU; tpsBackendAuto when no row covers it.
  tpsBackend_t backendFor(size_t bytes) const;
};

// The built-in default for a communicator with `a` (rule 3 above); tpsBackendAuto when nothing is available.
tpsBackend_t defaultAuto(const Availability& a);

// The backend `auto` uses for a call of `bytes` per GPU: `table`'s (may be null) where it names an
// available backend, else defaultAuto(). *from_table (may be null) says which. tpsBackendAuto when
// nothing is available.
tpsBackend_t chooseAuto(const Availability& a, size_t bytes, const AutoTable* table = nullptr,
                        bool* from_table = nullptr);

// Whether `b` is available in `a` (tpsBackendAuto never is).
bool isAvailable(const Availability& a, tpsBackend_t b);

}  // namespace tpscope::detail
