// SPDX-License-Identifier: Apache-2.0
// sampler.cc - sampler and collector threads; unwrapping into the series; cadence statistics.
#include "meter/sampler.h"

#include <pthread.h>

#include <algorithm>
#include <system_error>

#include "meter/calibrate.h"

namespace tpscope::detail {

namespace {
constexpr size_t kRingSlots = 8192;  // > 0.8 s of reads at the fastest period; drained every 5 ms
constexpr int kCollectMs = 5;
// After a busy interval a link stays on the busy period this long: bursty traffic (a decode step's
// AllReduces every few ms) does not flip the period at every read.
constexpr int64_t kStayBusyNs = 100000000;
// NVLink counters are 64-bit and cannot wrap; a quiet NVLink is read this many times less often
// than a quiet PCIe link.
constexpr int64_t kNvlinkIdleFactor = 4;

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

SeriesBuilder::SeriesBuilder(int gpu, const MeterGpu& info, const std::array<int, kMeterCounters>& bits)
    : gpu_(gpu), info_(info), bits_(bits) {
  for (int c = 0; c < kMeterCounters; ++c) unwrap_[c] = Unwrapper(bits[c]);
}

void SeriesBuilder::append(MeterGroup group, const Reading& r, Series* out) {
  MeterSample m;
  m.gpu = gpu_;
  m.group = group;
  m.t_before_ns = r.t_before_ns;
  m.t_after_ns = r.t_after_ns;
  m.nvml_timestamp_us = r.nvml_timestamp_us;
  bool failed = false;
  for (int c = 0; c < kMeterCounters; ++c) {
    const MeterCounter mc = static_cast<MeterCounter>(c);
    const bool mine = groupOf(mc) == group && info_.supported[c];
    const bool ok = mine && (r.valid & (1u << c));
    failed = failed || (mine && !ok);
    if (!ok) {
      m.t_ns[c] = last_t_[c];  // no value here: carry the latest time, so times stay sorted per counter
      continue;
    }
    // Times must not go backwards per counter: the window code binary-searches them.
    const int64_t t = std::max(r.t_ns[c], last_t_[c]);
    // A gap long enough for a 32-bit counter to wrap at the link's ceiling: count it.
    if (isPcie(mc) && last_t_[c] > 0 && bits_[c] < 64) {
      const double bytes_per_s = info_.pcie_ceiling_mbps.value_or(63015.4) * 1e6;
      if ((t - last_t_[c]) * 1e-9 * bytes_per_s >= 4294967296.0) ++wrap_gaps_;
    }
    last_t_[c] = t;
    m.t_ns[c] = t;
    m.bytes[c] = unwrap_[c].push(r.raw[c]);
  }
  if (failed) {
    ++failed_[static_cast<int>(group)];
    last_error_[static_cast<int>(group)] = r.error ? r.error : "no value";
  } else {
    latest_read_[static_cast<int>(group)] = m;
  }
  // The newest value of every counter: this row's values over the previous ones.
  if (!latest_) latest_ = m;
  MeterSample& l = *latest_;
  l.group = m.group;
  l.t_before_ns = m.t_before_ns;
  l.t_after_ns = m.t_after_ns;
  l.nvml_timestamp_us = m.nvml_timestamp_us;
  for (int c = 0; c < kMeterCounters; ++c) {
    if (!m.bytes[c]) continue;
    l.bytes[c] = m.bytes[c];
    l.t_ns[c] = m.t_ns[c];
  }
  out->push_back(m);
}

Sampler::Sampler(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
                 std::vector<std::unique_ptr<CounterReader>> counters, CallLedger& ledger)
    : options_(options), gpus_(gpus), counters_(std::move(counters)), ledger_(ledger) {
  const size_t n = gpus_.size();
  series_.resize(n);
  reads_.resize(n);
  builders_.resize(n);
  for (size_t k = 0; k < counters_.size() && k < n; ++k) {
    const CounterReader& reader = *counters_[k];
    std::array<int, kMeterCounters> bits{};
    for (int c = 0; c < kMeterCounters; ++c) bits[c] = reader.widthBits(static_cast<MeterCounter>(c));
    builders_[k] = SeriesBuilder(static_cast<int>(k), gpus_[k], bits);
    // PCIe always has a thread (it also keeps a GPU with no counters at all in the series, all
    // N/A); NVLink only where the GPU has NVLink counters.
    streams_.push_back({k, MeterGroup::kPcie, std::make_unique<SpscRing<Reading>>(kRingSlots)});
    if (reader.supported() & groupMask(MeterGroup::kNvlink))
      streams_.push_back({k, MeterGroup::kNvlink, std::make_unique<SpscRing<Reading>>(kRingSlots)});
    series_[k].reserve(1 << 14);
  }
  edge_reads_ = std::make_unique<std::atomic<int64_t>[]>(streams_.size() + 1);
}

tpsResult_t Sampler::start(std::string* reason) {
  try {
    for (size_t i = 0; i < streams_.size(); ++i) threads_.emplace_back([this, i] { sample(i); });
    collector_ = std::thread([this] { collect(); });
  } catch (const std::system_error& e) {
    *reason = std::string("cannot start the sampler threads: ") + e.what();
    stop();
    return tpsSystemError;
  }
  const int64_t give_up = monotonicNs() + 5000000000;
  while (first_reads_.load(std::memory_order_acquire) < static_cast<int>(streams_.size()) && monotonicNs() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  return tpsSuccess;
}

void Sampler::wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    ++wake_seq_;
  }
  wake_cv_.notify_all();
}

void Sampler::sleepOrWake(int64_t until_ns, uint64_t* seen) {
  if (options_.idle_period_us == options_.period_us) {  // a fixed period: no early reads
    sleepUntil(until_ns);
    return;
  }
  std::unique_lock<std::mutex> lock(wake_mu_);
  const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(until_ns));
  wake_cv_.wait_until(lock, deadline,
                      [&] { return wake_seq_ != *seen || stop_sampling_.load(std::memory_order_acquire); });
  *seen = wake_seq_;
}

