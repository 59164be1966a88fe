// SPDX-License-Identifier: Apache-2.0
// bench/bench_runner.cc - timed AllReduce loops (eager and CUDA-graph) and the -c 1 check on real GPUs.
#include "bench/bench_runner.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "bench/check.h"
#include "bench/cuda_calls.h"
#include "bench/stats.h"
#include "cli.h"
#include "common/log.h"

namespace tpscope::cli {

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
    for (int d : devices)  // each GPU once: ranks that share one share its links
      if (std::find(mo.devices.begin(), mo.devices.end(), d) == mo.devices.end()) mo.devices.push_back(d);
    mo.fake_gpus = fakeMeterGpus();
    std::string reason;
    if (Meter::start(mo, &meter_, &reason) != tpsSuccess) {
      TPS_LOG_WARN("the meter cannot run ({}); the pcie/nvl columns show N/A", reason);
      meter_.reset();
    } else {
      unread_.assign(meter_->gpus().size(), {});
    }
  }
  tpsConfig_t defaults;
  tpsConfigInit(&defaults);  // backend auto: the communicator sets up every backend it can
  for (tpsWire_t w : options.wires) {
    tpsConfig_t cfg = config ? *config : defaults;
    if (options.wires_given) cfg.wire = w;
    WireComm c{w, "", nullptr};
    tpsOk(tpsCommCreate(&c.comm, static_cast<int>(n), devices.data(), &cfg),
          options.wires_given ? fmt::format("creating the AllReduce communicator of wire {}", wireLabel(w))
                              : std::string("creating the AllReduce communicator"));
    tpsConfig_t resolved = cfg;
    (void)tpsCommGetConfig(c.comm, &resolved);
    c.label = options.wires_given ? wireLabel(w) : wireLabel(resolved.wire, resolved.wire_error_budget);
    comms_.push_back(c);
  }
  comm_ = comms_.front().comm;
  if (std::find(options.backends.begin(), options.backends.end(), kBenchNcclSymm) != options.backends.end()) {
    symm_ = NcclSymm::create(devices, max_bytes, &symm_info_);
    if (!symm_) TPS_LOG_WARN("nccl-symm: N/A ({}); the other columns run without it", symm_info_.reason);
  }
}

AllReduceBench::~AllReduceBench() {
  for (const Stream& s : streams_) (void)cudaStreamSynchronize(s.get());
  for (const WireComm& c : comms_) tpsCommDestroy(c.comm);
}

tpsResult_t AllReduceBench::call(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
  if (backend == kBenchNcclSymm) return symm_ ? symm_->allReduce(dtype, count, tps_streams_) : tpsUnavailable;
  return tpsAllReduceWith(comm_, backend, ptrs_.data(), count, dtype, tps_streams_.data());
}

void AllReduceBench::syncAll() {
  for (const Stream& s : streams_) TPS_BENCH_CUDA(cudaStreamSynchronize(s.get()));
}

void AllReduceBench::throwIfAsyncError(tpsBackend_t backend, uint64_t bytes) {
  tpsResult_t async = tpsSuccess;
  if (backend == kBenchNcclSymm && symm_)
    async = symm_->asyncError();
  else
    tpsOk(tpsCommGetAsyncError(comm_, &async), "tpsCommGetAsyncError");
  tpsOk(async, fmt::format("backend {} failed after its calls of {} bytes", benchBackendName(backend), bytes));
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

tpsConfig_t AllReduceBench::config() const {
  tpsConfig_t c;
  tpsConfigInit(&c);
  (void)tpsCommGetConfig(comms_.front().comm, &c);
  return c;
}

bool AllReduceBench::available(tpsBackend_t backend) {
  comm_ = comms_.front().comm;  // every wire's communicator has the same backends
  const tpsResult_t r = call(backend, tpsFloat32, 1);
  if (r == tpsUnavailable) return false;
  tpsOk(r, fmt::format("a first call of backend {}", benchBackendName(backend)));
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
    tpsOk(call(backend, dtype, count), fmt::format("tpsAllReduceWith({})", benchBackendName(backend)));
    if (marked && i + 1 < iters) TPS_BENCH_CUDA(cudaEventRecord(marks_[i + 1].get(), s0));
  }
  joinInto();
  const int last = marked ? iters : 1;
  TPS_BENCH_CUDA(cudaEventRecord(marks_[last].get(), s0));
  return markIntervalsUs(marks_, last, marked ? 1 : iters);
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
    tpsOk(r, fmt::format("capturing tpsAllReduceWith({}) into a CUDA graph", benchBackendName(backend)));
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
  return markIntervalsUs(marks_, launches, calls_per_launch);
}

