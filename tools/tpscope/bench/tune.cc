// SPDX-License-Identifier: Apache-2.0
// bench/tune.cc - measuring the host backend's tunables on the box.
//
// Each candidate is timed the same way: K back-to-back calls on all GPUs between two host clock reads
// with every stream synchronised, after warm-ups; the median of three such blocks. The host clock is
// right here because the question is the throughput of back-to-back calls, launch cost included.
#include "bench/tune.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "allreduce/tuning.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

namespace {

struct Gpus {
  std::vector<int> devs;
  std::vector<cudaStream_t> streams;
  std::vector<void*> bufs;
  bool ok = true;
  Gpus(const std::vector<int>& d, size_t bytes) : devs(d), streams(d.size()), bufs(d.size()) {
    for (size_t r = 0; r < d.size(); ++r) {
      ok = ok && cudaSetDevice(d[r]) == cudaSuccess &&
           cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess &&
           cudaMalloc(&bufs[r], bytes) == cudaSuccess && cudaMemset(bufs[r], 0, bytes) == cudaSuccess;
    }
  }
  ~Gpus() {
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      if (bufs[r]) cudaFree(bufs[r]);
      if (streams[r]) cudaStreamDestroy(streams[r]);
    }
  }
  void sync() {
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      cudaStreamSynchronize(streams[r]);
    }
  }
};

// Microseconds per call of `bytes` (bf16) through a host-backend communicator made with `cfg`; < 0 on error.
double timeHost(Gpus& g, const tpsConfig_t& cfg, size_t bytes) {
  tpsComm_t comm = nullptr;
  if (tpsCommCreate(&comm, static_cast<int>(g.devs.size()), g.devs.data(), &cfg) != tpsSuccess) return -1;
  const size_t count = bytes / 2;
  const int k = bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 20 : 5;
  auto streams = reinterpret_cast<const tpsStream_t*>(g.streams.data());
  double best[3];
  bool ok = true;
  for (int w = 0; w < 3 && ok; ++w) ok = tpsAllReduce(comm, g.bufs.data(), count, tpsBfloat16, streams) == tpsSuccess;
  g.sync();
  for (int rep = 0; rep < 3 && ok; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < k && ok; ++i) ok = tpsAllReduce(comm, g.bufs.data(), count, tpsBfloat16, streams) == tpsSuccess;
    g.sync();
    best[rep] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / k;
  }
  tpsResult_t async = tpsSuccess;
  tpsCommGetAsyncError(comm, &async);
  tpsCommDestroy(comm);
  if (!ok || async != tpsSuccess) return -1;
  std::sort(best, best + 3);
  return best[1];
}

tpsConfig_t hostConfig(size_t threshold, size_t chunk, int blocks) {
  tpsConfig_t c;
  tpsConfigInit(&c);
  c.backend = tpsBackendHost;
  c.host_copy_threshold = threshold;
  c.host_chunk_bytes = chunk;
  c.host_blocks = blocks;
  return c;
}

