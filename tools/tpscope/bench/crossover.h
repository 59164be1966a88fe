// SPDX-License-Identifier: Apache-2.0
// bench/crossover.h - `tpscope bench allreduce --tune`, second part: which backend is fastest at each
// size on this box, written to the tune file as its "auto" table (src/allreduce/auto_table.h).
//
// Every backend the communicator can run is timed at every size of the sweep (bf16, in place), sizes
// interleaved as in the ordinary sweep. Timer: CUDA-graph replays (bench/bench_runner.h), -n calls per graph,
// --graph-replays launches; the median launch per call is the backend's time. Graphs, because decode
// runs as graphs in the engines this serves and because their time is the GPUs' alone, without the
// host's enqueueing, which differs by backend and by host. No -c check and no meter (the GPU tests
// check correctness; the ordinary sweep meters). The pure half (timings -> ranges -> document, and
// the printed table) is unit-tested; the GPU half only measures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allreduce/auto_table.h"
#include "bench/args.h"

namespace tpscope::cli {

// The tune file's document after the sweep: `doc` (the host keys already written are kept) with an
// "auto" table for `fingerprint`, measured at `measured` (ISO 8601 UTC), ranges from `timings`.
// `doc` unchanged when no timing is usable.
nlohmann::json tuneDocumentWithCrossovers(const nlohmann::json& doc, const std::string& fingerprint,
                                          const std::string& measured, const std::vector<detail::AutoTiming>& timings);

// The '#'-commented table of what was measured: one line per size, each backend's time(us) in
// `backends` order ("N/A" when not measured) and the fastest; then the ranges chosen.
std::string formatCrossovers(const std::vector<tpsBackend_t>& backends, const std::vector<detail::AutoTiming>& timings,
                             const std::vector<detail::AutoRange>& ranges);

// Times every available backend over `sizes` on `devices` (options from `base`: -n, -w, --graph-replays),
// prints the table to `out`, and adds the "auto" table (stamped `measured`) to the tune file at `path`.
// Returns 0, or 1 with a one-line error on stderr (the file then keeps what it had: the host keys).
int runCrossoverTune(const std::vector<int>& devices, const std::string& fingerprint,
                     const std::vector<uint64_t>& sizes, const BenchOptions& base, const std::string& path,
                     const std::string& measured, std::FILE* out);

}  // namespace tpscope::cli
