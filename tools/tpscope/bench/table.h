// SPDX-License-Identifier: Apache-2.0
// bench/table.h - what `tpscope bench allreduce` prints: the nccl-tests table, footer, ratios, JSON.
//
// Pure functions of measured rows, so the formats are pinned by golden tests without a GPU.
//
// Formulas (nccl-tests doc/PERFORMANCE.md; GB/s = 1e9 B/s; S = count x element size, bytes per GPU):
//   time   = mean time of one call, in microseconds (see BenchRow for what each mode times)
//   algbw  = S / time
//   busbw  = algbw x 2(n-1)/n for n GPUs: a ring AllReduce makes each GPU send and receive
//            2(n-1)/n x S, so busbw is comparable across n and with the link's rate.
//
// Table: every line that is not a data row starts with '#', so awk/gnuplot read the rows as-is. The
// first eight columns are all_reduce_perf's (in-place only: tpsAllReduce is in place; no root column
// because an AllReduce has none); ours follow: backend, wire, path, per-call spread, the error against the
// exact sum (-c 1), and the bytes each GPU sent (tx) and received (rx) per call over each medium, from the
// library's own accounting (on a compressed wire: its payload, codes and scales). algbw and busbw are
// always computed on S, the dtype's bytes, whatever the wire moved.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/args.h"
#include "bench/nccl_symm.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

double algBandwidthGBps(uint64_t bytes, double time_us);
double busBandwidthGBps(double algbw_gbps, int ngpus);

// Mean, min, median (middle, or mean of the two middles) and max of per-call times.
struct TimeStats {
  double mean_us = 0, min_us = 0, median_us = 0, max_us = 0;
};
TimeStats summarizeTimes(std::vector<double> per_call_us);

// Bytes one GPU sent/received per call, the mean over GPUs (the algorithms are symmetric up to one
// element of an uneven split), by medium: host memory, peer links, NCCL's ring estimate.
struct MediumBytes {
  double host_tx = 0, host_rx = 0, peer_tx = 0, peer_rx = 0, nccl_tx = 0, nccl_rx = 0;
};

// Bytes per call and rank the interconnect meter counted on the links (the GPUs' counters over the
// ranks: ranks that share a GPU share its links; protocol overhead included), from a separate metered run of the same
// call bracketed by idle time; nullopt: N/A.
struct MeteredBytes {
  std::optional<double> pcie_tx, pcie_rx, nvlink_tx, nvlink_rx;
};

// Result of -c 1 for one (backend, size): elements (rank, index) outside the tolerance, and elements of
// ranks 1..n-1 whose bits differ from rank 0's. wrong() counts an element failing either once.
// rel_rms and rel_max compare rank 0's result with the exact sum (in double) of the inputs: the relative
// RMS error sqrt(sum e^2 / sum ref^2), and the largest |e| over the RMS of the exact sum; nullopt where
// not computed (a --procs row).
struct CheckCounts {
  uint64_t out_of_tolerance = 0;
  uint64_t not_identical = 0;
  uint64_t wrong = 0;
  std::optional<double> rel_rms, rel_max;
};

// One measured (backend, dtype, size). Eager mode times `calls` back-to-back calls; graph mode times
// replays of a graph of -n calls. Times are per call; see docs/cli.md for the exact intervals.
struct BenchRow {
  tpsBackend_t backend = tpsBackendAuto;
  // The wire the communicator was asked for (wireLabel: "exact", "int8", "auto:0.01"); what each call
  // used is in `path` ("host-copy+int8"; a path without a wire's suffix ran exact).
  std::string wire = "exact";
  std::string path;  // paths that carried the calls ("host-kernel", "host-kernel+host-copy"), "-" if none counted
  tpsDataType_t dtype = tpsBfloat16;
  size_t count = 0;
  bool graph = false;
  bool procs = false;  // the ranks were processes of their own (--procs), not all in this process ("threads")
  int calls = 0;       // calls timed
  TimeStats time;
  double algbw_gbps = 0, busbw_gbps = 0;
  std::optional<CheckCounts> check;           // nullopt with -c 0
  std::optional<MediumBytes> bytes_per_call;  // nullopt when the library counted no call
  std::optional<MeteredBytes> metered;        // nullopt when the meter did not run (--no-meter, no NVML, graph)
  uint64_t bytes() const { return count * tpsDataTypeSize(dtype); }
};