// Per-GPU, per-direction GB/s of 256 MiB pinned copies running at the same time: D2H and/or H2D on
// each of `devs`. This is the ceiling the host backend's copy-engine path really has, since every GPU
// copies in both directions at once and all of them share host memory.
double concurrentCopyRate(const std::vector<int>& devs, bool d2h, bool h2d) {
  const size_t bytes = 256u << 20;
  struct Side {
    void *dev = nullptr, *host_out = nullptr, *host_in = nullptr;
    cudaStream_t s_out = nullptr, s_in = nullptr;
  };
  std::vector<Side> sides(devs.size());
  bool ok = true;
  for (size_t r = 0; r < devs.size() && ok; ++r) {
    Side& x = sides[r];
    ok = cudaSetDevice(devs[r]) == cudaSuccess && cudaMalloc(&x.dev, 2 * bytes) == cudaSuccess &&
         cudaHostAlloc(&x.host_out, bytes, cudaHostAllocPortable) == cudaSuccess &&
         cudaHostAlloc(&x.host_in, bytes, cudaHostAllocPortable) == cudaSuccess &&
         cudaStreamCreateWithFlags(&x.s_out, cudaStreamNonBlocking) == cudaSuccess &&
         cudaStreamCreateWithFlags(&x.s_in, cudaStreamNonBlocking) == cudaSuccess;
  }
  double times[3] = {0, 0, 0};
  for (int rep = -1; rep < 3 && ok; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t r = 0; r < devs.size(); ++r) {
      Side& x = sides[r];
      cudaSetDevice(devs[r]);
      if (d2h) cudaMemcpyAsync(x.host_out, x.dev, bytes, cudaMemcpyDeviceToHost, x.s_out);
      if (h2d) cudaMemcpyAsync(static_cast<char*>(x.dev) + bytes, x.host_in, bytes, cudaMemcpyHostToDevice, x.s_in);
    }
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      ok = ok && cudaStreamSynchronize(sides[r].s_out) == cudaSuccess &&
           cudaStreamSynchronize(sides[r].s_in) == cudaSuccess;
    }
    if (rep >= 0) times[rep] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (size_t r = 0; r < devs.size(); ++r) {
    Side& x = sides[r];
    cudaSetDevice(devs[r]);
    if (x.dev) cudaFree(x.dev);
    if (x.host_out) cudaFreeHost(x.host_out);
    if (x.host_in) cudaFreeHost(x.host_in);
    if (x.s_out) cudaStreamDestroy(x.s_out);
    if (x.s_in) cudaStreamDestroy(x.s_in);
  }
  (void)cudaGetLastError();
  if (!ok) return -1;
  std::sort(times, times + 3);
  return bytes / times[1] / 1e9;
}

}  // namespace

double pinnedCopyRateGBps(int device, bool to_host, size_t bytes, int reps) {
  void *d = nullptr, *h = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<double> rates;
  if (cudaSetDevice(device) == cudaSuccess && cudaMalloc(&d, bytes) == cudaSuccess &&
      cudaHostAlloc(&h, bytes, cudaHostAllocPortable) == cudaSuccess &&
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
      cudaEventCreate(&e1) == cudaSuccess) {
    for (int i = 0; i <= reps; ++i) {  // the first copy warms up and is not counted
      cudaEventRecord(e0, s);
      if (to_host)
        cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s);
      else
        cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s);
      cudaEventRecord(e1, s);
      float ms = 0;
      if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) break;
      if (i > 0) rates.push_back(bytes / (ms * 1e-3) / 1e9);
    }
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (s) cudaStreamDestroy(s);
  if (h) cudaFreeHost(h);
  if (d) cudaFree(d);
  (void)cudaGetLastError();
  if (rates.size() != static_cast<size_t>(reps)) return -1;
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

