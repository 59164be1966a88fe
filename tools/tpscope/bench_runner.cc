// SPDX-License-Identifier: Apache-2.0
// bench_runner.cc - timed AllReduce loops (eager and CUDA-graph) and the -c 1 check on real GPUs.
#include "bench_runner.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "bench_check.h"
#include "bench_stats.h"
#include "common/log.h"

namespace tpscope::cli {

namespace {

void cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}
#define TPS_BENCH_CUDA(call) cudaOk((call), #call)

void tpsOk(tpsResult_t r, const std::string& what) {
  if (r != tpsSuccess) throw std::runtime_error(fmt::format("{}: {}", what, tpsGetErrorString(r)));
}

// Owns an instantiated graph.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) (void)cudaGraphExecDestroy(exec);
  }
};

}  // namespace

AllReduceBench::AllReduceBench(const std::vector<int>& devices, size_t max_bytes, const BenchOptions& options,
                               const tpsConfig_t* config)
    : options_(options), devices_(devices) {
  const size_t n = devices.size();
  streams_.resize(n);
  buffers_.resize(n);
  join_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    tpsOk(Stream::create(devices[r], &streams_[r]), fmt::format("creating a stream on GPU {}", devices[r]));
    tpsOk(DeviceBuffer::create(devices[r], max_bytes, &buffers_[r]),
          fmt::format("allocating {} bytes on GPU {} (lower -e)", max_bytes, devices[r]));
    tpsOk(Event::create(devices[r], &join_[r], /*timing=*/false), "creating an event");
    // On the stream: the legacy default stream would not order with our non-blocking streams.
    TPS_BENCH_CUDA(cudaMemsetAsync(buffers_[r].get(), 0, max_bytes, streams_[r].get()));
    tps_streams_.push_back(reinterpret_cast<tpsStream_t>(streams_[r].get()));
    ptrs_.push_back(buffers_[r].get());
  }
  tpsOk(Event::create(devices[0], &fork_, /*timing=*/false), "creating an event");
  marks_.resize(static_cast<size_t>(std::max(options.iters, options.graph_replays)) + 1);
  for (Event& e : marks_) tpsOk(Event::create(devices[0], &e), "creating a timing event");
  syncAll();
  if (options.meter && !options.graph) {
    MeterOptions mo;
    mo.devices = devices;
    std::string reason;
    if (Meter::start(mo, &meter_, &reason) != tpsSuccess) {
      TPS_LOG_WARN("the meter cannot run ({}); the pcie/nvl columns show N/A", reason);
      meter_.reset();
    }
  }
  tpsConfig_t defaults;
  tpsConfigInit(&defaults);  // backend auto: the communicator sets up every backend it can
  tpsOk(tpsCommCreate(&comm_, static_cast<int>(n), devices.data(), config ? config : &defaults),
        "creating the AllReduce communicator");
}

AllReduceBench::~AllReduceBench() {
  for (const Stream& s : streams_) (void)cudaStreamSynchronize(s.get());
  tpsCommDestroy(comm_);
}

tpsResult_t AllReduceBench::call(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
  return tpsAllReduceWith(comm_, backend, ptrs_.data(), count, dtype, tps_streams_.data());
}

void AllReduceBench::syncAll() {
  for (const Stream& s : streams_) TPS_BENCH_CUDA(cudaStreamSynchronize(s.get()));
}

void AllReduceBench::throwIfAsyncError(tpsBackend_t backend, uint64_t bytes) {
  tpsResult_t async = tpsSuccess;
  tpsOk(tpsCommGetAsyncError(comm_, &async), "tpsCommGetAsyncError");
  tpsOk(async, fmt::format("backend {} failed after its calls of {} bytes", tpsBackendName(backend), bytes));
}

void AllReduceBench::forkFrom(cudaEvent_t start) {
  for (size_t r = 1; r < streams_.size(); ++r) TPS_BENCH_CUDA(cudaStreamWaitEvent(streams_[r].get(), start, 0));
}