bool Sampler::busySince(const Stream& st, const Reading& prev, const Reading& now,
                        const std::array<int64_t, kMeterReadKinds>& own_reads) const {
  const CounterReader& reader = *counters_[st.gpu];
  const MeterCalibration& calibration = ledger_.calibration;
  const MeterGpuCalibration* cal =
      calibration.calibrated && st.gpu < calibration.gpus.size() ? &calibration.gpus[st.gpu] : nullptr;
  for (int c = 0; c < kMeterCounters; ++c) {
    if (!(groupMask(st.group) & prev.valid & now.valid & (1u << c))) continue;
    const int64_t dt = now.t_ns[c] - prev.t_ns[c];
    if (dt <= 0) continue;
    const int bits = reader.widthBits(static_cast<MeterCounter>(c));
    const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    double bytes = static_cast<double>((now.raw[c] - prev.raw[c]) & mask);
    if (cal)
      for (int k = 0; k < kMeterReadKinds; ++k)
        bytes -= ownBytes(*cal, static_cast<MeterReadKind>(k), c, own_reads[k]).value_or(0);
    if (bytes / (dt * 1e-9) / 1e6 > options_.busy_mbps) return true;
  }
  return false;
}

void Sampler::stop() {
  // release pairs with the samplers' acquire: their next read starts after this point.
  stop_sampling_.store(true, std::memory_order_release);
  wake();  // a sampler asleep for its idle period stops now
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  stop_collecting_.store(true, std::memory_order_release);
  if (collector_.joinable()) collector_.join();
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();  // the samplers' last reads
}

void Sampler::sample(size_t i) {
  const Stream& st = streams_[i];
  // tps-pcie-0, tps-nvlink-0: shows in top -H, gdb, perf (names are at most 15 characters).
  nameThread(((st.group == MeterGroup::kPcie ? "tps-pcie-" : "tps-nvlink-") + std::to_string(st.gpu)).c_str());
  CounterReader& reader = *counters_[st.gpu];
  const MeterReadKind kind = st.group == MeterGroup::kPcie ? MeterReadKind::kPcie : MeterReadKind::kNvlink;
  const int64_t busy_period = options_.period_us * 1000;
  const int64_t idle_period =
      options_.idle_period_us * 1000 *
      (st.group == MeterGroup::kNvlink && options_.idle_period_us != options_.period_us ? kNvlinkIdleFactor : 1);
  int64_t next = monotonicNs();
  int64_t busy_until = next + kStayBusyNs;  // start on the busy period: the link's state is unknown
  bool first_done = false;
  uint64_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    seen = wake_seq_;
  }
  Reading prev;
  std::array<int64_t, kMeterReadKinds> reads_prev = ledger_.calls(st.gpu);
  for (;;) {
    // acquire pairs with stop()'s release: a read that starts after seeing the flag is later than
    // everything the stopping thread did before stop(), window ends included.
    const bool last = stop_sampling_.load(std::memory_order_acquire);
    Reading r;
    reader.read(st.group, &r);
    ledger_.count(st.gpu, kind);
    st.ring->push(r);
    if (!first_done) {
      first_done = true;
      first_reads_.fetch_add(1, std::memory_order_release);  // start() waits for every stream's first read
    }
    if (last) return;
    const std::array<int64_t, kMeterReadKinds> reads_now = ledger_.calls(st.gpu);
    std::array<int64_t, kMeterReadKinds> own{};
    for (int k = 0; k < kMeterReadKinds; ++k) own[k] = reads_now[k] - reads_prev[k];
    const int64_t now = monotonicNs();
    if (prev.valid && busySince(st, prev, r, own)) busy_until = now + kStayBusyNs;
    prev = r;
    reads_prev = reads_now;
    next += now < busy_until ? busy_period : idle_period;
    // A read slower than the period (NVLink on H200) starts again at once: back to back, no burst
    // to catch up, and no sleep that would only leave the counters unread.
    if (next < now) next = now;
    const uint64_t before = seen;
    sleepOrWake(next, &seen);
    if (seen != before && !stop_sampling_.load(std::memory_order_acquire)) {
      edge_reads_[i].fetch_add(1, std::memory_order_relaxed);
      next = monotonicNs();  // an edge read: the period starts again from here
    }
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
  // Each stream's reads arrive in its own order; the builder merges them into the GPU's series by
  // counter, so the order between the two streams of a GPU does not matter.
  for (const Stream& st : streams_) {
    const MeterReadKind kind = st.group == MeterGroup::kPcie ? MeterReadKind::kPcie : MeterReadKind::kNvlink;
    st.ring->drain([&](const Reading& r) {
      builders_[st.gpu].append(st.group, r, &series_[st.gpu]);
      reads_[st.gpu].add(kind, readMidNs(r.t_before_ns, r.t_after_ns));
    });
  }
  if (options_.history_s > 0) trimLocked();
}

