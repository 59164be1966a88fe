// SPDX-License-Identifier: Apache-2.0
// meter_accuracy - how far to trust `tpscope meter`, measured on the box it runs on.
//
//   1. Accuracy: 1 GiB D2H, H2D and GPU0->GPU1 copies, the same 1 GiB moved GPU0->GPU1 by the SMs
//      (a kernel on GPU0 storing into GPU1's memory, then one on GPU1 loading from GPU0's: what the
//      p2p AllReduce kernels do), and thousands of 8-64 KiB copies, each in a window with idle
//      guards; meter bytes / payload per GPU and counter over --reps repetitions (median [min - max]),
//      with the dmon method's figure (its mean MB/s x window length) beside.
//   2. Refresh: how often the counters really change while copies stream (read as fast as possible).
//   3. Cadence: the achieved read period per GPU and counter group (PCIe, NVLink: one thread each),
//      with NVLink on and off, one NVLink call per link or all links in one call, at the default
//      period and as fast as the driver allows; the cost of one read; whether NVLink reads stall PCIe.
//   4. Overhead: a launch-bound loop of empty kernels with no meter, the default meter and the
//      fastest meter, interleaved, --reps times; the slowdown of the median (target < 2 %).
//   5. The meter's own traffic: idle GPUs under the default meter (period adapting, calibrated) and
//      under fixed periods, calibrated and not; counted, own and net MB/s per counter, and the
//      calibrated bytes per read.
//   6. Wraps: a --stream-s stream of 1 GiB D2H copies at full rate under the default meter: the gaps
//      that could hide a 32-bit wrap (must be 0) and meter bytes / payload over the whole stream.
// Prints a table ('#' lines are comments) and writes JSON to --json. Timer: CLOCK_MONOTONIC.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/cuda_raii.h"
#include "meter/meter.h"
#include "meter/record.h"
#include "nvml/nvml_loader.h"

namespace tpscope::bench {
cudaError_t launchEmptyKernels(cudaStream_t stream, int count);
cudaError_t launchCopy16(const void* src, void* dst, size_t bytes, cudaStream_t stream);
}  // namespace tpscope::bench

