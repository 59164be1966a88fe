// SPDX-License-Identifier: Apache-2.0
// sampler.cc - sampler, dmon and collector threads; unwrapping into the series; cadence statistics.
#include "meter/sampler.h"

#include <pthread.h>

#include <algorithm>
#include <system_error>

namespace tpscope::detail {

namespace {
constexpr size_t kRingSlots = 8192;  // > 0.8 s of reads at the fastest period; drained every 5 ms
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

Sampler::Sampler(const MeterOptions& options, SourceSet sources) : options_(options), src_(std::move(sources)) {
  const size_t n = src_.gpus.size();
  series_.resize(n);
  unwrap_.resize(n);
  last_t_.assign(n, {});
  wrap_gaps_.assign(n, 0);
  for (size_t k = 0; k < src_.counters.size(); ++k) {
    for (int c = 0; c < kMeterCounters; ++c)
      unwrap_[k][c] = Unwrapper(src_.counters[k]->widthBits(static_cast<MeterCounter>(c)));
    rings_.push_back(std::make_unique<SpscRing<Reading>>(kRingSlots));
    series_[k].reserve(1 << 14);
  }
  dmon_ring_ = std::make_unique<SpscRing<MeterDmonSample>>(1024);
}

tpsResult_t Sampler::start(std::string* reason) {
  try {
    for (size_t k = 0; k < rings_.size(); ++k) threads_.emplace_back([this, k] { sample(k); });
    if (!src_.dmon.empty()) threads_.emplace_back([this] { sampleDmon(); });
    collector_ = std::thread([this] { collect(); });
  } catch (const std::system_error& e) {
    *reason = std::string("cannot start the sampler threads: ") + e.what();
    stop();
    return tpsSystemError;
  }
  const int64_t give_up = monotonicNs() + 5000000000;
  while (first_reads_.load(std::memory_order_acquire) < static_cast<int>(rings_.size()) && monotonicNs() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  return tpsSuccess;
}

void Sampler::stop() {
  // release pairs with the samplers' acquire: their next read starts after this point.
  stop_sampling_.store(true, std::memory_order_release);
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  stop_collecting_.store(true, std::memory_order_release);
  if (collector_.joinable()) collector_.join();
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();  // the samplers' last reads
}

void Sampler::sample(size_t k) {
  nameThread(("tps-meter-" + std::to_string(k)).c_str());  // shows in top -H, gdb, perf
  CounterReader& reader = *src_.counters[k];
  const int64_t period = options_.period_us * 1000;
  int64_t next = monotonicNs();
  bool first_done = false;
  for (;;) {
    // acquire pairs with stop()'s release: a read that starts after seeing the flag is later than
    // everything the stopping thread did before stop(), window ends included.
    const bool last = stop_sampling_.load(std::memory_order_acquire);
    Reading r;
    reader.read(&r);
    rings_[k]->push(r);
    if (!first_done) {
      first_done = true;
      first_reads_.fetch_add(1, std::memory_order_release);  // start() waits for every GPU's first read
    }
    if (last) return;
    next += period;
    const int64_t now = monotonicNs();
    if (next < now) next = now;  // a slow read: start again now, do not burst to catch up
    sleepUntil(next);
  }
}

void Sampler::sampleDmon() {
  nameThread("tps-meter-dmon");
  int64_t next = monotonicNs();
  while (!stop_sampling_.load(std::memory_order_acquire)) {
    for (size_t k = 0; k < src_.dmon.size(); ++k) {
      for (MeterCounter dir : {MeterCounter::kPcieRx, MeterCounter::kPcieTx}) {
        MeterDmonSample d;
        src_.dmon[k]->read(dir, &d);
        d.gpu = static_cast<int>(k);
        dmon_ring_->push(d);
      }
    }
    next = std::max(next + options_.dmon_period_ms * 1000000, monotonicNs());
    // Sleep in short steps so that stop() does not wait a whole dmon period.
    while (!stop_sampling_.load(std::memory_order_acquire) && monotonicNs() < next)
      sleepUntil(std::min(next, monotonicNs() + 20000000));
  }
}

void Sampler::collect() {
  nameThread("tps-meter-coll");
  while (!stop_collecting_.load(std::memory_order_acquire)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      drainLocked();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kCollectMs));
  }
}

void Sampler::drainLocked() const {
  for (size_t k = 0; k < rings_.size(); ++k) {
    const MeterGpu& g = src_.gpus[k];
    rings_[k]->drain([&](const Reading& r) {
      MeterSample m;
      m.gpu = static_cast<int>(k);
      m.t_before_ns = r.t_before_ns;
      m.t_after_ns = r.t_after_ns;
      m.nvml_timestamp_us = r.nvml_timestamp_us;
      const int64_t mid = r.t_before_ns + (r.t_after_ns - r.t_before_ns) / 2;
      for (int c = 0; c < kMeterCounters; ++c) {
        const bool ok = g.supported[c] && (r.valid & (1u << c));
        // Times must not go backwards per counter: the window code binary-searches them.
        const int64_t t = std::max(ok ? r.t_ns[c] : mid, last_t_[k][c]);
        m.t_ns[c] = t;
        if (!ok) continue;
        const MeterCounter mc = static_cast<MeterCounter>(c);
        // A gap long enough for a 32-bit counter to wrap at the link's ceiling: count it.
        if (isPcie(mc) && last_t_[k][c] > 0 && src_.counters[k]->widthBits(mc) < 64) {
          const double bytes_per_s = g.pcie_ceiling_mbps.value_or(63015.4) * 1e6;
          if ((t - last_t_[k][c]) * 1e-9 * bytes_per_s >= 4294967296.0) ++wrap_gaps_[k];
        }
        last_t_[k][c] = t;
        m.bytes[c] = unwrap_[k][c].push(r.raw[c]);
      }
      series_[k].push_back(m);
    });
  }
  dmon_ring_->drain([&](const MeterDmonSample& d) { dmon_.push_back(d); });
}

std::vector<MeterCadence> Sampler::cadence() const {
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();
  std::vector<MeterCadence> out;
  for (size_t k = 0; k < rings_.size(); ++k) {
    const Series& s = series_[k];
    MeterCadence c;
    c.gpu = static_cast<int>(k);
    c.reads = static_cast<int64_t>(s.size());
    c.period_target_ms = options_.period_us / 1000.0;
    c.dropped = rings_[k]->dropped();
    c.wrap_gaps = wrap_gaps_[k];
    std::vector<double> periods, costs;
    double cost_sum = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      costs.push_back((s[i].t_after_ns - s[i].t_before_ns) * 1e-6);
      cost_sum += costs.back();
      if (i > 0) periods.push_back((s[i].t_before_ns - s[i - 1].t_before_ns) * 1e-6);
    }
    if (!periods.empty()) {
      c.period_mean_ms = (s.back().t_before_ns - s.front().t_before_ns) * 1e-6 / periods.size();
      c.period_p50_ms = percentile(periods, 0.5);
      c.period_p99_ms = percentile(periods, 0.99);
      c.period_max_ms = *std::max_element(periods.begin(), periods.end());
    }
    if (!costs.empty()) {
      c.read_cost_mean_ms = cost_sum / costs.size();
      c.read_cost_p99_ms = percentile(costs, 0.99);
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace tpscope::detail
