// SPDX-License-Identifier: Apache-2.0
// bench/procs_rank.cc - one rank of `tpscope bench allreduce --procs N` (the hidden `bench allreduce-rank`):
// joins the plan's communicator with tpsCommInitRank and measures every item as bench/procs.h says.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/check.h"
#include "bench/cuda_calls.h"
#include "bench/procs.h"
#include "bench/stats.h"
#include "cli.h"
#include "common/cuda_raii.h"

namespace tpscope::cli {

namespace {

uint64_t fnv1a(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

tpsUniqueId idFromHex(const std::string& hex) {
  tpsUniqueId id{};
  for (size_t i = 0; i < sizeof(id.internal); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

// One rank's communicator, stream, buffer and timing events.
class Rank {
 public:
  Rank(const ProcsPlan& plan, int rank, size_t max_bytes) : plan_(plan), rank_(rank), device_(plan.devices[rank]) {
    TPS_BENCH_CUDA(cudaSetDevice(device_));
    tpsOk(Stream::create(device_, &stream_), "creating a stream");
    tpsOk(DeviceBuffer::create(device_, max_bytes, &buf_), fmt::format("allocating {} bytes (lower -e)", max_bytes));
    TPS_BENCH_CUDA(cudaMemsetAsync(buf_.get(), 0, max_bytes, stream_.get()));
    marks_.resize(static_cast<size_t>(std::max(plan.iters, plan.graph_replays)) + 1);
    for (Event& e : marks_) tpsOk(Event::create(device_, &e), "creating a timing event");
    tpsConfig_t cfg;
    tpsConfigInit(&cfg);
    cfg.shared_devices = plan.shared_devices ? 1 : 0;
    tpsOk(tpsCommInitRank(&comm_, static_cast<int>(plan.devices.size()), idFromHex(plan.id_hex), rank, device_, &cfg),
          fmt::format("tpsCommInitRank (rank {})", rank));
  }
  ~Rank() {
    (void)cudaStreamSynchronize(stream_.get());
    tpsCommDestroy(comm_);
  }

  RankResult measure(const ProcsItem& item) {
    RankResult out;
    const tpsResult_t first = call(item.backend, tpsFloat32, 1);
    if (first == tpsUnavailable) {
      out.available = false;
      return out;
    }
    tpsOk(first, "a first call");
    for (int i = 0; i < plan_.warmup_iters; ++i) tpsOk(call(item.backend, item.dtype, item.count), "a warm-up call");
    sync(item);
    // The statistics bracket the timed calls alone: the barrier's 4-byte call is before them.
    if (!plan_.graph) barrier(item);
    std::vector<PathStats> before, after;
    tpsOk(allPathStats(comm_, &before), "tpsCommGetPathStats");
    if (!plan_.graph) {
      out.mean_us = timeEager(item, false).front();
      tpsOk(allPathStats(comm_, &after), "tpsCommGetPathStats");
      barrier(item);
      out.samples_us = timeEager(item, true);
    } else {
      GraphExec g{capture(item)};
      tpsOk(allPathStats(comm_, &after), "tpsCommGetPathStats");
      out.samples_us = timeGraph(g.exec, item);
      double sum = 0;
      for (double v : out.samples_us) sum += v;
      out.mean_us = sum / out.samples_us.size();
    }
    const StatsDelta d = statsDelta(before, after, 1);
    out.path = d.paths;
    out.bytes_per_call = d.bytes_per_call;
    if (plan_.check) check(item, &out);
    return out;
  }

 private:
  tpsResult_t call(tpsBackend_t backend, tpsDataType_t dtype, size_t count) {
    void* p = buf_.get();
    tpsStream_t s = reinterpret_cast<tpsStream_t>(stream_.get());
    return tpsAllReduceWith(comm_, backend, &p, count, dtype, &s);
  }
  void sync(const ProcsItem& item) {
    TPS_BENCH_CUDA(cudaStreamSynchronize(stream_.get()));
    tpsResult_t async = tpsSuccess;
    tpsOk(tpsCommGetAsyncError(comm_, &async), "tpsCommGetAsyncError");
    tpsOk(async, fmt::format("backend {} failed after its calls of {} bytes", tpsBackendName(item.backend),
                             item.count * tpsDataTypeSize(item.dtype)));
  }
  // Every rank leaves within a call's latency of the others: one small call, waited for.
  void barrier(const ProcsItem& item) {
    tpsOk(call(item.backend, tpsFloat32, 1), "a barrier call");
    sync(item);
  }
  std::vector<double> timeEager(const ProcsItem& item, bool marked) {
    const int iters = plan_.iters;
    const cudaStream_t s = stream_.get();
    TPS_BENCH_CUDA(cudaEventRecord(marks_[0].get(), s));
    for (int i = 0; i < iters; ++i) {
      tpsOk(call(item.backend, item.dtype, item.count), "a timed call");
      if (marked && i + 1 < iters) TPS_BENCH_CUDA(cudaEventRecord(marks_[i + 1].get(), s));
    }
    const int last = marked ? iters : 1;
    TPS_BENCH_CUDA(cudaEventRecord(marks_[last].get(), s));
    std::vector<double> us = markIntervalsUs(marks_, last, marked ? 1 : iters);
    sync(item);
    return us;
  }
  cudaGraphExec_t capture(const ProcsItem& item) {
    const cudaStream_t s = stream_.get();
    TPS_BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    tpsResult_t r = tpsSuccess;
    for (int i = 0; i < plan_.iters && r == tpsSuccess; ++i) r = call(item.backend, item.dtype, item.count);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (r != tpsSuccess || end != cudaSuccess) {
      if (graph) (void)cudaGraphDestroy(graph);
      tpsOk(r, "capturing the calls into a CUDA graph");
      cudaOk(end, "cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    cudaOk(e, "cudaGraphInstantiate");
    return exec;
  }
  std::vector<double> timeGraph(cudaGraphExec_t exec, const ProcsItem& item) {
    const cudaStream_t s = stream_.get();
    TPS_BENCH_CUDA(cudaGraphLaunch(exec, s));  // untimed: the upload and first-launch costs stay out
    sync(item);
    barrier(item);
    TPS_BENCH_CUDA(cudaEventRecord(marks_[0].get(), s));
    for (int j = 0; j < plan_.graph_replays; ++j) {
      TPS_BENCH_CUDA(cudaGraphLaunch(exec, s));
      TPS_BENCH_CUDA(cudaEventRecord(marks_[j + 1].get(), s));
    }
    std::vector<double> us = markIntervalsUs(marks_, plan_.graph_replays, plan_.iters);
    sync(item);
    return us;
  }
  void check(const ProcsItem& item, RankResult* out) {
    const size_t bytes = item.count * tpsDataTypeSize(item.dtype);
    std::vector<unsigned char> host(bytes);
    fillBenchInput(kBenchSeed, rank_, item.dtype, item.count, host.data());
    // On the call's stream, synchronised: a pageable copy may return before its DMA lands.
    TPS_BENCH_CUDA(cudaMemcpyAsync(buf_.get(), host.data(), bytes, cudaMemcpyHostToDevice, stream_.get()));
    TPS_BENCH_CUDA(cudaStreamSynchronize(stream_.get()));
    tpsOk(call(item.backend, item.dtype, item.count), "the checked call");
    TPS_BENCH_CUDA(cudaMemcpyAsync(host.data(), buf_.get(), bytes, cudaMemcpyDeviceToHost, stream_.get()));
    sync(item);
    out->out_of_tolerance =
        countOutOfTolerance(kBenchSeed, item.dtype, item.count, static_cast<int>(plan_.devices.size()), host.data());
    out->hash = fnv1a(host);
    TPS_BENCH_CUDA(cudaMemsetAsync(buf_.get(), 0, bytes, stream_.get()));  // timing runs on zeros again
    sync(item);
  }

  const ProcsPlan& plan_;
  int rank_, device_;
  Stream stream_;
  DeviceBuffer buf_;
  std::vector<Event> marks_;
  tpsComm_t comm_ = nullptr;
};

}  // namespace

int runProcsRank(const std::string& plan_path, int rank, const std::string& out_path) {
  std::ifstream f(plan_path);
  if (!f) return fail(kExitRuntime, "cannot read the plan " + plan_path);
  try {
    const ProcsPlan plan = parsePlan(nlohmann::json::parse(f));
    if (rank < 0 || rank >= static_cast<int>(plan.devices.size()))
      return fail(kExitUsage, fmt::format("--rank {} is not a rank of the plan", rank));
    size_t max_bytes = 4;
    for (const ProcsItem& i : plan.items) max_bytes = std::max(max_bytes, i.count * tpsDataTypeSize(i.dtype));
    std::ofstream out(out_path);
    if (!out) return fail(kExitRuntime, "cannot write " + out_path);
    Rank r(plan, rank, max_bytes);
    for (const ProcsItem& item : plan.items) {
      out << rankResultJson(r.measure(item)).dump() << "\n";
      out.flush();
    }
  } catch (const std::exception& e) {
    return fail(kExitRuntime, fmt::format("rank {}: {}", rank, e.what()));
  }
  return kExitOk;
}

}  // namespace tpscope::cli