namespace {

using namespace tpscope;
using nlohmann::json;

struct Args {
  int reps = 5;
  std::string json_path = "meter_accuracy.json";
  int64_t dmon_period_ms = 0;
  int small_copies = 4000;
  int launches = 20000;
  int guard_ms = 50;
  int stream_s = 30;
  std::string sections = "accuracy,cadence,overhead,own,wrap";
};

struct Case {
  std::string name;
  double payload = 0;
  std::vector<std::pair<int, MeterCounter>> carriers;  // (gpu position, counter) that should carry it
  std::function<void()> run;
};

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "meter_accuracy: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

MeterWindow measure(Meter& m, const std::string& name, const std::function<void()>& work, int guard_ms) {
  m.begin(name);
  std::this_thread::sleep_for(std::chrono::milliseconds(guard_ms));
  work();
  std::this_thread::sleep_for(std::chrono::milliseconds(guard_ms));
  m.end(name);
  for (int i = 0; i < 2000; ++i) {
    std::vector<MeterWindow> ws = m.windows();
    if (ws.back().complete) return ws.back();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return m.windows().back();
}

std::string spreadText(const std::optional<MeterSpread>& s, const char* spec = "{:.3f}") {
  if (!s) return "N/A";
  return fmt::format(fmt::runtime(std::string(spec) + " [" + spec + " - " + spec + "]"), s->median, s->min, s->max);
}

json spreadJson(const std::optional<MeterSpread>& s) {
  if (!s) return nullptr;
  return {{"median", s->median}, {"min", s->min}, {"max", s->max}, {"n", s->n}};
}

std::unique_ptr<Meter> startMeter(const MeterOptions& o) {
  std::unique_ptr<Meter> m;
  std::string reason;
  if (Meter::start(o, &m, &reason) != tpsSuccess) {
    std::fprintf(stderr, "meter_accuracy: cannot start the meter: %s\n", reason.c_str());
    std::exit(1);
  }
  return m;
}

// 2. How fast the counters really change: GPU 0 read as fast as the driver allows while copies
// stream. A read "changed" when its value differs from the read before; the interval between
// changes, not the read period, is the meter's real resolution.
json refresh(int ngpu, const std::function<void()>& d2h, const std::function<void()>& peer) {
  MeterOptions o;
  for (int g = 0; g < ngpu; ++g) o.devices.push_back(g);
  o.period_us = 100;
  std::unique_ptr<Meter> m = startMeter(o);
  const int64_t t0 = Meter::now();
  d2h();
  const int64_t t1 = Meter::now();
  if (peer) peer();
  const int64_t t2 = Meter::now();
  m->stop();
  const std::vector<MeterSample> all = m->samples();
  struct Span {
    const char* what;
    MeterCounter counter;
    int64_t a, b;
  } spans[] = {{"pcie_tx during D2H", MeterCounter::kPcieTx, t0, t1},
               {"nvlink_tx during P2P", MeterCounter::kNvlinkTx, t1, t2}};
  std::printf(
      "\n# 2. Counter refresh: GPU 0 read as fast as possible while copies stream; 'changed' = the value\n"
      "#     differs from the read before. The interval between changes is the real resolution.\n");
  std::printf("#%-24s %9s %7s %9s %16s %16s\n", "counter", "busy(ms)", "reads", "changed", "change p50(ms)",
              "change p90(ms)");
  json out = json::array();
  for (const Span& sp : spans) {
    if (sp.b <= sp.a || !m->gpus()[0].supported[static_cast<int>(sp.counter)]) continue;
    const int c = static_cast<int>(sp.counter);
    int reads = 0, changed = 0;
    std::optional<uint64_t> prev;
    int64_t last_change = 0;
    std::vector<double> gaps;
    for (const MeterSample& x : all) {
      if (x.gpu != 0 || !x.bytes[c] || x.t_ns[c] < sp.a || x.t_ns[c] > sp.b) continue;
      ++reads;
      if (prev && *x.bytes[c] != *prev) {
        ++changed;
        if (last_change) gaps.push_back((x.t_ns[c] - last_change) * 1e-6);
        last_change = x.t_ns[c];
      }
      prev = x.bytes[c];
    }
    std::sort(gaps.begin(), gaps.end());
    auto pct = [&](double p) { return gaps.empty() ? 0.0 : gaps[static_cast<size_t>(p * (gaps.size() - 1))]; };
    std::printf(" %-24s %9.1f %7d %8.1f%% %16.3f %16.3f\n", sp.what, (sp.b - sp.a) * 1e-6, reads,
                reads > 1 ? 100.0 * changed / (reads - 1) : 0.0, pct(0.5), pct(0.9));
    out.push_back({{"what", sp.what},
                   {"busy_ms", (sp.b - sp.a) * 1e-6},
                   {"reads", reads},
                   {"changed", changed},
                   {"change_interval_p50_ms", pct(0.5)},
                   {"change_interval_p90_ms", pct(0.9)}});
  }
  return out;
}

bool enablePeer(int from, int to) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) return false;
  DeviceGuard on(from);
  const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
  (void)cudaGetLastError();
  return e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
}

