// SPDX-License-Identifier: Apache-2.0
// meter.cc - the Meter: one sampler thread per GPU, a dmon thread, a collector, and the window book.
//
// Threads and what they share:
//   sampler[k]  reads GPU k every period into ring_[k] (SPSC, preallocated); never allocates, locks
//               or prints. Reading one GPU per thread keeps each GPU's cadence independent of the
//               others' call cost (~1.4 ms per H200 read with NVLink fields).
//   dmon        (method dmon/both) calls the blocking 20 ms throughput function per GPU and direction
//               every dmon_period_ms, into dmon_ring_.
//   collector   every kCollectMs drains the rings, unwraps the counters and appends to series_
//               under mu_. Allocation happens here, off the sampling path.
//   callers     begin/end/windows/samples take mu_.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/checks.h"
#include "common/log.h"
#include "common/param.h"
#include "meter/control.h"
#include "meter/meter_internal.h"
#include "meter/ring.h"
#include "meter/unwrap.h"
#include "meter/window.h"

TPS_PARAM_INT(MeterPeriodUs, "TPSCOPE_METER_PERIOD_US", tpscope::detail::kDefaultPeriodUs)

namespace tpscope {

namespace {
constexpr size_t kRingSlots = 8192;  // > 1 s of reads at the fastest period, drained every 5 ms
constexpr int kCollectMs = 5;

void sleepUntil(int64_t t_ns) {
  timespec ts{static_cast<time_t>(t_ns / 1000000000), static_cast<long>(t_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void nameThread(const char* name) { pthread_setname_np(pthread_self(), name); }  // <= 15 characters

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}
}  // namespace

struct Meter::Impl {
  MeterOptions options;
  detail::SourceSet src;
  std::vector<std::unique_ptr<detail::SpscRing<detail::Reading>>> rings;
  detail::SpscRing<MeterDmonSample> dmon_ring{1024};
  std::vector<std::thread> threads;  // samplers and dmon
  std::thread collector;
  std::atomic<bool> stop_sampling{false}, stop_collecting{false};
  std::atomic<int> first_reads{0};
  bool stopped = false;

  mutable std::mutex mu;  // guards everything below
  std::vector<detail::Series> series;
  std::vector<MeterDmonSample> dmon;
  std::vector<std::array<detail::Unwrapper, kMeterCounters>> unwrap;
  std::vector<std::array<int64_t, kMeterCounters>> last_t;  // last value time, per GPU and counter
  std::vector<int64_t> wrap_gaps;
  detail::WindowBook book;
  std::vector<detail::ClosedWindow> closed;
  std::vector<QuiesceRecord> quiesces;

  void sample(size_t k) {
    nameThread(("tps-meter-" + std::to_string(k)).c_str());  // shows in top -H, gdb, perf
    detail::CounterReader& reader = *src.counters[k];
    const int64_t period = options.period_us * 1000;
    int64_t next = detail::monotonicNs();
    bool first_done = false;
    for (;;) {
      // acquire pairs with stop()'s release: a read that starts after seeing the flag is later
      // than every window end recorded before stop().
      const bool last = stop_sampling.load(std::memory_order_acquire);
      detail::Reading r;
      reader.read(&r);
      rings[k]->push(r);
      if (!first_done) {
        first_done = true;
        first_reads.fetch_add(1, std::memory_order_release);  // start() waits for every GPU's first read
      }
      if (last) return;
      next += period;
      const int64_t now = detail::monotonicNs();
      if (next < now) next = now;  // a slow read: start again now, do not burst to catch up
      sleepUntil(next);
    }
  }

  void sampleDmon() {
    nameThread("tps-meter-dmon");
    int64_t next = detail::monotonicNs();
    while (!stop_sampling.load(std::memory_order_acquire)) {
      for (size_t k = 0; k < src.dmon.size(); ++k) {
        for (MeterCounter dir : {MeterCounter::kPcieRx, MeterCounter::kPcieTx}) {
          MeterDmonSample d;
          src.dmon[k]->read(dir, &d);
          d.gpu = static_cast<int>(k);
          dmon_ring.push(d);
        }
      }
      next = std::max(next + options.dmon_period_ms * 1000000, detail::monotonicNs());
      // Sleep in short steps so stop() does not wait a whole dmon period.
      while (!stop_sampling.load(std::memory_order_acquire) && detail::monotonicNs() < next)
        sleepUntil(std::min(next, detail::monotonicNs() + 20000000));
    }
  }

  // Moves ring contents into the series. Called with mu held.
  void drainLocked() {
    for (size_t k = 0; k < rings.size(); ++k) {
      const MeterGpu& g = src.gpus[k];
      rings[k]->drain([&](const detail::Reading& r) {
        MeterSample m;
        m.gpu = static_cast<int>(k);
        m.t_before_ns = r.t_before_ns;
        m.t_after_ns = r.t_after_ns;
        m.nvml_timestamp_us = r.nvml_timestamp_us;
        const int64_t mid = r.t_before_ns + (r.t_after_ns - r.t_before_ns) / 2;
        for (int c = 0; c < kMeterCounters; ++c) {
          const bool ok = g.supported[c] && (r.valid & (1u << c));
          // Times must not go backwards per counter (window code binary-searches them).
          int64_t t = std::max(ok ? r.t_ns[c] : mid, last_t[k][c]);
          m.t_ns[c] = t;
          if (!ok) continue;
          const MeterCounter mc = static_cast<MeterCounter>(c);
          // A gap long enough for a 32-bit counter to wrap at the link's ceiling: count it.
          if (isPcie(mc) && last_t[k][c] > 0 && src.counters[k]->widthBits(mc) < 64) {
            const double bytes_per_s = g.pcie_ceiling_mbps.value_or(63015.4) * 1e6;
            if ((t - last_t[k][c]) * 1e-9 * bytes_per_s >= 4294967296.0) ++wrap_gaps[k];
          }
          last_t[k][c] = t;
          m.bytes[c] = unwrap[k][c].push(r.raw[c]);
        }
        series[k].push_back(m);
      });
    }
    dmon_ring.drain([&](const MeterDmonSample& d) { dmon.push_back(d); });
  }

  void collect() {
    nameThread("tps-meter-coll");
    while (!stop_collecting.load(std::memory_order_acquire)) {
      {
        std::lock_guard<std::mutex> lock(mu);
        drainLocked();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(kCollectMs));
    }
  }

  MeterWindow computeLocked(const detail::ClosedWindow& w) const {
    return detail::computeWindow(w.name, w.repetition, w.start_ns, w.end_ns, series, src.gpus, dmon,
                                 options.peak_span_ms);
  }
};

struct MeterFactory {
  static std::unique_ptr<Meter> make(std::unique_ptr<Meter::Impl> impl) {
    return std::unique_ptr<Meter>(new Meter(std::move(impl)));
  }
  static Meter::Impl* impl(Meter& m) { return m.impl_.get(); }
};

Meter::Meter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Meter::~Meter() { stop(); }

int64_t Meter::now() { return detail::monotonicNs(); }

tpsResult_t Meter::start(const MeterOptions& options, std::unique_ptr<Meter>* out, std::string* reason) {
  MeterOptions o = options;
  if (tpsResult_t r = detail::resolveOptions(&o, reason); r != tpsSuccess) return r;
  detail::SourceSet set;
  const char* fake = std::getenv("TPSCOPE_METER_FAKE");
  tpsResult_t r = (fake && std::string(fake) == "1") ? detail::openFakeSources(o, &set, reason)
                                                     : detail::openNvmlSources(o, &set, reason);
  if (r != tpsSuccess) return r;
  return detail::createMeter(o, std::move(set), out, reason);
}

tpsResult_t detail::resolveOptions(MeterOptions* o, std::string* reason) {
  if (o->period_us == 0) o->period_us = tpsParamMeterPeriodUs();
  if (o->period_us < 100 || o->period_us > 50000) {
    *reason = "sampling period " + std::to_string(o->period_us) +
              " us is out of range: use 100-50000 us (longer lets a 32-bit PCIe counter wrap unseen)";
    return tpsInvalidArgument;
  }
  if (o->dmon_period_ms < 0) {
    *reason = "the dmon period must be 0 ms or more";
    return tpsInvalidArgument;
  }
  if (!(o->peak_span_ms >= 0)) {
    *reason = "the peak span must be 0 ms or more";
    return tpsInvalidArgument;
  }
  if (o->nvlink_raw) o->nvlink = true;
  return tpsSuccess;
}

tpsResult_t detail::createMeter(const MeterOptions& options, SourceSet sources, std::unique_ptr<Meter>* out,
                                std::string* reason) {
  auto impl = std::make_unique<Meter::Impl>();
  Meter::Impl& m = *impl;
  m.options = options;
  m.src = std::move(sources);
  const size_t n = m.src.gpus.size();
  m.series.resize(n);
  m.unwrap.resize(n);
  m.last_t.assign(n, {});
  m.wrap_gaps.assign(n, 0);
  for (size_t k = 0; k < m.src.counters.size(); ++k) {
    for (int c = 0; c < kMeterCounters; ++c)
      m.unwrap[k][c] = Unwrapper(m.src.counters[k]->widthBits(static_cast<MeterCounter>(c)));
    m.rings.push_back(std::make_unique<SpscRing<Reading>>(kRingSlots));
    m.series[k].reserve(1 << 14);
  }
  std::unique_ptr<Meter> meter = MeterFactory::make(std::move(impl));
  try {
    Meter::Impl* p = MeterFactory::impl(*meter);
    for (size_t k = 0; k < p->rings.size(); ++k) p->threads.emplace_back([p, k] { p->sample(k); });
    if (!p->src.dmon.empty()) p->threads.emplace_back([p] { p->sampleDmon(); });
    p->collector = std::thread([p] { p->collect(); });
  } catch (const std::system_error& e) {
    *reason = std::string("cannot start the sampler threads: ") + e.what();
    meter->stop();
    return tpsSystemError;
  }
  // Return once every GPU has been read, so a window begun after start() is bracketed by reads.
  Meter::Impl* p = MeterFactory::impl(*meter);
  const int64_t give_up = monotonicNs() + 5000000000;
  while (p->first_reads.load(std::memory_order_acquire) < static_cast<int>(p->rings.size()) && monotonicNs() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  *out = std::move(meter);
  return tpsSuccess;
}

tpsResult_t Meter::begin(const std::string& name) {
  const int64_t t = now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  TPS_EXPECT(!name.empty(), tpsInvalidArgument, "meter: a window needs a name");
  TPS_EXPECT(!impl_->stopped, tpsInvalidUsage, "meter: begin('{}') after stop()", name);
  auto err = impl_->book.begin(name, t);
  TPS_EXPECT(!err, tpsInvalidUsage, "meter: {}", err.value_or(""));
  return tpsSuccess;
}

tpsResult_t Meter::end(const std::string& name) {
  const int64_t t = now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::ClosedWindow w;
  auto err = impl_->book.end(name, t, &w);
  TPS_EXPECT(!err, tpsInvalidUsage, "meter: {}", err.value_or(""));
  impl_->closed.push_back(w);
  return tpsSuccess;
}

tpsResult_t Meter::addWindow(const std::string& name, int64_t start_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::ClosedWindow w;
  auto err = impl_->book.add(name, start_ns, end_ns, &w);
  TPS_EXPECT(!err, tpsInvalidArgument, "meter: {}", err.value_or(""));
  impl_->closed.push_back(w);
  return tpsSuccess;
}

tpsResult_t Meter::quiesce(const QuiesceOptions& opts, QuiesceRecord* out) {
  TPS_EXPECT(opts.idle_ms >= 0 && opts.threshold_mbps >= 0, tpsInvalidArgument, "meter: bad quiesce options");
  TPS_EXPECT(!impl_->stopped && !impl_->rings.empty(), tpsInvalidUsage,
             "meter: quiesce needs a running counter sampler");
  const int64_t start = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(opts.idle_ms));
  const int64_t end = now();
  // Wait (briefly) until every GPU has a read after `end`, so the interval is bracketed.
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->drainLocked();
      bool all = true;
      for (const auto& s : impl_->series) all = all && !s.empty() && s.back().t_before_ns >= end;
      if (all) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::optional<std::vector<unsigned>>> pids;
  if (opts.check_processes && impl_->src.processes)
    for (size_t k = 0; k < impl_->src.gpus.size(); ++k) pids.push_back(impl_->src.processes(static_cast<int>(k)));
  std::lock_guard<std::mutex> lock(impl_->mu);
  MeterWindow idle = impl_->computeLocked({"quiesce", 0, start, end});
  *out = detail::evaluateQuiesce(idle, impl_->src.gpus, opts.threshold_mbps, pids, static_cast<unsigned>(getpid()));
  impl_->quiesces.push_back(*out);
  return tpsSuccess;
}

void Meter::stop() {
  if (!impl_ || impl_->stopped) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopped = true;
    for (const auto& w : impl_->book.closeAll(now())) impl_->closed.push_back(w);
  }
  impl_->stop_sampling.store(true, std::memory_order_release);
  for (std::thread& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->stop_collecting.store(true, std::memory_order_release);
  if (impl_->collector.joinable()) impl_->collector.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();  // the samplers' last reads
}

const std::vector<MeterGpu>& Meter::gpus() const { return impl_->src.gpus; }
const MeterOptions& Meter::options() const { return impl_->options; }

std::vector<MeterWindow> Meter::windows() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  std::vector<MeterWindow> out;
  for (const auto& w : impl_->closed) out.push_back(impl_->computeLocked(w));
  return out;
}

std::vector<MeterSample> Meter::samples() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  std::vector<MeterSample> out;
  for (const auto& s : impl_->series) out.insert(out.end(), s.begin(), s.end());
  return out;
}

std::vector<MeterDmonSample> Meter::dmonSamples() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  return impl_->dmon;
}