void AllReduceBench::joinInto() {
  for (size_t r = 1; r < streams_.size(); ++r) {
    DeviceGuard guard(devices_[r]);  // an event is recorded on a stream of its own device
    TPS_BENCH_CUDA(cudaEventRecord(join_[r].get(), streams_[r].get()));
    TPS_BENCH_CUDA(cudaStreamWaitEvent(streams_[0].get(), join_[r].get(), 0));
  }
}

bool AllReduceBench::available(tpsBackend_t backend) {
  const tpsResult_t r = call(backend, tpsFloat32, 1);
  if (r == tpsUnavailable) return false;
  tpsOk(r, fmt::format("a first call of backend {}", tpsBackendName(backend)));
  syncAll();
  throwIfAsyncError(backend, 4);
  return true;
}

std::vector<double> AllReduceBench::timeEager(tpsBackend_t backend, tpsDataType_t dtype, size_t count, bool marked) {
  const int iters = options_.iters;
  const cudaStream_t s0 = streams_[0].get();
  DeviceGuard guard(devices_[0]);
  joinInto();  // start follows everything already enqueued on every GPU
  TPS_BENCH_CUDA(cudaEventRecord(marks_[0].get(), s0));
  forkFrom(marks_[0].get());
  for (int i = 0; i < iters; ++i) {
    tpsOk(call(backend, dtype, count), fmt::format("tpsAllReduceWith({})", tpsBackendName(backend)));
    if (marked && i + 1 < iters) TPS_BENCH_CUDA(cudaEventRecord(marks_[i + 1].get(), s0));
  }
  joinInto();
  const int last = marked ? iters : 1;
  TPS_BENCH_CUDA(cudaEventRecord(marks_[last].get(), s0));
  TPS_BENCH_CUDA(cudaEventSynchronize(marks_[last].get()));
  std::vector<double> us;
  for (int i = 0; i < last; ++i) {
    float ms = 0;
    TPS_BENCH_CUDA(cudaEventElapsedTime(&ms, marks_[i].get(), marks_[i + 1].get()));
    us.push_back(ms * 1e3 / (marked ? 1 : iters));
  }
  return us;
}