// 1. Accuracy.
json accuracy(const Args& a, int ngpu, bool peer, json* refresh_out) {
  const size_t kBig = size_t{1} << 30;
  DeviceBuffer dev0, dev1;
  PinnedBuffer host;
  Stream s0;
  if (DeviceBuffer::create(0, kBig, &dev0) != tpsSuccess || PinnedBuffer::create(kBig, &host) != tpsSuccess ||
      Stream::create(0, &s0) != tpsSuccess || (peer && DeviceBuffer::create(1, kBig, &dev1) != tpsSuccess)) {
    std::fprintf(stderr, "meter_accuracy: cannot allocate 1 GiB buffers\n");
    std::exit(1);
  }
  // Small copies: sizes cycle 8, 16, 32, 64 KiB through the buffers.
  const size_t kSizes[] = {8 << 10, 16 << 10, 32 << 10, 64 << 10};
  double small_payload = 0;
  for (int i = 0; i < a.small_copies; ++i) small_payload += kSizes[i % 4];
  auto small = [&](cudaMemcpyKind kind) {
    size_t off = 0;
    for (int i = 0; i < a.small_copies; ++i) {
      const size_t n = kSizes[i % 4];
      if (off + n > kBig) off = 0;
      char* d = dev0.as<char>() + off;
      char* h = static_cast<char*>(host.host()) + off;
      CUDA_OK(kind == cudaMemcpyDeviceToHost ? cudaMemcpyAsync(h, d, n, kind, s0.get())
                                             : cudaMemcpyAsync(d, h, n, kind, s0.get()));
      off += n;
    }
    CUDA_OK(cudaStreamSynchronize(s0.get()));
  };
  std::vector<Case> cases;
  cases.push_back({"d2h 1GiB", double(kBig), {{0, MeterCounter::kPcieTx}}, [&] {
                     CUDA_OK(cudaMemcpyAsync(host.host(), dev0.get(), kBig, cudaMemcpyDeviceToHost, s0.get()));
                     CUDA_OK(cudaStreamSynchronize(s0.get()));
                   }});
  cases.push_back({"h2d 1GiB", double(kBig), {{0, MeterCounter::kPcieRx}}, [&] {
                     CUDA_OK(cudaMemcpyAsync(dev0.get(), host.host(), kBig, cudaMemcpyHostToDevice, s0.get()));
                     CUDA_OK(cudaStreamSynchronize(s0.get()));
                   }});
  if (peer)
    cases.push_back({"p2p 1GiB 0->1", double(kBig), {{0, MeterCounter::kNvlinkTx}, {1, MeterCounter::kNvlinkRx}}, [&] {
                       CUDA_OK(cudaMemcpyPeerAsync(dev1.get(), 1, dev0.get(), 0, kBig, s0.get()));
                       CUDA_OK(cudaStreamSynchronize(s0.get()));
                     }});
  // The SMs' own peer traffic (what the p2p AllReduce moves): GPU0's kernel stores into GPU1's
  // memory, then GPU1's kernel loads from GPU0's. Needs peer access both ways.
  Stream s1;
  const bool sm_peer = peer && Stream::create(1, &s1) == tpsSuccess && enablePeer(0, 1) && enablePeer(1, 0);
  if (sm_peer) {
    cases.push_back(
        {"sm store 1GiB 0->1", double(kBig), {{0, MeterCounter::kNvlinkTx}, {1, MeterCounter::kNvlinkRx}}, [&] {
           DeviceGuard on(0);
           CUDA_OK(bench::launchCopy16(dev0.get(), dev1.get(), kBig, s0.get()));
         }});
    cases.push_back(
        {"sm load 1GiB 0->1", double(kBig), {{0, MeterCounter::kNvlinkTx}, {1, MeterCounter::kNvlinkRx}}, [&] {
           DeviceGuard on(1);
           CUDA_OK(bench::launchCopy16(dev0.get(), dev1.get(), kBig, s1.get()));
         }});
  }
  const std::string small_name = fmt::format("{}x8-64KiB", a.small_copies);
  cases.push_back(
      {"d2h " + small_name, small_payload, {{0, MeterCounter::kPcieTx}}, [&] { small(cudaMemcpyDeviceToHost); }});
  cases.push_back(
      {"h2d " + small_name, small_payload, {{0, MeterCounter::kPcieRx}}, [&] { small(cudaMemcpyHostToDevice); }});
  for (Case& c : cases) c.run();  // warm-up: first-touch costs stay out of the windows

  MeterOptions o;
  for (int g = 0; g < ngpu; ++g) o.devices.push_back(g);
  o.sources = {"nvml", "dmon"};
  o.dmon_period_ms = a.dmon_period_ms;
  std::unique_ptr<Meter> m = startMeter(o);
  std::vector<std::vector<MeterWindow>> windows(cases.size());
  for (int rep = 0; rep < a.reps; ++rep)
    for (size_t i = 0; i < cases.size(); ++i)
      windows[i].push_back(measure(*m, cases[i].name, cases[i].run, a.guard_ms));
  m->stop();

  std::printf(
      "# 1. Accuracy: meter bytes / payload, median [min - max] over %d repetitions; each copy sits in a\n"
      "#    window with %d ms idle guards. dmon = the dmon method's mean MB/s x window length / payload\n"
      "#    (dmon period %lld ms; 'reps' = repetitions in which it took any reading inside the window).\n"
      "#    Rows: the counters that should carry the copy (*), and any other with >= 1 %% of the payload.\n",
      a.reps, a.guard_ms, static_cast<long long>(a.dmon_period_ms));
  std::printf("#%-22s %14s %4s  %-10s %-28s %-28s %s\n", "case", "payload(B)", "gpu", "counter", "meter/payload",
              "dmon/payload", "reps");
  json out = json::array();
  const std::vector<MeterGpu>& gpus = m->gpus();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    for (int g = 0; g < ngpu; ++g) {
      for (int k = 0; k < 4; ++k) {
        const MeterCounter mc = static_cast<MeterCounter>(k);
        if (!gpus[g].supported[k]) continue;
        std::vector<std::optional<double>> r, d;
        int dmon_reps = 0;
        for (const MeterWindow& w : windows[i]) {
          const MeterCell& x = w.cells[g][k];
          r.push_back(x.bytes ? std::optional<double>(*x.bytes / c.payload) : std::nullopt);
          if (const MeterCell::Beside* dm = x.from("dmon"); dm && dm->figure.mean_mbps) {
            ++dmon_reps;
            d.push_back(*dm->figure.mean_mbps * 1e6 * (w.end_ns - w.start_ns) * 1e-9 / c.payload);
          }
        }
        const bool carrier = std::find(c.carriers.begin(), c.carriers.end(), std::make_pair(g, mc)) != c.carriers.end();
        std::optional<MeterSpread> rs = meterSpread(r), ds = meterSpread(d);
        json ratios = json::array();
        for (const auto& x : r) ratios.push_back(x ? json(*x) : json(nullptr));
        json row = {{"case", c.name},        {"payload_bytes", c.payload},
                    {"gpu", gpus[g].index},  {"counter", meterCounterName(mc)},
                    {"carrier", carrier},    {"ratio", spreadJson(rs)},
                    {"ratios", ratios},      {"dmon_ratio", spreadJson(ds)},
                    {"dmon_reps", dmon_reps}};
        out.push_back(row);
        if (!carrier && (!rs || rs->max < 0.01)) continue;
        std::printf(" %-22s %14.0f %4d  %-10s %-28s %-28s %s\n", (c.name + (carrier ? " *" : "")).c_str(), c.payload,
                    gpus[g].index, meterCounterName(mc), spreadText(rs).c_str(),
                    isPcie(mc) ? spreadText(ds).c_str() : "",
                    isPcie(mc) ? fmt::format("{}/{}", dmon_reps, a.reps).c_str() : "");
      }
    }
  }
  // Does the dmon thread's blocking call hold up the counter reads? Their cadence during the runs says.
  for (const MeterCadence& k : m->cadence())
    std::printf(
        "# %s reads of GPU %d during these runs (dmon method beside): period p50 %.3f ms, p99 %.3f ms, "
        "max %.3f ms; read %.3f ms; wrap gaps %lld\n",
        meterGroupName(k.group), gpus[k.gpu].index, k.period_p50_ms, k.period_p99_ms, k.period_max_ms,
        k.read_cost_mean_ms, static_cast<long long>(k.wrap_gaps));
  // Streams of copies for the refresh measurement (section 2): ~0.8 s of D2H, ~0.3 s of peer.
  auto d2h_stream = [&] {
    for (int i = 0; i < 40; ++i)
      CUDA_OK(cudaMemcpyAsync(host.host(), dev0.get(), kBig, cudaMemcpyDeviceToHost, s0.get()));
    CUDA_OK(cudaStreamSynchronize(s0.get()));
  };
  auto peer_stream = [&] {
    for (int i = 0; i < 100; ++i) CUDA_OK(cudaMemcpyPeerAsync(dev1.get(), 1, dev0.get(), 0, kBig, s0.get()));
    CUDA_OK(cudaStreamSynchronize(s0.get()));
  };
  *refresh_out = refresh(ngpu, d2h_stream, peer ? std::function<void()>(peer_stream) : std::function<void()>());
  return out;
}

