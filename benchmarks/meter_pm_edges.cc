// SPDX-License-Identifier: Apache-2.0
// meter_pm_edges - how well PM sampling's time axis, mapped into the meter's clock, places traffic.
//
// Each repetition moves a block of bytes over PCIe (H2D and D2H alternately, pinned host memory) in
// one of two ways: a copy-engine copy between two marker kernels that stamp %globaltimer, or the SMs
// loading or storing mapped host memory, each block stamping its own first and last access. The
// meter (source pm) records the bytes; pmTrafficEdges (src/meter/pm_edges.h) places the transfer's
// start and stop inside its records.
// The markers' stamps are mapped into the meter's clock by pings through mapped host memory: the host
// reads its clock, writes a flag, a spinning kernel stamps %globaltimer and answers, the host reads
// its clock again; the stamp lies between the two readings, so the tightest of many round trips fixes
// the offset within half that round trip. Mapped before and after the copies, interpolated between.
//
// Edge error = PM's edge - the stamp. The copy starts after the first marker has finished and ends
// before the second starts, so the stream's own gaps (a few us) show as a positive rise error and a
// negative fall error; they bound PM's error from above. The SM kernels' stamps are the traffic's
// own edges (to within one access's latency): their error is PM's.
// Prints a table ('#' lines are comments) and writes JSON to --json. Timer: CLOCK_MONOTONIC.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/cuda_raii.h"
#include "meter/meter.h"
#include "meter/pm_edges.h"
#include "nvml/nvml_loader.h"

namespace tpscope::bench {
cudaError_t launchStamp(unsigned long long* out, cudaStream_t stream);
cudaError_t launchPing(const int* flag, unsigned long long* stamps, int n, cudaStream_t stream);
size_t smSinkWords();
cudaError_t launchSmMove(bool h2d, void* host_mapped, size_t bytes, unsigned* sink, unsigned long long* stamps,
                         cudaStream_t stream);
}  // namespace tpscope::bench

namespace {

using namespace tpscope;
using nlohmann::json;

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "meter_pm_edges: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "meter_pm_edges: %s\n", why.c_str());
  std::exit(1);
}

struct Args {
  std::string intervals = "10,100,1000";
  int reps = 16;
  int copy_mib = 64;
  int pings = 2000;
  int device = 0;
  std::string json_path = "meter_pm_edges.json";
};

// GPU clock -> meter clock at one moment: monotonic = gpu + offset_ns, within +-half_rtt_ns.
struct ClockFit {
  int64_t gpu_ns = 0, offset_ns = 0, half_rtt_ns = 0;
  int pings = 0;
};

ClockFit pingFit(cudaStream_t stream, int pings) {
  int* flag = nullptr;
  unsigned long long* stamps = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  CUDA_OK(
      cudaHostAlloc(reinterpret_cast<void**>(&stamps), sizeof(unsigned long long) * (pings + 1), cudaHostAllocMapped));
  volatile int* vflag = flag;
  volatile unsigned long long* vstamps = stamps;
  *vflag = 0;
  vstamps[0] = 0;
  int* dflag = nullptr;
  unsigned long long* dstamps = nullptr;
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0));
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dstamps), stamps, 0));
  CUDA_OK(bench::launchPing(dflag, dstamps, pings, stream));
  ClockFit best;
  int64_t best_rtt = INT64_MAX;
  for (int i = 1; i <= pings; ++i) {
    const int64_t t0 = Meter::now();
    *vflag = i;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // The kernel answers within microseconds once it runs; a second covers its launch.
    while (vstamps[0] != static_cast<unsigned long long>(i))
      if (Meter::now() - t0 > 1000000000LL) fail(fmt::format("ping {} got no answer within 1 s", i));
    const int64_t t1 = Meter::now();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const auto g = static_cast<int64_t>(vstamps[i]);
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      best.gpu_ns = g;
      best.offset_ns = t0 + (t1 - t0) / 2 - g;
      best.half_rtt_ns = (t1 - t0 + 1) / 2;
    }
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  best.pings = pings;
  CUDA_OK(cudaFreeHost(flag));
  CUDA_OK(cudaFreeHost(stamps));
  return best;
}