namespace {

// Drops what is older than keep_ns before the newest entry, once the oldest is twice that old: each
// entry is erased once, in batches, so trimming costs O(1) per entry and `v` holds at most 2 x keep_ns.
// Whether it dropped anything.
template <typename Samples>
bool trimOlderThan(Samples& v, int64_t keep_ns) {
  if (v.size() < 2 || v.back().t_after_ns - v.front().t_after_ns < 2 * keep_ns) return false;
  const int64_t cut = v.back().t_after_ns - keep_ns;
  v.erase(v.begin(), std::find_if(v.begin(), v.end(), [cut](const auto& m) { return m.t_after_ns >= cut; }));
  return true;
}

}  // namespace

void Sampler::trimLocked() const {
  const int64_t keep_ns = static_cast<int64_t>(options_.history_s * 1e9);
  // A trimmed series is indexed again: once per history_s of reads, so still O(1) per read.
  for (size_t k = 0; k < series_.size(); ++k)
    if (trimOlderThan(series_[k], keep_ns)) reads_[k] = indexReads(series_[k]);
}

std::optional<MeterSample> Sampler::latest(int gpu) const {
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();
  if (gpu < 0 || gpu >= static_cast<int>(builders_.size())) return std::nullopt;
  return builders_[gpu].latest();
}

std::optional<MeterSample> Sampler::latestRead(int gpu, MeterGroup group) const {
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();
  if (gpu < 0 || gpu >= static_cast<int>(builders_.size())) return std::nullopt;
  return builders_[gpu].latestRead(group);
}

std::vector<MeterCadence> Sampler::cadence() const {
  std::lock_guard<std::mutex> lock(mu_);
  drainLocked();
  std::vector<MeterCadence> out;
  for (const Stream& st : streams_) {
    MeterCadence c;
    c.gpu = static_cast<int>(st.gpu);
    c.group = st.group;
    c.period_target_ms = options_.period_us / 1000.0;
    c.idle_period_ms =
        options_.idle_period_us / 1000.0 *
        (st.group == MeterGroup::kNvlink && options_.idle_period_us != options_.period_us ? kNvlinkIdleFactor : 1);
    c.edge_reads = edge_reads_[&st - streams_.data()].load(std::memory_order_relaxed);
    c.dropped = st.ring->dropped();
    c.wrap_gaps = st.group == MeterGroup::kPcie ? builders_[st.gpu].wrapGaps() : 0;
    c.failed_reads = builders_[st.gpu].failedReads(st.group);
    if (const char* e = builders_[st.gpu].lastError(st.group)) c.last_error = e;
    std::vector<double> periods, costs;
    double cost_sum = 0;
    int64_t first = 0, prev = 0;
    for (const MeterSample& x : series_[st.gpu]) {
      if (x.group != st.group) continue;
      costs.push_back((x.t_after_ns - x.t_before_ns) * 1e-6);
      cost_sum += costs.back();
      if (c.reads == 0) first = x.t_before_ns;
      if (c.reads > 0) periods.push_back((x.t_before_ns - prev) * 1e-6);
      prev = x.t_before_ns;
      ++c.reads;
    }
    if (!periods.empty()) {
      c.period_mean_ms = (prev - first) * 1e-6 / periods.size();
      c.period_p50_ms = percentile(periods, 0.5);
      c.period_p99_ms = percentile(periods, 0.99);
      c.period_max_ms = *std::max_element(periods.begin(), periods.end());
    }
    if (!costs.empty()) {
      c.read_cost_mean_ms = cost_sum / costs.size();
      c.read_cost_p99_ms = percentile(costs, 0.99);
    }
    const MeterCalibration& calibration = ledger_.calibration;
    if (calibration.calibrated && st.gpu < calibration.gpus.size() && prev > first) {
      const MeterReadKind kind = st.group == MeterGroup::kPcie ? MeterReadKind::kPcie : MeterReadKind::kNvlink;
      for (int k = 0; k < kMeterCounters; ++k) {
        const std::optional<double> b = ownBytes(calibration.gpus[st.gpu], kind, k, c.reads);
        if (b && gpus_[st.gpu].supported[k]) c.own_mbps[k] = *b / ((prev - first) * 1e-9) / 1e6;
      }
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace tpscope::detail