// 3. Cadence and the cost of one read, per counter group (each group has its own thread per GPU).
// The question beside the figures: does an NVLink read (a slow one: docs/METHOD.md section 2) hold up
// the PCIe thread of the same GPU, e.g. through a lock inside NVML? If it does, PCIe's p99 period with NVLink read
// beside it shows gaps of the NVLink call's length, and splitting the NVLink read into one call
// per link should shorten them. Reported as measured, whichever way it comes out.
json cadence(int ngpu) {
  struct Config {
    const char* name;
    int64_t period_us;
    bool nvlink;
    int links_per_call;
  } configs[] = {{"pcie only", 0, false, 1},
                 {"pcie + nvlink 1 link/call", 0, true, 1},
                 {"pcie + nvlink all links/call", 0, true, 0},
                 {"pcie only, fastest", 100, false, 1},
                 {"pcie + nvlink 1/call, fastest", 100, true, 1}};
  std::printf(
      "\n# 3. Cadence: %d GPU(s), each counter group read by its own thread per GPU, 2 s idle per config.\n"
      "#    period = time between the starts of one thread's reads; read = one read's cost (t_after - t_before).\n"
      "#    PCIe runs at the target period; NVLink back to back when its read is slower (links/call: NVML\n"
      "#    calls per NVLink read). Default config: period 2 ms, NVLink 1 link/call.\n",
      ngpu);
  std::printf("#%-30s %4s %-7s %9s %9s %9s %9s %9s %11s %11s %7s %6s\n", "config", "gpu", "group", "target", "mean",
              "p50", "p99", "max", "read mean", "read p99", "reads", "drops");
  json out = json::array();
  std::map<std::string, double> pcie_p99;  // config -> worst PCIe p99 over the GPUs
  for (const Config& c : configs) {
    MeterOptions o;
    for (int g = 0; g < ngpu; ++g) o.devices.push_back(g);
    o.period_us = c.period_us;
    o.nvlink = c.nvlink;
    o.nvlink_links_per_call = c.links_per_call;
    std::unique_ptr<Meter> m = startMeter(o);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    m->stop();
    for (const MeterCadence& k : m->cadence()) {
      std::printf(" %-30s %4d %-7s %7.3fms %7.3fms %7.3fms %7.3fms %7.3fms %9.3fms %9.3fms %7lld %6lld\n", c.name,
                  m->gpus()[k.gpu].index, meterGroupName(k.group), k.period_target_ms, k.period_mean_ms,
                  k.period_p50_ms, k.period_p99_ms, k.period_max_ms, k.read_cost_mean_ms, k.read_cost_p99_ms,
                  static_cast<long long>(k.reads), static_cast<long long>(k.dropped));
      json j = toJson(k, m->gpus());
      j["config"] = c.name;
      j["nvlink_links"] = m->gpus()[k.gpu].nvlink_links;
      j["nvlink_links_per_call"] = c.nvlink ? json(c.links_per_call) : json(nullptr);
      out.push_back(j);
      if (k.group == MeterGroup::kPcie) pcie_p99[c.name] = std::max(pcie_p99[c.name], k.period_p99_ms);
    }
  }
  // The verdict on the question above, from the default period's rows.
  const double off = pcie_p99["pcie only"];
  for (const char* with : {"pcie + nvlink 1 link/call", "pcie + nvlink all links/call"}) {
    const double on = pcie_p99[with];
    const bool stalls = on > 2 * off && on - off > 1.0;
    std::printf("# PCIe p99 period with NVLink read beside it (%s): %.3f ms, without: %.3f ms -> %s\n", with, on, off,
                stalls ? "NVLink reads STALL the PCIe thread (a shared lock in the driver?)"
                       : "NVLink reads do not stall the PCIe thread");
  }
  return out;
}

