// SPDX-License-Identifier: Apache-2.0
// bench/wire_tune.h - `tpscope bench allreduce --tune`, last part: each wire's time and error per size on
// this box, written to the tune file as its "wires" table (allreduce/wire.h's WireTable), which a
// communicator under TPSCOPE_WIRE=auto:BUDGET reads to pick, per call size, the fastest wire whose error is
// within the budget.
//
// Every wire of --wire (all of them without it; exact always, as the reference) is timed at every size of
// the sweep on the host backend (the backend that carries the wires), bfloat16, in place, sizes outermost
// and the wires interleaved within each size: CUDA-graph replays, the median launch per call, as the
// crossovers (bench/crossover.h); eager calls where ranks share a GPU (one graph need not run their calls
// at once). The error is the -c 1 check's relative RMS error against the exact sum on the bench's own
// inputs (bench/check.h). A wire whose call did not travel on it (the path names no such wire: bf16 for a
// 16-bit dtype) has no row at that size, so auto never picks a wire that was not measured.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/wire.h"
#include "bench/args.h"

namespace tpscope::cli {

// One measurement: the call's time and error on `wire`, or nullopt where the call did not travel on it.
using WireMeasure = std::function<std::optional<detail::WireTiming>(uint64_t bytes, detail::WireCode wire)>;

// The wires --tune measures: those of --wire with exact first (added when missing), else every wire.
std::vector<detail::WireCode> tuneWires(const BenchOptions& o);

// `doc` (a tune file's document: the keys already written are kept; anything but an object starts a new
// one) with "wires" set to `t`. `doc` unchanged when `t` has no row.
nlohmann::json tuneDocumentWithWires(const nlohmann::json& doc, const detail::WireTable& t);

// The '#'-commented table of what was measured: one line per size, each wire's time(us) and relative RMS
// error ("N/A" where not measured), then which wire auto picks at that size under each of `budgets`.
std::string formatWireTune(const std::vector<detail::WireCode>& wires, const detail::WireTable& t,
                           const std::vector<double>& budgets);

// Measures every wire at every size with `measure`, prints the table to `out`, and writes the "wires"
// table (stamped `fingerprint`, `measured`) into the tune file at `path`. Returns 0, or 1 with a one-line
// error on stderr (nothing measured, or the file cannot be written); a measurement that throws stops it
// the same way, the file keeping what it had.
int runWireTune(const WireMeasure& measure, const std::vector<uint64_t>& sizes,
                const std::vector<detail::WireCode>& wires, const std::string& fingerprint, const std::string& measured,
                const std::string& path, std::FILE* out);

// runWireTune on the GPUs: a communicator per wire over `devices` (shared_devices where ranks share a GPU),
// backend host, options from `base` (-n, -w, --graph-replays).
int runWireTuneOnGpus(const std::vector<int>& devices, const std::string& fingerprint,
                      const std::vector<uint64_t>& sizes, const BenchOptions& base, const std::string& path,
                      const std::string& measured, std::FILE* out);

}  // namespace tpscope::cli