CheckCounts AllReduceBench::check(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
  const size_t bytes = count * tpsDataTypeSize(dtype);
  const std::vector<void*>& ptrs = backend == kBenchNcclSymm && symm_ ? symm_->buffers() : ptrs_;
  host_.resize(devices_.size());
  std::vector<const void*> results;
  for (size_t r = 0; r < devices_.size(); ++r) {
    if (host_[r].size() < bytes) host_[r].resize(bytes);
    fillBenchInput(kBenchSeed, static_cast<int>(r), dtype, count, host_[r].data());
    TPS_BENCH_CUDA(cudaMemcpyAsync(ptrs[r], host_[r].data(), bytes, cudaMemcpyHostToDevice, streams_[r].get()));
    results.push_back(host_[r].data());
  }
  syncAll();
  // The check runs the way the timing did: one eager call, or a one-call graph launched once. The
  // statistics around it say which wire the call used, so the reference is that wire's.
  std::vector<PathStats> before, after;
  tpsOk(allPathStats(comm_, &before), "tpsCommGetPathStats");
  if (options_.graph) {
    GraphExec g{capture(backend, dtype, count, 1)};
    DeviceGuard guard(devices_[0]);
    TPS_BENCH_CUDA(cudaGraphLaunch(g.exec, streams_[0].get()));
  } else {
    tpsOk(call(backend, dtype, count), fmt::format("tpsAllReduceWith({})", benchBackendName(backend)));
  }
  syncAll();
  throwIfAsyncError(backend, bytes);
  tpsOk(allPathStats(comm_, &after), "tpsCommGetPathStats");
  bool sum_on_wire = false;
  const std::optional<detail::WireCode> wire = statsWire(before, after, &sum_on_wire);
  if (!wire) throw std::runtime_error(fmt::format("the check's call of {} bytes ran on more than one wire", bytes));
  for (size_t r = 0; r < devices_.size(); ++r)
    TPS_BENCH_CUDA(cudaMemcpyAsync(host_[r].data(), ptrs[r], bytes, cudaMemcpyDeviceToHost, streams_[r].get()));
  syncAll();
  for (size_t r = 0; r < devices_.size(); ++r)  // timing runs on zeros again (see bench/bench_runner.h)
    TPS_BENCH_CUDA(cudaMemsetAsync(ptrs[r], 0, bytes, streams_[r].get()));
  return checkResults(kBenchSeed, dtype, count, results, *wire, sum_on_wire);
}

bool AllReduceBench::awaited(size_t g, MeterGroup group) const {
  if (unread_[g][static_cast<int>(group)]) return false;
  for (int c = 0; c < kMeterCounters; ++c)
    if (groupOf(static_cast<MeterCounter>(c)) == group && meter_->gpus()[g].supported[c]) return true;
  return false;
}

void AllReduceBench::giveUp(size_t g, MeterGroup group, int limit_ms) {
  unread_[g][static_cast<int>(group)] = true;
  TPS_LOG_WARN("the meter read no {} counters of GPU {} for {} ms; those columns show N/A from here on",
               meterGroupName(group), meter_->gpus()[g].index, limit_ms);
}