// 4. Overhead on a launch-bound loop.
json overhead(const Args& a, int ngpu) {
  Stream s;
  if (Stream::create(0, &s) != tpsSuccess) std::exit(1);
  CUDA_OK(bench::launchEmptyKernels(s.get(), 1000));  // warm-up
  auto timeLoop = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    CUDA_OK(bench::launchEmptyKernels(s.get(), a.launches));
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / a.launches;
  };
  MeterOptions def, fast;
  for (int g = 0; g < ngpu; ++g) def.devices.push_back(g);
  fast = def;
  fast.period_us = 100;
  const char* names[] = {"no meter", "meter, default period", "meter, fastest"};
  std::vector<std::optional<double>> us[3];
  for (int rep = 0; rep < a.reps; ++rep) {
    us[0].push_back(timeLoop());
    for (int k = 1; k < 3; ++k) {
      std::unique_ptr<Meter> m = startMeter(k == 1 ? def : fast);
      us[k].push_back(timeLoop());
      m->stop();
    }
  }
  std::printf(
      "\n# 4. Overhead: %d empty-kernel launches on GPU 0 then one sync, host clock; median [min - max] of %d\n"
      "#    interleaved repetitions; the meter reads %d GPU(s): PCIe at the period and NVLink back to back,\n"
      "#    each on its own thread per GPU.\n",
      a.launches, a.reps, ngpu);
  std::printf("#%-24s %-34s %10s\n", "config", "us per launch", "slowdown");
  json out = json::array();
  const double base = meterSpread(us[0])->median;
  for (int k = 0; k < 3; ++k) {
    std::optional<MeterSpread> sp = meterSpread(us[k]);
    const double slow = 100 * (sp->median / base - 1);
    std::printf(" %-24s %-34s %9.2f%%\n", names[k], spreadText(sp, "{:.3f}").c_str(), slow);
    out.push_back({{"config", names[k]}, {"us_per_launch", spreadJson(sp)}, {"slowdown_pct", slow}});
  }
  return out;
}