// Fills algbw/busbw from time.mean_us.
void setBandwidths(BenchRow* row, int ngpus);
// The path and bytes columns of a nccl-symm row, which the library's accounting does not see: path
// "nccl-symm", and the ring estimate 2(n-1)/n x size sent and received per GPU under nccl_tx/nccl_rx
// (as the nccl backend counts its calls). Needs row->count and row->dtype.
void setNcclSymmAccounting(BenchRow* row, int ngpus);

struct DeviceEntry {
  int rank = 0;
  int device = 0;
  std::string bus_id, name;
};

// Where and how the numbers were made: the preamble and JSON "context".
struct BenchContext {
  std::string version, git_sha, hostname, start_time;  // start_time: ISO 8601 UTC
  int pid = 0;
  std::vector<std::string> argv;
  std::vector<DeviceEntry> devices;
  std::string driver_version, nccl_version;  // empty: unknown
  int cuda_driver_version = 0, cuda_runtime_version = 0;
  std::vector<std::pair<std::string, std::string>> env;  // benchEnvNames() that were set
  // Pinned-memory copy rate of GPU0 (what the host backend's algbw is judged against); nullopt: not measured.
  std::optional<double> pinned_d2h_gbps, pinned_h2d_gbps;
  BenchOptions options;
  // The communicator's resolved configuration (tpsCommGetConfig); nullopt: no communicator was made.
  std::optional<tpsConfig_t> communicator;
  // --procs: each rank's GPU in the rows marked procs (the threads rows use the same GPUs); empty: no --procs.
  std::vector<int> procs_devices;
  NcclSymmInfo nccl_symm;  // the nccl-symm column: a preamble line and context "nccl_symm" when requested
};

// The variables the preamble reports when set: NCCL's that change which path NCCL takes, and tpscope's
// that change which backend, path and tunables the library uses.
const std::vector<std::string>& benchEnvNames();

std::string formatPreamble(const BenchContext& ctx);
std::string formatHeader();
std::string formatRow(const BenchRow& row);
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth : X backend dtype wire" per backend, wire
// and dtype.
std::string formatFooter(const std::vector<BenchRow>& rows, const std::vector<tpsBackend_t>& backends);

// Per (dtype, size): each backend's mean time over the reference backend's, and the fastest backend.
struct RatioRow {
  tpsDataType_t dtype = tpsBfloat16;
  uint64_t bytes = 0;
  std::vector<std::optional<double>> ratio;  // per backend, in --backend order; nullopt if not measured
  std::optional<tpsBackend_t> fastest;
};
// Rows marked procs are left out: the ratios compare backends within one process, on one wire: `wire`
// (a row's wire label), the first of --wire.
std::vector<RatioRow> timeRatios(const std::vector<BenchRow>& rows, const std::vector<tpsBackend_t>& backends,
                                 tpsBackend_t reference, const std::string& wire = "exact");
std::string formatRatios(const std::vector<RatioRow>& ratios, const std::vector<tpsBackend_t>& backends,
                         tpsBackend_t reference);

// Per (dtype, size, backend) where the exact wire and another were measured: each wire's path, time over
// the exact wire's, payload algbw over the exact wire's (its inverse), host bytes per call over the exact
// wire's, and the relative RMS error; "" when no row has another wire beside an exact one.
std::string formatWireRatios(const std::vector<BenchRow>& rows);

// --procs: per (dtype, size, backend) with both rows, time with a process per rank over time with every rank
// in this process; "" when no row is marked procs.
std::string formatProcsRatios(const std::vector<BenchRow>& rows);

nlohmann::json rowJson(const BenchRow& row);
// {"json_schema_version", "context", "results", "error"}; consumers ignore keys they do not know. `error`
// is why the sweep stopped early (null when it did not).
nlohmann::json benchDocument(const BenchContext& ctx, const std::vector<BenchRow>& rows, const std::string& error = "");

}  // namespace tpscope::cli