cudaGraphExec_t AllReduceBench::capture(tpsBackend_t backend, tpsDataType_t dtype, size_t count, int calls) {
  const cudaStream_t s0 = streams_[0].get();
  DeviceGuard guard(devices_[0]);
  // Thread-local mode (as nccl-tests): only this thread is barred from unsafe CUDA calls during the capture,
  // so NCCL's own threads carry on.
  TPS_BENCH_CUDA(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
  tpsResult_t r = tpsSuccess;
  cudaError_t e = cudaEventRecord(fork_.get(), s0);
  for (size_t i = 1; i < streams_.size() && e == cudaSuccess; ++i)
    e = cudaStreamWaitEvent(streams_[i].get(), fork_.get(), 0);
  for (int i = 0; i < calls && r == tpsSuccess && e == cudaSuccess; ++i) r = call(backend, dtype, count);
  for (size_t i = 1; i < streams_.size() && e == cudaSuccess; ++i) {
    DeviceGuard on(devices_[i]);
    e = cudaEventRecord(join_[i].get(), streams_[i].get());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s0, join_[i].get(), 0);
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s0, &graph);  // always end, so s0 is usable after a failure
  if (r != tpsSuccess || e != cudaSuccess || end != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    tpsOk(r, fmt::format("capturing tpsAllReduceWith({}) into a CUDA graph", tpsBackendName(backend)));
    cudaOk(e != cudaSuccess ? e : end, "capturing the benchmark graph");
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  cudaOk(e, "cudaGraphInstantiate");
  return exec;
}

std::vector<double> AllReduceBench::timeGraph(cudaGraphExec_t exec, int calls_per_launch) {
  const cudaStream_t s0 = streams_[0].get();
  DeviceGuard guard(devices_[0]);
  TPS_BENCH_CUDA(cudaGraphLaunch(exec, s0));  // untimed: the upload and first-launch costs stay out of the samples
  TPS_BENCH_CUDA(cudaStreamSynchronize(s0));
  const int launches = options_.graph_replays;
  joinInto();  // start follows everything already enqueued on every GPU
  TPS_BENCH_CUDA(cudaEventRecord(marks_[0].get(), s0));
  for (int j = 0; j < launches; ++j) {
    TPS_BENCH_CUDA(cudaGraphLaunch(exec, s0));
    TPS_BENCH_CUDA(cudaEventRecord(marks_[j + 1].get(), s0));
  }
  TPS_BENCH_CUDA(cudaEventSynchronize(marks_[launches].get()));
  std::vector<double> us;
  for (int j = 0; j < launches; ++j) {
    float ms = 0;
    TPS_BENCH_CUDA(cudaEventElapsedTime(&ms, marks_[j].get(), marks_[j + 1].get()));
    us.push_back(ms * 1e3 / calls_per_launch);
  }
  return us;
}

CheckCounts AllReduceBench::check(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
  const size_t bytes = count * tpsDataTypeSize(dtype);
  host_.resize(devices_.size());
  std::vector<const void*> results;
  for (size_t r = 0; r < devices_.size(); ++r) {
    if (host_[r].size() < bytes) host_[r].resize(bytes);
    fillBenchInput(kBenchSeed, static_cast<int>(r), dtype, count, host_[r].data());
    TPS_BENCH_CUDA(cudaMemcpyAsync(ptrs_[r], host_[r].data(), bytes, cudaMemcpyHostToDevice, streams_[r].get()));
    results.push_back(host_[r].data());
  }
  syncAll();
  // The check runs the way the timing did: one eager call, or a one-call graph launched once.
  if (options_.graph) {
    GraphExec g{capture(backend, dtype, count, 1)};
    DeviceGuard guard(devices_[0]);
    TPS_BENCH_CUDA(cudaGraphLaunch(g.exec, streams_[0].get()));
  } else {
    tpsOk(call(backend, dtype, count), fmt::format("tpsAllReduceWith({})", tpsBackendName(backend)));
  }
  syncAll();
  throwIfAsyncError(backend, bytes);
  for (size_t r = 0; r < devices_.size(); ++r)
    TPS_BENCH_CUDA(cudaMemcpyAsync(host_[r].data(), ptrs_[r], bytes, cudaMemcpyDeviceToHost, streams_[r].get()));
  syncAll();
  for (size_t r = 0; r < devices_.size(); ++r)  // timing runs on zeros again (see bench_runner.h)
    TPS_BENCH_CUDA(cudaMemsetAsync(ptrs_[r], 0, bytes, streams_[r].get()));
  return checkResults(kBenchSeed, dtype, count, results);
}

MeteredBytes AllReduceBench::metered(tpsBackend_t backend, tpsDataType_t dtype, size_t count, double us_per_call) {
  // The window is [idle guard, calls, idle guard]: its edges fall in idle time, where prorating the
  // reads that bracket them is exact however slow the counters are read (NVLink ~22 ms on H200). The
  // guards' own background traffic is taken out with the rate of an idle window inside the first guard.
  constexpr int kGuardMs = 60;
  const int calls = static_cast<int>(std::clamp(std::ceil(20000.0 / std::max(us_per_call, 1.0)), 1.0, 20000.0));
  const std::string name = fmt::format("{}-{}", tpsBackendName(backend), windows_++);
  const std::string idle = name + "-idle";
  syncAll();
  tpsOk(meter_->begin(name), "meter begin");
  const int64_t idle_start = Meter::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(kGuardMs));
  const int64_t idle_end = Meter::now();
  for (int i = 0; i < calls; ++i) tpsOk(call(backend, dtype, count), "metered call");
  syncAll();
  std::this_thread::sleep_for(std::chrono::milliseconds(kGuardMs));
  tpsOk(meter_->end(name), "meter end");
  tpsOk(meter_->addWindow(idle, idle_start + (idle_end - idle_start) / 4, idle_end - (idle_end - idle_start) / 4),
        "meter idle window");
  // Let every counter be read after the end (NVLink reads take 30-90 ms on H200), then compute the
  // windows once: Meter::windows() recomputes every window from the whole series, so polling it
  // row after row grows with the sweep.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const MeterWindow* total = nullptr;
  const MeterWindow* quiet = nullptr;
  const std::vector<MeterWindow> windows = meter_->windows();
  for (const MeterWindow& w : windows) {
    if (w.name == name) total = &w;
    if (w.name == idle) quiet = &w;
  }
  MeteredBytes out;
  if (total == nullptr || quiet == nullptr) return out;
  if (!total->complete) {
    // Counters without a read after the window's end come out N/A; the others are exact. Say which.
    std::string reads;
    for (const MeterCadence& c : meter_->cadence())
      reads += fmt::format(" GPU{} {} {} reads;", c.gpu, c.group == MeterGroup::kPcie ? "pcie" : "nvlink", c.reads);
    for (size_t g = 0; g < meter_->gpus().size(); ++g) {
      const std::optional<MeterSample> last = meter_->latest(static_cast<int>(g));
      if (!last) continue;
      for (int c = 0; c < kMeterCounters; ++c)
        reads += fmt::format(" GPU{} counter {}: {} {:+.1f} ms after the end;", g, c,
                             last->bytes[c] ? "value" : "no value", (last->t_ns[c] - total->end_ns) * 1e-6);
    }
    TPS_LOG_INFO("meter window {} is incomplete 100 ms after its end (cadence:{})", name, reads);
  }
  const double total_s = (total->end_ns - total->start_ns) * 1e-9, quiet_s = (quiet->end_ns - quiet->start_ns) * 1e-9;
  auto perCall = [&](MeterCounter c) -> std::optional<double> {
    double sum = 0;
    for (size_t g = 0; g < total->cells.size(); ++g) {
      const std::optional<double>& b = total->cells[g][static_cast<int>(c)].bytes;
      const std::optional<double>& q = quiet->cells[g][static_cast<int>(c)].bytes;
      if (!b || !q || quiet_s <= 0) return std::nullopt;
      sum += std::max(0.0, *b - *q / quiet_s * total_s);
    }
    return sum / total->cells.size() / calls;
  };
  out.pcie_tx = perCall(MeterCounter::kPcieTx);
  out.pcie_rx = perCall(MeterCounter::kPcieRx);
  out.nvlink_tx = perCall(MeterCounter::kNvlinkTx);
  out.nvlink_rx = perCall(MeterCounter::kNvlinkRx);
  return out;
}