// 5. The meter's own traffic on idle GPUs, per configuration.
json ownTraffic(int ngpu, int idle_ms) {
  struct Config {
    const char* name;
    int64_t period_us, idle_period_us;
    bool calibrate;
    bool dmon;  // the dmon method beside the counters
  } configs[] = {{"default (2 ms busy / 25 ms quiet)", 0, 0, true, false},
                 {"default + dmon method (1 s)", 0, 0, true, true},
                 {"fixed 2 ms, not calibrated", 2000, 2000, false, false},
                 {"fixed 2 ms, calibrated", 2000, 2000, true, false},
                 {"fixed 50 ms, not calibrated", 50000, 50000, false, false}};
  std::printf(
      "\n# 5. The meter's own traffic: %d GPU(s) idle for %d ms per config, each config without the NVLink\n"
      "#    thread and, where the GPUs have NVLink links, with it (\"+ NVLink\"; its NVLink counters beside).\n"
      "#    counted = the counters' MB/s; own = the meter's reads x the calibrated bytes per read (PCIe);\n"
      "#    net = counted - own (what every report prints).\n",
      ngpu, idle_ms);
  std::printf("#%-42s %4s %-9s %10s %10s %10s %8s %16s\n", "config", "gpu", "counter", "counted", "own", "net", "reads",
              "bytes/read");
  json out = json::array();
  bool has_nvlink = true;  // until a meter with the NVLink thread finds no links
  for (const Config& c : configs)
    for (bool nvlink : {false, true}) {
      if (nvlink && !has_nvlink) continue;
      MeterOptions o;
      for (int g = 0; g < ngpu; ++g) o.devices.push_back(g);
      o.period_us = c.period_us;
      o.idle_period_us = c.idle_period_us;
      o.calibrate = c.calibrate;
      o.nvlink = nvlink;
      if (c.dmon) o.sources = {"nvml", "dmon"};
      o.dmon_period_ms = 1000;
      std::unique_ptr<Meter> m = startMeter(o);
      if (nvlink) {
        has_nvlink = false;
        for (const MeterGpu& g : m->gpus()) has_nvlink = has_nvlink || g.nvlink_links > 0;
        if (!has_nvlink) {
          m->stop();
          std::printf("#   no NVLink links on these GPUs: the configs run without the NVLink thread only\n");
          continue;
        }
      }
      const std::string name = std::string(c.name) + (nvlink ? " + NVLink" : "");
      m->begin("idle");
      std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
      m->end("idle");
      m->stop();
      const MeterWindow w = m->windows().back();
      const MeterCalibration& cal = m->calibration();
      const double dur = (w.end_ns - w.start_ns) * 1e-9;
      for (int g = 0; g < ngpu; ++g) {
        std::vector<MeterCounter> counters{MeterCounter::kPcieRx, MeterCounter::kPcieTx};
        if (nvlink) counters.insert(counters.end(), {MeterCounter::kNvlinkRx, MeterCounter::kNvlinkTx});
        for (MeterCounter mc : counters) {
          const int k = static_cast<int>(mc);
          const MeterCell& x = w.cells[g][k];
          const std::optional<double> counted =
              x.counted_bytes ? std::optional<double>(*x.counted_bytes / dur / 1e6) : std::nullopt;
          const std::optional<double> own =
              x.own_bytes ? std::optional<double>(*x.own_bytes / dur / 1e6) : std::nullopt;
          std::optional<double> per_read;
          if (cal.calibrated && isPcie(mc)) per_read = cal.gpus[g].cost[0].bytes[k];
          auto f = [](const std::optional<double>& v, const char* spec) {
            return v ? fmt::format(fmt::runtime(spec), *v) : std::string("N/A");
          };
          std::printf(" %-42s %4d %-9s %10s %10s %10s %8d %16s\n", name.c_str(), m->gpus()[g].index,
                      meterCounterName(mc), f(counted, "{:.2f}").c_str(), f(own, "{:.2f}").c_str(),
                      f(x.mean_mbps, "{:.2f}").c_str(), x.samples,
                      per_read ? fmt::format("{:.0f} [{:.0f}-{:.0f}]", *per_read, *cal.gpus[g].cost[0].low[k],
                                             *cal.gpus[g].cost[0].high[k])
                                     .c_str()
                               : "N/A");
          out.push_back({{"config", c.name},
                         {"nvlink_thread", nvlink},
                         {"gpu", m->gpus()[g].index},
                         {"counter", meterCounterName(mc)},
                         {"counted_mbps", counted ? json(*counted) : json(nullptr)},
                         {"own_mbps", own ? json(*own) : json(nullptr)},
                         {"net_mbps", x.mean_mbps ? json(*x.mean_mbps) : json(nullptr)},
                         {"reads", x.samples},
                         {"options", toJson(m->options())},
                         {"calibration", toJson(cal, m->gpus())}});
        }
      }
      if (!cal.calibrated && c.calibrate) std::printf("#   %s: %s\n", name.c_str(), cal.note.c_str());
      for (int g = 0; g < ngpu && cal.calibrated; ++g) {
        const MeterReadCost& d = cal.gpus[g].cost[static_cast<int>(MeterReadKind::kDmon)];
        const int rx = static_cast<int>(MeterCounter::kPcieRx), tx = static_cast<int>(MeterCounter::kPcieTx);
        if (d.reads > 0 && d.bytes[rx] && d.bytes[tx])
          std::printf("#   GPU %d: one dmon-method call (20 ms throughput snapshot) adds %.0f B rx, %.0f B tx\n",
                      m->gpus()[g].index, *d.bytes[rx], *d.bytes[tx]);
      }
    }
  return out;
}

