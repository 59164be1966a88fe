// SPDX-License-Identifier: Apache-2.0
// bench/bench_runner.h - the measuring half of `tpscope bench allreduce`: one communicator over the GPUs, one
// buffer and one non-blocking stream per GPU, and the timed loops. Errors throw std::runtime_error
// (the CLI prints one line and exits 1).
//
// What is timed, all with CUDA events on GPU0's stream s0 (n GPUs, streams s0..s(n-1)):
// - eager: join every stream into s0 and record `start` on s0 (start follows all earlier work), make
//   every other stream wait for it (no GPU begins before start), enqueue -n calls back to back, record
//   an event on every other stream and make s0 wait for them (no GPU ends after stop), record `stop`. time(us) = (stop
//   - start) / n. The host's enqueueing of the first call is inside the interval, as in nccl-tests' eager timing.
//   min/median/max come from a second such run with an event recorded on s0 after every call: the intervals between
//   GPU0's completions of consecutive calls (the first from start, the last to the joined stop), which sum to that
//   run's total.
// - graph: -n calls are captured into one CUDA graph spanning every GPU (s0 forks to the other streams
//   and joins them back inside the graph), launched once untimed, then --graph-replays times on s0 with
//   an event between launches; each launch's interval / -n is one sample, time(us) is their mean.
// Timing runs on zero-filled buffers, so in-place sums stay finite however many calls run (a compressed
// wire's payload has the same size and its codec the same work whatever the values); -c 1 loads real data
// for its own call.
// Wires (--wire): one communicator per wire over the same streams and buffers, tpsConfig_t.wire set to
// it; measure() runs the one of the wire asked for.
// Metering (eager, unless --no-meter): after timing, a separate run of enough calls to last >= 20 ms sits
// in a meter window that also holds 60 ms of idle before and after the calls, so the window's edges
// fall in idle time and the counters' bytes are exact whatever their cadence (an NVLink read is slow:
// docs/METHOD.md section 2); the idle background, measured inside the first guard, is subtracted.
// Warm-ups (-w eager calls) precede each (backend, size); the statistics snapshots that give the path and
// bytes columns bracket the first eager run or the capture, so warm-ups and checks are not in them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/args.h"
#include "bench/nccl_symm.h"
#include "bench/table.h"
#include "common/cuda_raii.h"
#include "meter/meter.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

class AllReduceBench {
 public:
  // Creates streams, events, buffers of `max_bytes` per GPU and a communicator per wire of options.wires
  // (with options.wires_given false: one, on the default wire). `config` null: defaults, every backend the
  // communicator can set up. A tuner passes its own (say, host_copy_threshold forced to one path) to
  // measure one path against another.
  AllReduceBench(const std::vector<int>& devices, size_t max_bytes, const BenchOptions& options,
                 const tpsConfig_t* config = nullptr);
  ~AllReduceBench();
  AllReduceBench(const AllReduceBench&) = delete;
  AllReduceBench& operator=(const AllReduceBench&) = delete;

  // False when the communicator has no resources for `backend` (tpsUnavailable); one 1-element call.
  bool available(tpsBackend_t backend);
  // The first wire's communicator's resolved configuration (tpsCommGetConfig), for the record.
  tpsConfig_t config() const;
  // What the nccl-symm column set up and NCCL's estimates so far (requested: false when not listed).
  const NcclSymmInfo& ncclSymmInfo() const { return symm_info_; }
  // Warm-ups, timing, and with -c 1 the check, for one (backend, dtype, count) on `wire` (one of
  // options.wires; its communicator).
  BenchRow measure(tpsBackend_t backend, tpsDataType_t dtype, size_t count, tpsWire_t wire = tpsWireExact);

 private:
  tpsResult_t call(tpsBackend_t backend, tpsDataType_t dtype, size_t count);
  void syncAll();
  void throwIfAsyncError(tpsBackend_t backend, uint64_t bytes);
  void forkFrom(cudaEvent_t start);  // every stream but s0 waits for `start` (recorded on s0)
  void joinInto();                   // s0 waits for everything enqueued so far on the other streams
  cudaGraphExec_t capture(tpsBackend_t backend, tpsDataType_t dtype, size_t count, int calls);
  std::vector<double> timeEager(tpsBackend_t backend, tpsDataType_t dtype, size_t count, bool marked);
  std::vector<double> timeGraph(cudaGraphExec_t exec, int calls_per_launch);
  CheckCounts check(tpsBackend_t backend, tpsDataType_t dtype, size_t count);
  // The links' bytes per call: `calls` calls in a meter window with idle guards on both sides.
  MeteredBytes metered(tpsBackend_t backend, tpsDataType_t dtype, size_t count, double us_per_call);
  std::optional<int64_t> readSince(int64_t after_ns, int limit_ms);
  bool nvlinkSettled(int limit_ms);
  // Whether the edges wait for `group` of GPU g: it has a counter of that group, not yet given up on.
  bool awaited(size_t g, MeterGroup group) const;
  // No good read of `group` on GPU g within limit_ms: not waited for again, its columns N/A (warns).
  void giveUp(size_t g, MeterGroup group, int limit_ms);

  BenchOptions options_;
  std::vector<int> devices_;
  std::vector<Stream> streams_;
  std::vector<tpsStream_t> tps_streams_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<void*> ptrs_;
  std::vector<Event> join_;                       // one per GPU, no timing: joins stream r into s0
  Event fork_;                                    // on GPU0, no timing: forks s0 into the others inside a graph
  std::vector<Event> marks_;                      // on GPU0, timing: start, per-call or per-launch marks, stop
  std::vector<std::vector<unsigned char>> host_;  // -c 1 staging, one per GPU
  struct WireComm {
    tpsWire_t wire = tpsWireExact;
    std::string label;  // the row's wire column (BenchRow::wire)
    tpsComm_t comm = nullptr;
  };
  std::vector<WireComm> comms_;   // one per wire of options.wires, in that order
  tpsComm_t comm_ = nullptr;      // the communicator of the wire being measured (one of comms_)
  std::unique_ptr<Meter> meter_;  // null with --no-meter or where NVML cannot measure
  int windows_ = 0;
  std::unique_ptr<NcclSymm> symm_;  // the nccl-symm column: its own communicators and buffers; null: N/A
  NcclSymmInfo symm_info_;
  std::vector<std::array<bool, 2>> unread_;  // [gpu][counter group]: no good read in time once; N/A since
};

}  // namespace tpscope::cli