std::optional<MeterSample> Meter::latest(int gpu) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  if (gpu < 0 || gpu >= static_cast<int>(impl_->series.size()) || impl_->series[gpu].empty()) return std::nullopt;
  return impl_->series[gpu].back();
}

std::optional<MeterDmonSample> Meter::latestDmon(int gpu, MeterCounter counter) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  for (auto it = impl_->dmon.rbegin(); it != impl_->dmon.rend(); ++it)
    if (it->gpu == gpu && it->counter == counter) return *it;
  return std::nullopt;
}

std::vector<MeterCadence> Meter::cadence() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drainLocked();
  std::vector<MeterCadence> out;
  for (size_t k = 0; k < impl_->rings.size(); ++k) {
    const detail::Series& s = impl_->series[k];
    MeterCadence c;
    c.gpu = static_cast<int>(k);
    c.reads = static_cast<int64_t>(s.size());
    c.period_target_ms = impl_->options.period_us / 1000.0;
    c.dropped = impl_->rings[k]->dropped();
    c.wrap_gaps = impl_->wrap_gaps[k];
    std::vector<double> periods, costs;
    for (size_t i = 0; i < s.size(); ++i) {
      costs.push_back((s[i].t_after_ns - s[i].t_before_ns) * 1e-6);
      if (i > 0) periods.push_back((s[i].t_before_ns - s[i - 1].t_before_ns) * 1e-6);
    }
    if (!periods.empty()) {
      c.period_mean_ms = (s.back().t_before_ns - s.front().t_before_ns) * 1e-6 / periods.size();
      c.period_p50_ms = percentile(periods, 0.5);
      c.period_p99_ms = percentile(periods, 0.99);
      c.period_max_ms = *std::max_element(periods.begin(), periods.end());
    }
    if (!costs.empty()) {
      double sum = 0;
      for (double x : costs) sum += x;
      c.read_cost_mean_ms = sum / costs.size();
      c.read_cost_p99_ms = percentile(costs, 0.99);
    }
    out.push_back(c);
  }
  return out;
}

std::vector<QuiesceRecord> Meter::quiesceRecords() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->quiesces;
}

}  // namespace tpscope