BenchRow AllReduceBench::measure(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
  BenchRow row;
  row.backend = backend;
  row.dtype = dtype;
  row.count = count;
  row.graph = options_.graph;
  const std::string what = fmt::format("tpsAllReduceWith({})", tpsBackendName(backend));
  for (int i = 0; i < options_.warmup_iters; ++i) tpsOk(call(backend, dtype, count), what);
  syncAll();
  throwIfAsyncError(backend, row.bytes());

  tpsStats_t before{}, after{};
  tpsOk(tpsCommGetStats(comm_, &before), "tpsCommGetStats");
  std::vector<double> samples;
  if (!options_.graph) {
    const double mean = timeEager(backend, dtype, count, /*marked=*/false).front();
    tpsOk(tpsCommGetStats(comm_, &after), "tpsCommGetStats");
    samples = timeEager(backend, dtype, count, /*marked=*/true);
    row.time = summarizeTimes(samples);
    row.time.mean_us = mean;  // from the unmarked run: nothing but the calls between start and stop
    row.calls = options_.iters;
  } else {
    GraphExec g{capture(backend, dtype, count, options_.iters)};
    tpsOk(tpsCommGetStats(comm_, &after), "tpsCommGetStats");
    samples = timeGraph(g.exec, options_.iters);
    row.time = summarizeTimes(samples);
    row.calls = options_.iters * options_.graph_replays;
  }
  syncAll();
  throwIfAsyncError(backend, row.bytes());

  const StatsDelta delta = statsDelta(before, after);
  row.path = delta.paths;
  row.bytes_per_call = delta.bytes_per_call;
  if (delta.calls != static_cast<unsigned long long>(options_.iters))
    TPS_LOG_WARN("the library counted {} calls where the benchmark made {} ({} at {} bytes)", delta.calls,
                 options_.iters, tpsBackendName(backend), row.bytes());
  setBandwidths(&row, static_cast<int>(devices_.size()));
  if (meter_) row.metered = metered(backend, dtype, count, row.time.mean_us);
  if (options_.check) row.check = check(backend, dtype, count);
  return row;
}

}  // namespace tpscope::cli