// Waits until every awaited counter group has a good read that began after `after_ns` (at most
// `limit_ms`) and returns the earliest of those reads' times (t_ns), or nullopt when one has none by
// then; that group is then given up (a group whose reads fail would otherwise cost the limit three
// times per row) and its columns show N/A. A read must *begin* after the moment, not merely be
// stamped after it: an NVLink read takes tens of milliseconds (one field per link, the links one after
// another), and a read that spans the calls sums links read before them with links read after.
std::optional<int64_t> AllReduceBench::readSince(int64_t after_ns, int limit_ms) {
  const size_t ngpu = meter_->gpus().size();
  const int64_t give_up = Meter::now() + int64_t{limit_ms} * 1000000;
  for (;;) {
    std::vector<std::array<bool, 2>> missing(ngpu);
    bool all = true;
    int64_t earliest = INT64_MAX;
    for (size_t g = 0; g < ngpu; ++g) {
      for (MeterGroup group : {MeterGroup::kPcie, MeterGroup::kNvlink}) {
        if (!awaited(g, group)) continue;
        const int k = static_cast<int>(group);
        const std::optional<MeterSample> r = meter_->latestRead(static_cast<int>(g), group);
        missing[g][k] = !(r && r->t_before_ns > after_ns);
        all = all && !missing[g][k];
        if (!missing[g][k])
          for (int c = 0; c < kMeterCounters; ++c)
            if (r->bytes[c]) earliest = std::min(earliest, r->t_ns[c]);
      }
    }
    if (all) return earliest;
    if (Meter::now() > give_up) {
      for (size_t g = 0; g < ngpu; ++g)
        for (MeterGroup group : {MeterGroup::kPcie, MeterGroup::kNvlink})
          if (missing[g][static_cast<int>(group)]) giveUp(g, group, limit_ms);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Waits (at most `limit_ms`) until every GPU's NVLink counters read the same in two good reads in a
// row. NVML's NVLink values trail the traffic by tens of ms, so bytes of calls made before an edge can
// land after it (in the idle window they would inflate the background that is subtracted, until a
// large call's bytes read as none). PCIe does not trail this way.
bool AllReduceBench::nvlinkSettled(int limit_ms) {
  const size_t ngpu = meter_->gpus().size();
  constexpr int kTx = static_cast<int>(MeterCounter::kNvlinkTx), kRx = static_cast<int>(MeterCounter::kNvlinkRx);
  std::vector<std::optional<MeterSample>> prev(ngpu);
  std::vector<bool> still(ngpu, false);
  std::vector<int> newer(ngpu, 0);  // good reads seen after the first one of this wait
  const int64_t give_up = Meter::now() + int64_t{limit_ms} * 1000000;
  for (;;) {
    bool all = true;
    for (size_t g = 0; g < ngpu; ++g) {
      if (!awaited(g, MeterGroup::kNvlink)) continue;
      const std::optional<MeterSample> r = meter_->latestRead(static_cast<int>(g), MeterGroup::kNvlink);
      if (r && (!prev[g] || r->t_before_ns > prev[g]->t_before_ns)) {
        if (prev[g]) ++newer[g];
        still[g] = prev[g] && r->bytes[kTx] == prev[g]->bytes[kTx] && r->bytes[kRx] == prev[g]->bytes[kRx];
        prev[g] = r;
      }
      all = all && still[g];
    }
    if (all) return true;
    if (Meter::now() > give_up) {
      // A GPU whose NVLink counters gave no good read in all that time is not waited for again.
      for (size_t g = 0; g < ngpu; ++g)
        if (!still[g] && awaited(g, MeterGroup::kNvlink) && newer[g] == 0) giveUp(g, MeterGroup::kNvlink, limit_ms);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MeteredBytes AllReduceBench::metered(tpsBackend_t backend, tpsDataType_t dtype, size_t count, double us_per_call) {
  // The window is [idle guard, calls, idle guard], and each guard holds a whole read of every
  // counter: each edge then lies between two reads taken in idle time, where prorating is exact
  // however slowly a counter is read. (A guard of fixed length is not enough: an NVLink read as long as
  // the guard brackets an edge across the calls and moves part of them out of the window.) Before the window opens and
  // before it closes, the NVLink counters must have stopped moving (nvlinkSettled: their values
  // trail the traffic). The idle background is taken out with the rate of the leading guard, up to
  // its reads.
  constexpr int kReadLimitMs = 2000;
  const int calls = static_cast<int>(std::clamp(std::ceil(20000.0 / std::max(us_per_call, 1.0)), 1.0, 20000.0));
  const std::string name = fmt::format("{}-{}", benchBackendName(backend), windows_++);
  const std::string idle = name + "-idle";
  syncAll();
  bool settled = nvlinkSettled(kReadLimitMs);  // the bytes of the timed loops before have landed
  tpsOk(meter_->begin(name), "meter begin");
  const int64_t idle_start = Meter::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::optional<int64_t> lead = readSince(idle_start, kReadLimitMs);
  for (int i = 0; i < calls; ++i) tpsOk(call(backend, dtype, count), "metered call");
  syncAll();
  settled = nvlinkSettled(kReadLimitMs) && settled;
  const std::optional<int64_t> trail = readSince(Meter::now(), kReadLimitMs);
  tpsOk(meter_->end(name), "meter end");
  if (lead && *lead > idle_start) tpsOk(meter_->addWindow(idle, idle_start, *lead), "meter idle window");
  // Every counter read once more after the end, then the windows are computed once: Meter::windows()
  // recomputes every window from the whole series, so polling it row after row grows with the sweep.
  const std::optional<int64_t> after = readSince(Meter::now(), kReadLimitMs);
  if (!settled) TPS_LOG_INFO("meter window {}: NVLink counters still moving {} ms after the calls", name, kReadLimitMs);
  if (!lead || !trail || !after) {
    std::string reads;
    for (const MeterCadence& c : meter_->cadence())
      reads += fmt::format(" GPU{} {} {} reads, {} failed{};", c.gpu, meterGroupName(c.group), c.reads, c.failed_reads,
                           c.last_error.empty() ? "" : " (" + c.last_error + ")");
    TPS_LOG_INFO("meter window {}: a counter group had no good read within {} ms of an edge (cadence:{})", name,
                 kReadLimitMs, reads);
  }
  const MeterWindow* total = nullptr;
  const MeterWindow* quiet = nullptr;
  const std::vector<MeterWindow> windows = meter_->windows();
  for (const MeterWindow& w : windows) {
    if (w.name == name) total = &w;
    if (w.name == idle) quiet = &w;
  }
  MeteredBytes out;
  if (total == nullptr || quiet == nullptr) return out;
  const double total_s = (total->end_ns - total->start_ns) * 1e-9, quiet_s = (quiet->end_ns - quiet->start_ns) * 1e-9;
  auto perCall = [&](MeterCounter c) -> std::optional<double> {
    double sum = 0;
    for (size_t g = 0; g < total->cells.size(); ++g) {
      if (unread_[g][static_cast<int>(groupOf(c))]) return std::nullopt;  // its guards hold no read: not exact
      const std::optional<double>& b = total->cells[g][static_cast<int>(c)].bytes;
      const std::optional<double>& q = quiet->cells[g][static_cast<int>(c)].bytes;
      if (!b || !q || quiet_s <= 0) return std::nullopt;
      sum += std::max(0.0, *b - *q / quiet_s * total_s);
    }
    return sum / static_cast<double>(devices_.size()) / calls;  // per rank: a GPU's links carry every rank it holds
  };
  out.pcie_tx = perCall(MeterCounter::kPcieTx);
  out.pcie_rx = perCall(MeterCounter::kPcieRx);
  out.nvlink_tx = perCall(MeterCounter::kNvlinkTx);
  out.nvlink_rx = perCall(MeterCounter::kNvlinkRx);
  return out;
}

BenchRow AllReduceBench::measure(tpsBackend_t backend, tpsDataType_t dtype, size_t count, tpsWire_t wire) {
  auto c = std::find_if(comms_.begin(), comms_.end(), [&](const WireComm& x) { return x.wire == wire; });
  if (c == comms_.end()) throw std::logic_error("measure: a wire this bench made no communicator for");
  comm_ = c->comm;
  BenchRow row;
  row.backend = backend;
  row.wire = c->label;
  row.dtype = dtype;
  row.count = count;
  row.graph = options_.graph;
  const std::string what = fmt::format("tpsAllReduceWith({})", benchBackendName(backend));
  if (backend == kBenchNcclSymm && symm_)  // NCCL's model of the call, before anything of it runs
    symm_info_.estimates.push_back({dtype, row.bytes(), symm_->estimateUs(dtype, count, tps_streams_)});
  for (int i = 0; i < options_.warmup_iters; ++i) tpsOk(call(backend, dtype, count), what);
  syncAll();
  throwIfAsyncError(backend, row.bytes());

  std::vector<PathStats> before, after;
  tpsOk(allPathStats(comm_, &before), "tpsCommGetPathStats");
  std::vector<double> samples;
  if (!options_.graph) {
    const double mean = timeEager(backend, dtype, count, /*marked=*/false).front();
    tpsOk(allPathStats(comm_, &after), "tpsCommGetPathStats");
    samples = timeEager(backend, dtype, count, /*marked=*/true);
    row.time = summarizeTimes(samples);
    row.time.mean_us = mean;  // from the unmarked run: nothing but the calls between start and stop
    row.calls = options_.iters;
  } else {
    GraphExec g{capture(backend, dtype, count, options_.iters)};
    tpsOk(allPathStats(comm_, &after), "tpsCommGetPathStats");
    samples = timeGraph(g.exec, options_.iters);
    row.time = summarizeTimes(samples);
    row.calls = options_.iters * options_.graph_replays;
  }
  syncAll();
  throwIfAsyncError(backend, row.bytes());

  const StatsDelta delta = statsDelta(before, after, static_cast<int>(devices_.size()));
  row.path = delta.paths;
  row.bytes_per_call = delta.bytes_per_call;
  if (backend == kBenchNcclSymm)
    setNcclSymmAccounting(&row, static_cast<int>(devices_.size()));  // the library counts no call of it
  else if (delta.calls != static_cast<unsigned long long>(options_.iters))
    TPS_LOG_WARN("the library counted {} calls where the benchmark made {} ({} at {} bytes)", delta.calls,
                 options_.iters, benchBackendName(backend), row.bytes());
  setBandwidths(&row, static_cast<int>(devices_.size()));
  if (meter_) row.metered = metered(backend, dtype, count, row.time.mean_us);
  if (options_.check) row.check = check(backend, dtype, count);
  return row;
}

}  // namespace tpscope::cli