// 6. A long stream of D2H copies at full rate under the default meter: no gap may hide a wrap.
json wrapCheck(int stream_s) {
  const size_t kBig = size_t{1} << 30;
  DeviceBuffer dev0;
  PinnedBuffer host;
  Stream s0;
  if (DeviceBuffer::create(0, kBig, &dev0) != tpsSuccess || PinnedBuffer::create(kBig, &host) != tpsSuccess ||
      Stream::create(0, &s0) != tpsSuccess) {
    std::fprintf(stderr, "meter_accuracy: cannot allocate 1 GiB buffers\n");
    std::exit(1);
  }
  CUDA_OK(cudaMemcpyAsync(host.host(), dev0.get(), kBig, cudaMemcpyDeviceToHost, s0.get()));
  CUDA_OK(cudaStreamSynchronize(s0.get()));
  MeterOptions o;
  o.devices = {0};
  o.nvlink = false;
  std::unique_ptr<Meter> m = startMeter(o);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // quiet first: the meter on its idle period
  m->begin("stream");
  int copies = 0;
  const int64_t until = Meter::now() + int64_t{stream_s} * 1000000000;
  while (Meter::now() < until) {
    for (int i = 0; i < 10; ++i)
      CUDA_OK(cudaMemcpyAsync(host.host(), dev0.get(), kBig, cudaMemcpyDeviceToHost, s0.get()));
    copies += 10;
    CUDA_OK(cudaStreamSynchronize(s0.get()));
  }
  m->end("stream");
  m->stop();
  const MeterWindow w = m->windows().back();
  const MeterCell& tx = w.cells[0][static_cast<int>(MeterCounter::kPcieTx)];
  const double payload = double(copies) * kBig, dur = (w.end_ns - w.start_ns) * 1e-9;
  const MeterCadence k = m->cadence().at(0);
  std::printf(
      "\n# 6. Wraps: %d x 1 GiB D2H copies back to back for %.1f s under the default meter (%.1f GB/s; the 32-bit\n"
      "#    counter wraps every %.0f ms at that rate).\n",
      copies, dur, payload / dur / 1e9, 4294967296.0 / (payload / dur) * 1e3);
  std::printf(
      "# pcie_tx bytes / payload %.4f; reads %lld, period p50 %.2f ms, p99 %.2f ms, max %.2f ms; wrap gaps %lld\n",
      tx.bytes ? *tx.bytes / payload : 0.0, static_cast<long long>(k.reads), k.period_p50_ms, k.period_p99_ms,
      k.period_max_ms, static_cast<long long>(k.wrap_gaps));
  return {{"copies", copies},
          {"seconds", dur},
          {"payload_bytes", payload},
          {"pcie_tx_ratio", tx.bytes ? json(*tx.bytes / payload) : json(nullptr)},
          {"cadence", toJson(k, m->gpus())}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"meter_accuracy: meter bytes against known payloads, cadence, read cost and overhead"};
  app.add_option("--reps", a.reps, "Repetitions per case")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--json", a.json_path, "Where to write the JSON record")->capture_default_str();
  app.add_option("--dmon-period-ms", a.dmon_period_ms, "dmon method period (0: back to back; nvidia-smi uses 1000)")
      ->capture_default_str();
  app.add_option("--small-copies", a.small_copies, "Copies in the small-message case")->capture_default_str();
  app.add_option("--launches", a.launches, "Kernel launches per overhead repetition")->capture_default_str();
  app.add_option("--stream-s", a.stream_s, "Seconds of back-to-back copies in the wrap check")->capture_default_str();
  app.add_option("--sections", a.sections, "Sections to run: accuracy,cadence,overhead,own,wrap")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::fprintf(stderr, "meter_accuracy: no CUDA GPU visible\n");
    return 1;
  }
  const int ngpu = std::min(count, 2);
  int peer = 0;
  if (ngpu == 2) CUDA_OK(cudaDeviceCanAccessPeer(&peer, 0, 1));
  if (peer) {
    DeviceGuard g(0);
    cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) peer = 0;
    (void)cudaGetLastError();
  }
  std::vector<std::string> names;
  for (int g = 0; g < ngpu; ++g) {
    cudaDeviceProp p{};
    CUDA_OK(cudaGetDeviceProperties(&p, g));
    names.push_back(p.name);
  }
  std::printf("# meter_accuracy: tpscope %s (%s), %d GPU(s): %s%s, driver %s\n", tpsGetVersion(), tpsGetGitRevision(),
              ngpu, names[0].c_str(), ngpu > 1 ? (", " + names[1]).c_str() : "", nvml::Nvml::driverVersion().c_str());

  json doc;
  doc["context"] = {{"tpscope_version", tpsGetVersion()},
                    {"git_sha", tpsGetGitRevision()},
                    {"argv", std::vector<std::string>(argv, argv + argc)},
                    {"devices", names},
                    {"driver", nvml::Nvml::driverVersion()},
                    {"timer", "CLOCK_MONOTONIC (steady_clock)"},
                    {"reps", a.reps},
                    {"guard_ms", a.guard_ms},
                    {"dmon_period_ms", a.dmon_period_ms},
                    {"peer_copy", peer != 0},
                    {"sections", a.sections}};
  auto wants = [&](const char* name) {
    return ("," + a.sections + ",").find(std::string(",") + name + ",") != std::string::npos;
  };
  json refresh_record;
  if (wants("accuracy")) {
    doc["accuracy"] = accuracy(a, ngpu, peer != 0, &refresh_record);
    doc["refresh"] = refresh_record;
  }
  if (wants("cadence")) doc["cadence"] = cadence(ngpu);
  if (wants("overhead")) doc["overhead"] = overhead(a, ngpu);
  if (wants("own")) doc["own_traffic"] = ownTraffic(ngpu, 3000);
  if (wants("wrap")) doc["wrap"] = wrapCheck(a.stream_s);
  std::ofstream f(a.json_path);
  f << doc.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "meter_accuracy: cannot write %s\n", a.json_path.c_str());
    return 1;
  }
  std::printf("# JSON: %s\n", a.json_path.c_str());
  return 0;
}
