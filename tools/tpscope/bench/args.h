// SPDX-License-Identifier: Apache-2.0
// bench/args.h - the options of `tpscope bench allreduce` and their checks, with no GPU in sight.
//
// Flags follow nccl-tests' all_reduce_perf where they overlap (-b -e -f -i -n -w -c -d -o -g), so a
// command line can be moved between the two. Sizes are bytes per GPU, as in nccl-tests: a size becomes
// count = size / element size elements, and the row shows count x element size. Every check here
// throws UsageError with one sentence that names the flag (exit 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::cli {

// The size sweep: -b to -e, multiplying by -f, or adding -i when -f is 1 (nccl-tests semantics).
struct SweepSpec {
  uint64_t min_bytes = 8 << 10;
  uint64_t max_bytes = 256 << 20;
  uint64_t step_factor = 2;
  uint64_t step_bytes = 1 << 20;  // nccl-tests' default increment when -f is 1
};

// A sweep never has more sizes than this: a typo like -f 1 -i 8 would otherwise run for days.
constexpr size_t kMaxSweepSizes = 4096;

// The sizes in bytes from -b to -e inclusive, before rounding to whole elements.
std::vector<uint64_t> sizeSweep(const SweepSpec& spec);

// Element counts for `sizes` in `dtype`: size / element size, duplicates (from rounding) dropped.
// UsageError when the smallest size is below one element.
std::vector<size_t> sweepCounts(const std::vector<uint64_t>& sizes, tpsDataType_t dtype);

// "float"/"f32"/"float32", "half"/"f16"/"float16", "bfloat16"/"bf16", or "all" (every type, in
// that order). UsageError naming -d for anything else.
std::vector<tpsDataType_t> parseDataTypes(const std::string& text);

// "host,nccl": backends in the order given; "all" = host,p2p,nccl (the library's backends; add the
// nccl-symm column by name, kBenchNcclSymm). UsageError for an unknown or repeated name.
std::vector<tpsBackend_t> parseBackends(const std::string& text);

// "exact,int8,fp8": wires in the order given (exact, bf16, int8, fp8, int4); "all" = every wire, exact first.
// UsageError for an unknown or repeated name, and for auto (a policy, not a wire: TPSCOPE_WIRE gives it).
std::vector<tpsWire_t> parseWires(const std::string& text);

// A size flag's value ("8K", "256M", "1G", "4096"); UsageError naming `flag` when it does not parse.
uint64_t parseSizeFlag(const std::string& text, const std::string& flag);

// Every option after parsing, with defaults filled in: what the preamble and the JSON context echo.
struct BenchOptions {
  SweepSpec sweep;
  int iters = 20;        // -n: timed calls per size (per graph in --graph mode)
  int warmup_iters = 5;  // -w: untimed calls before each size's timing
  bool check = true;     // -c
  std::vector<tpsDataType_t> dtypes{tpsBfloat16};
  std::vector<tpsBackend_t> backends{tpsBackendHost, tpsBackendNccl};
  // --wire: a communicator per wire, measured interleaved with the backends at each size. Not given: one
  // communicator on the default wire (exact, or what TPSCOPE_WIRE names), and wires_given stays false.
  std::vector<tpsWire_t> wires{tpsWireExact};
  bool wires_given = false;
  std::vector<int> devices;  // CUDA ordinals; empty until resolved against the machine
  bool graph = false;
  int graph_replays = 10;    // timed launches of each graph
  bool meter = true;         // meter each eager (backend, size) on the links (--no-meter: off)
  std::string json_path;     // -J/--json FILE; empty: none
  bool json_stdout = false;  // --format json
  int procs = 0;             // --procs N: the sweep again with each of N ranks a process of its own; 0: not
};

// The GPUs to use: `--devices LIST` (CUDA ordinals) or `-g N` (the first N), else every visible GPU.
// `ngpus` is 0 when -g was not given. UsageError unless 2 <= N <= TPS_MAX_DEVICES; an ordinal that does
// not exist is left for queryTopology to report.
std::vector<int> resolveDevices(int ngpus, const std::string& list, int visible);

// The backend whose time divides the others' in the ratio section: nccl when listed, else the first.
tpsBackend_t ratioReference(const std::vector<tpsBackend_t>& backends);

}  // namespace tpscope::cli