// One copy's size at `interval_us`: --copy-mib, or more where a copy would span fewer than about ten
// records at PCIe Gen5 rates (edges are placed by the full rate of the records between them).
size_t copyBytes(const Args& a, int64_t interval_us) {
  const size_t mib = std::max<size_t>(static_cast<size_t>(a.copy_mib), static_cast<size_t>(interval_us / 2));
  return mib << 20;
}

// The offset at GPU time g, linear between the two fits (the clocks drift apart slowly).
int64_t toMeter(int64_t g, const ClockFit& a, const ClockFit& b) {
  const double span = static_cast<double>(b.gpu_ns - a.gpu_ns);
  const double k = span > 0 ? static_cast<double>(g - a.gpu_ns) / span : 0;
  return g + a.offset_ns + static_cast<int64_t>(k * static_cast<double>(b.offset_ns - a.offset_ns));
}

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front(), s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

// How a repetition moves its bytes: a copy-engine copy between two marker kernels (the markers
// bracket the copy, a few us away from it), or the SMs loading or storing mapped host memory with
// each block stamping its own first and last access (the stamps are the traffic's edges).
enum class Mover { kCopy, kSm };
const char* moverName(Mover m) { return m == Mover::kCopy ? "copy" : "sm"; }

json runInterval(const Args& a, int64_t interval_us, void* host, void* host_mapped, void* dev, unsigned* sink,
                 size_t bytes) {
  MeterOptions o;
  o.devices = {a.device};
  o.sources = {"pm"};
  o.pm_interval_us = interval_us;
  o.nvlink = false;
  std::unique_ptr<Meter> m;
  std::string reason;
  if (Meter::start(o, &m, &reason) != tpsSuccess) fail("the meter did not start: " + reason);
  Stream ping_stream, work_stream;
  if (Stream::create(a.device, &ping_stream) != tpsSuccess || Stream::create(a.device, &work_stream) != tpsSuccess)
    fail("cannot create streams");
  const Mover movers[] = {Mover::kCopy, Mover::kSm};
  const int n = 2 * a.reps;  // a.reps per mover, H2D and D2H alternately
  unsigned long long* marks = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&marks), sizeof(unsigned long long) * 2 * n));
  // Quiet between repetitions: several records, so that each one's records stand alone.
  const auto quiet = std::chrono::microseconds(2000 + 4 * interval_us);
  const ClockFit before = pingFit(ping_stream.get(), a.pings);
  std::this_thread::sleep_for(quiet);
  const cudaStream_t s = work_stream.get();
  for (int r = 0; r < n; ++r) {
    const Mover mover = movers[r / a.reps];
    const bool h2d = r % 2 == 0;
    unsigned long long* mk = marks + 2 * r;
    if (mover == Mover::kCopy) {
      CUDA_OK(bench::launchStamp(mk, s));
      CUDA_OK(cudaMemcpyAsync(h2d ? dev : host, h2d ? host : dev, bytes,
                              h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
      CUDA_OK(bench::launchStamp(mk + 1, s));
    } else {
      CUDA_OK(cudaMemsetAsync(mk, 0xff, sizeof *mk, s));   // first: the lowest stamp wins
      CUDA_OK(cudaMemsetAsync(mk + 1, 0, sizeof *mk, s));  // last: the highest
      CUDA_OK(cudaStreamSynchronize(s));                   // the memsets' own traffic ends before the marks
      CUDA_OK(bench::launchSmMove(h2d, host_mapped, bytes, sink, mk, s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
    std::this_thread::sleep_for(quiet);
  }
  const ClockFit after = pingFit(ping_stream.get(), a.pings);
  // Records complete a decode period after they are taken: wait for the last ones to arrive.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * m->options().pm_decode_ms + 20));
  m->stop();
  const std::vector<MeterRecord> samples = m->records();
  const std::vector<MeterSourceStatus> statuses = m->sourceStatus();
  const MeterSourceStatus status = statuses.empty() ? MeterSourceStatus{} : statuses.front();
  std::vector<unsigned long long> stamp(2 * n);
  CUDA_OK(cudaMemcpy(stamp.data(), marks, sizeof(unsigned long long) * stamp.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(marks));

  json reps = json::array();
  std::vector<double> rise[2][2], fall[2][2], rate[2][2];  // [mover][0 H2D (RX), 1 D2H (TX)]
  int missing = 0;
  const int64_t margin = 2 * interval_us * 1000 + 200000;
  for (int r = 0; r < n; ++r) {
    const int mv = r / a.reps, d = r % 2 == 0 ? 0 : 1;
    const int64_t m0 = toMeter(static_cast<int64_t>(stamp[2 * r]), before, after);
    const int64_t m1 = toMeter(static_cast<int64_t>(stamp[2 * r + 1]), before, after);
    const detail::PmEdges e = detail::pmTrafficEdges(samples, 0, d == 0 ? 1 : 0, m0 - margin, m1 + margin);
    json rec = {{"mover", moverName(movers[mv])}, {"direction", d == 0 ? "h2d" : "d2h"},
                {"marker_start_ns", m0},          {"marker_end_ns", m1},
                {"records", e.records},           {"full_gbps", e.full_bps / 1e9}};
    if (e.rise_ns && e.fall_ns) {
      const double re = (*e.rise_ns - m0) / 1e3, fe = (*e.fall_ns - m1) / 1e3;
      rec["rise_error_us"] = re;
      rec["fall_error_us"] = fe;
      rise[mv][d].push_back(re);
      fall[mv][d].push_back(fe);
      rate[mv][d].push_back(e.full_bps / 1e9);
    } else {
      ++missing;
    }
    reps.push_back(rec);
  }
  json rows = json::array();
  for (int mv = 0; mv < 2; ++mv)
    for (int d = 0; d < 2; ++d) {
      const Spread rs = spread(rise[mv][d]), fs = spread(fall[mv][d]), gs = spread(rate[mv][d]);
      double worst = 0;
      for (double v : rise[mv][d]) worst = std::max(worst, std::abs(v));
      for (double v : fall[mv][d]) worst = std::max(worst, std::abs(v));
      std::printf("| %6lld | %-4s | %s | %3zu | %7.2f [%7.2f, %7.2f] | %7.2f [%7.2f, %7.2f] | %6.2f | %6.1f |\n",
                  static_cast<long long>(interval_us), moverName(movers[mv]), d == 0 ? "h2d (rx)" : "d2h (tx)",
                  rise[mv][d].size(), rs.median, rs.min, rs.max, fs.median, fs.min, fs.max, worst, gs.median);
      rows.push_back({{"mover", moverName(movers[mv])},
                      {"direction", d == 0 ? "h2d" : "d2h"},
                      {"transfers", rise[mv][d].size()},
                      {"rise_error_us", {{"median", rs.median}, {"min", rs.min}, {"max", rs.max}}},
                      {"fall_error_us", {{"median", fs.median}, {"min", fs.min}, {"max", fs.max}}},
                      {"max_abs_error_us", worst},
                      {"full_gbps_median", gs.median}});
    }
  std::printf(
      "# %lld us: %zu MiB per transfer; clock map +-%lld ns before, +-%lld ns after (tightest of %d pings), "
      "drift %+lld ns over %.2f s; %lld records, %lld holes%s%s; %d transfers without edges\n",
      static_cast<long long>(interval_us), bytes >> 20, static_cast<long long>(before.half_rtt_ns),
      static_cast<long long>(after.half_rtt_ns), a.pings, static_cast<long long>(after.offset_ns - before.offset_ns),
      (after.gpu_ns - before.gpu_ns) / 1e9, static_cast<long long>(status.records), static_cast<long long>(status.gaps),
      status.ended.empty() ? "" : ", ended: ", status.ended.c_str(), missing);
  auto fitJson = [](const ClockFit& f) {
    return json{{"gpu_ns", f.gpu_ns}, {"offset_ns", f.offset_ns}, {"half_rtt_ns", f.half_rtt_ns}, {"pings", f.pings}};
  };
  return {{"interval_us", interval_us},
          {"transfer_bytes", bytes},
          {"clock_before", fitJson(before)},
          {"clock_after", fitJson(after)},
          {"pm_records", status.records},
          {"pm_holes", status.gaps},
          {"pm_ended", status.ended},
          {"transfers_without_edges", missing},
          {"rows", rows},
          {"reps", reps}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"meter_pm_edges: PM sampling's traffic edges against marker kernels on the GPU's clock"};
  app.add_option("--intervals-us", a.intervals, "PM sampling intervals to run, comma-separated")->capture_default_str();
  app.add_option("--reps", a.reps, "Transfers per interval and mover (H2D and D2H alternately)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--copy-mib", a.copy_mib, "Size of one transfer, MiB")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--pings", a.pings, "Pings per clock map")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--device", a.device, "CUDA ordinal")->capture_default_str();
  app.add_option("--json", a.json_path, "Where to write the JSON record")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> intervals;
  std::stringstream ss(a.intervals);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      intervals.push_back(std::stoll(item));
    } catch (const std::exception&) {
      fail("--intervals-us: not a number: \"" + item + "\"");
    }
  }

  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || a.device < 0 || a.device >= count)
    fail(fmt::format("no CUDA GPU {} visible", a.device));
  CUDA_OK(cudaSetDevice(a.device));
  cudaDeviceProp p{};
  CUDA_OK(cudaGetDeviceProperties(&p, a.device));
  size_t bytes = 0;
  for (int64_t iv : intervals) bytes = std::max(bytes, copyBytes(a, iv));
  void* host = nullptr;
  void* host_mapped = nullptr;
  void* dev = nullptr;
  unsigned* sink = nullptr;
  CUDA_OK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
  CUDA_OK(cudaHostGetDevicePointer(&host_mapped, host, 0));
  CUDA_OK(cudaMalloc(&dev, bytes));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(unsigned) * bench::smSinkWords()));
  std::memset(host, 1, bytes);
  std::printf("# meter_pm_edges: tpscope %s (%s), GPU %d %s, driver %s; %d transfers per interval and mover\n",
              tpsGetVersion(), tpsGetGitRevision(), a.device, p.name, nvml::Nvml::driverVersion().c_str(), a.reps);
  std::printf(
      "# edge error = PM's edge - the marker's stamp (us); copy: markers bracket the copy (rise > 0 and fall < 0 by "
      "the "
      "stream's own gaps); sm: the kernel stamps its own first and last access\n");
  std::printf(
      "| interval us | mover | direction | transfers | rise error us median [min, max] | fall error us median [min, "
      "max] "
      "| max abs us | GB/s |\n");
  std::printf("| ---: | --- | --- | ---: | --- | --- | ---: | ---: |\n");
  json doc;
  doc["context"] = {{"tpscope_version", tpsGetVersion()},
                    {"git_sha", tpsGetGitRevision()},
                    {"argv", std::vector<std::string>(argv, argv + argc)},
                    {"device", p.name},
                    {"driver", nvml::Nvml::driverVersion()},
                    {"timer", "CLOCK_MONOTONIC; GPU: %globaltimer"},
                    {"reps", a.reps}};
  doc["intervals"] = json::array();
  for (int64_t iv : intervals)
    doc["intervals"].push_back(runInterval(a, iv, host, host_mapped, dev, sink, copyBytes(a, iv)));
  CUDA_OK(cudaFreeHost(host));
  CUDA_OK(cudaFree(dev));
  CUDA_OK(cudaFree(sink));
  std::ofstream f(a.json_path);
  f << doc.dump(2) << "\n";
  if (!f) fail("cannot write " + a.json_path);
  std::printf("# JSON: %s\n", a.json_path.c_str());
  return 0;
}