int runHostTune(const std::vector<int>& devices, std::FILE* out, TuneResult* result) {
  Gpus g(devices, 64u << 20);
  if (!g.ok) {
    std::fprintf(stderr, "tpscope: error: cannot allocate 64 MiB per GPU for tuning\n");
    return 1;
  }
  const double d2h = pinnedCopyRateGBps(devices[0], true, 256u << 20);
  const double h2d = pinnedCopyRateGBps(devices[0], false, 256u << 20);
  std::fprintf(out, "# tune: pinned copy rate GPU%d, 256 MiB: D2H %.1f GB/s, H2D %.1f GB/s\n", devices[0], d2h, h2d);
  // What the copy-engine path can reach: every GPU copying both ways at once (GB/s per GPU and direction).
  const std::vector<int> one{devices[0]};
  std::fprintf(out,
               "# tune: concurrent pinned copies, GB/s per GPU per direction: one GPU D2H+H2D %.1f; all %zu GPUs D2H "
               "%.1f, H2D %.1f, D2H+H2D %.1f\n",
               concurrentCopyRate(one, true, true), devices.size(), concurrentCopyRate(devices, true, false),
               concurrentCopyRate(devices, false, true), concurrentCopyRate(devices, true, true));

  // 1. Copy-engine chunk, at 64 MiB with the copy-engine path forced.
  std::fprintf(out,
               "# tune: copy-engine chunk at 64 MiB bf16 (copy path forced)\n#   chunk(B)   time(us)   algbw(GB/s)\n");
  size_t best_chunk = 0;
  double best_t = 1e30;
  for (size_t chunk : {size_t{1} << 20, size_t{2} << 20, size_t{4} << 20, size_t{8} << 20, size_t{16} << 20}) {
    const double t = timeHost(g, hostConfig(1, chunk, 16), 64u << 20);
    std::fprintf(out, "#   %9zu %10.1f %12.2f\n", chunk, t, t > 0 ? (64u << 20) / (t * 1e3) : 0.0);
    if (t > 0 && t < best_t) best_t = t, best_chunk = chunk;
  }
  // 2. Kernel-path blocks, judged at 16 KiB (decode) and 256 KiB together.
  std::fprintf(out, "# tune: kernel-path blocks (kernel path forced)\n#   blocks  16KiB(us)  256KiB(us)\n");
  int best_blocks = 0;
  best_t = 1e30;
  for (int blocks : {4, 8, 16, 32}) {
    const tpsConfig_t c = hostConfig(size_t{1} << 30, best_chunk, blocks);
    const double a = timeHost(g, c, 16u << 10), b = timeHost(g, c, 256u << 10);
    std::fprintf(out, "#   %6d %10.1f %11.1f\n", blocks, a, b);
    if (a > 0 && b > 0 && a + b < best_t) best_t = a + b, best_blocks = blocks;
  }
  // 3. Crossover: the smallest size from which the copy-engine path wins at every larger size.
  std::fprintf(out, "# tune: kernel path vs copy-engine path\n#   size(B)   kernel(us)   copy(us)\n");
  std::vector<std::pair<size_t, bool>> copy_wins;
  for (size_t bytes = 64u << 10; bytes <= (64u << 20); bytes *= 2) {
    const double k = timeHost(g, hostConfig(size_t{1} << 30, best_chunk, best_blocks), bytes);
    const double c = timeHost(g, hostConfig(1, best_chunk, best_blocks), bytes);
    std::fprintf(out, "#   %9zu %11.1f %10.1f\n", bytes, k, c);
    copy_wins.push_back({bytes, c > 0 && (k < 0 || c < k)});
  }
  size_t threshold = size_t{1} << 30;
  for (auto it = copy_wins.rbegin(); it != copy_wins.rend() && it->second; ++it) threshold = it->first;
  if (best_chunk == 0 || best_blocks == 0) {
    std::fprintf(stderr, "tpscope: error: tuning measurements failed (see the table above)\n");
    return 1;
  }
  result->host_copy_threshold = threshold;
  result->host_chunk_bytes = best_chunk;
  result->host_blocks = best_blocks;
  result->path = detail::tuneFilePath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(result->path).parent_path(), ec);
  nlohmann::json j = {{"host_copy_threshold", threshold}, {"host_chunk_bytes", best_chunk},
                      {"host_blocks", best_blocks},       {"pinned_d2h_gbps", d2h},
                      {"pinned_h2d_gbps", h2d},           {"devices", devices}};
  std::ofstream f(result->path);
  if (!(f << j.dump(2) << "\n")) {
    std::fprintf(stderr, "tpscope: error: cannot write the tuning file %s\n", result->path.c_str());
    return 1;
  }
  std::fprintf(out, "# tune: wrote %s: host_copy_threshold %zu, host_chunk_bytes %zu, host_blocks %d\n",
               result->path.c_str(), threshold, best_chunk, best_blocks);
  return 0;
}

}  // namespace tpscope::cli
