// SPDX-License-Identifier: Apache-2.0
// meter_impl.cc - the Meter behind meter.h: options, the sources it runs, the window book, quiescing;
// the threads live in the sources.
//
// Locks: mu guards the book, the closed windows and the quiescing records; each source has its own
// lock for its series. Where both are needed, mu is taken first and a source's inside it (windows());
// a source never calls back into the Meter, so there is no opposite order.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "common/checks.h"
#include "common/param.h"
#include "meter/calibrate.h"
#include "meter/control.h"
#include "meter/meter_internal.h"
#include "meter/sampler.h"
#include "meter/window.h"

TPS_PARAM_INT(MeterPeriodUs, "TPSCOPE_METER_PERIOD_US", tpscope::detail::kDefaultPeriodUs)
TPS_PARAM_INT(MeterNvlinkLinksPerCall, "TPSCOPE_METER_NVLINK_LINKS_PER_CALL",
              tpscope::detail::kDefaultNvlinkLinksPerCall)

namespace tpscope {

struct Meter::Impl {
  Impl(const MeterOptions& o, std::unique_ptr<detail::Platform> p)
      : options(o), platform(std::move(p)), gpus(platform->gpus()), ledger(gpus.size()) {}

  MeterOptions options;
  std::unique_ptr<detail::Platform> platform;
  std::vector<MeterGpu> gpus;
  detail::CallLedger ledger;
  std::vector<std::unique_ptr<detail::Source>> sources;  // in registry order: the order they start
  std::vector<const detail::Source*> ordered;            // in options.sources order: the first fills the cells
  const detail::Sampler* sampler = nullptr;              // the first source's that reads cumulative counters
  mutable std::mutex mu;                                 // guards the members below
  bool stopped = false;
  detail::WindowBook book;
  std::vector<detail::ClosedWindow> closed;
  std::vector<QuiesceRecord> quiesces;

  MeterWindow compute(const detail::ClosedWindow& w) const {
    return detail::computeWindow(w.name, w.repetition, w.start_ns, w.end_ns, ordered, gpus, options.peak_span_ms);
  }
  // Every source's own traffic on counter c of GPU k in [a, b]; nullopt when none measured its own.
  std::optional<double> own(size_t k, MeterCounter c, int64_t a, int64_t b) const {
    std::optional<double> sum;
    for (const detail::Source* s : ordered)
      if (const std::optional<detail::OwnBytes> o = s->own(k, c, a, b)) sum = sum.value_or(0) + o->bytes;
    return sum;
  }
};

struct MeterFactory {
  static std::unique_ptr<Meter> make(std::unique_ptr<Meter::Impl> impl) {
    return std::unique_ptr<Meter>(new Meter(std::move(impl)));
  }
};

Meter::Meter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Meter::~Meter() { stop(); }

int64_t Meter::now() { return detail::monotonicNs(); }

tpsResult_t Meter::start(const MeterOptions& options, std::unique_ptr<Meter>* out, std::string* reason) {
  MeterOptions o = options;
  if (tpsResult_t r = detail::resolveOptions(&o, reason); r != tpsSuccess) return r;
  std::unique_ptr<detail::Platform> platform;
  tpsResult_t r =
      o.fake_gpus ? detail::openFakePlatform(o, &platform, reason) : detail::openNvmlPlatform(o, &platform, reason);
  if (r != tpsSuccess) return r;
  return detail::createMeter(o, std::move(platform), out, reason);
}

tpsResult_t detail::resolveOptions(MeterOptions* o, std::string* reason) {
  // A period someone chose (the options or TPSCOPE_METER_PERIOD_US) is fixed unless an idle period
  // is chosen too; the built-in default adapts between kDefaultPeriodUs and kDefaultIdlePeriodUs.
  bool chosen = o->period_us != 0;
  if (o->period_us == 0) {
    o->period_us = tpsParamMeterPeriodUs();
    chosen = o->period_us != kDefaultPeriodUs;
  }
  if (o->idle_period_us == 0) o->idle_period_us = chosen ? o->period_us : std::max(kDefaultIdlePeriodUs, o->period_us);
  if (o->period_us < 100 || o->period_us > 50000) {
    *reason = "sampling period " + std::to_string(o->period_us) +
              " us is out of range: use 100-50000 us (longer lets a 32-bit PCIe counter wrap unseen)";
    return tpsInvalidArgument;
  }
  if (o->idle_period_us < o->period_us || o->idle_period_us > 50000) {
    *reason = "idle period " + std::to_string(o->idle_period_us) + " us is out of range: use the period (" +
              std::to_string(o->period_us) + " us) to 50000 us (longer lets a 32-bit PCIe counter wrap unseen)";
    return tpsInvalidArgument;
  }
  if (!(o->busy_mbps >= 0)) {
    *reason = "the busy threshold must be 0 MB/s or more";
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
  if (o->nvlink_links_per_call < 0) o->nvlink_links_per_call = static_cast<int>(tpsParamMeterNvlinkLinksPerCall());
  if (o->nvlink_links_per_call < 0 || o->nvlink_links_per_call > 64) {
    *reason = "NVLink links per call " + std::to_string(o->nvlink_links_per_call) +
              " is out of range: use 0 (all links in one call) to 64";
    return tpsInvalidArgument;
  }
  if (o->nvlink_raw) o->nvlink = true;
  if (o->pm_interval_us < 10 || o->pm_interval_us > 1000000) {
    *reason = "PM sampling interval " + std::to_string(o->pm_interval_us) +
              " us is out of range: use 10-1000000 us (shorter can overflow the hardware buffer)";
    return tpsInvalidArgument;
  }
  if (o->pm_decode_ms < 1 || o->pm_decode_ms > 1000) {
    *reason = "PM decode period " + std::to_string(o->pm_decode_ms) + " ms is out of range: use 1-1000 ms";
    return tpsInvalidArgument;
  }
  if (o->pm_calibrate_ms < 0) {
    *reason = "the PM calibration time must be 0 ms or more";
    return tpsInvalidArgument;
  }
  std::string text;
  for (const std::string& s : o->sources) text += (text.empty() ? "" : ",") + s;
  if (!parseMeterSources(text, reason)) return tpsInvalidArgument;
  return tpsSuccess;
}

tpsResult_t detail::createMeter(const MeterOptions& options, std::unique_ptr<Platform> platform,
                                std::unique_ptr<Meter>* out, std::string* reason) {
  auto impl = std::make_unique<Meter::Impl>(options, std::move(platform));
  impl->ledger.calibration.note = "not calibrated: NVML's counters are not read";
  SourceContext ctx{impl->options, *impl->platform, impl->gpus, impl->ledger};
  const std::vector<std::string>& asked = impl->options.sources;
  for (const SourceEntry* e : sourceRegistry()) {
    if (std::find(asked.begin(), asked.end(), e->name) == asked.end()) continue;
    std::unique_ptr<Source> s;
    if (tpsResult_t r = e->open(ctx, &s, reason); r != tpsSuccess) return r;
    impl->sources.push_back(std::move(s));
  }
  for (const std::string& name : asked)
    for (const auto& s : impl->sources)
      if (name == s->name()) impl->ordered.push_back(s.get());
  for (const Source* s : impl->ordered)
    if (!impl->sampler) impl->sampler = s->sampler();
  // In registry order (sources/source_registry.cc says why); a failure stops those already started.
  for (size_t i = 0; i < impl->sources.size(); ++i)
    if (tpsResult_t r = impl->sources[i]->start(reason); r != tpsSuccess) {
      while (i > 0) impl->sources[--i]->stop();
      return r;
    }
  *out = MeterFactory::make(std::move(impl));
  return tpsSuccess;
}

tpsResult_t Meter::begin(const std::string& name) {
  const int64_t t = now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  TPS_EXPECT(!name.empty(), tpsInvalidArgument, "meter: a window needs a name");
  TPS_EXPECT(!impl_->stopped, tpsInvalidUsage, "meter: begin('{}') after stop()", name);
  auto err = impl_->book.begin(name, t);
  TPS_EXPECT(!err, tpsInvalidUsage, "meter: {}", err.value_or(""));
  for (const auto& s : impl_->sources) s->wake();  // a read right after the edge (when the period adapts)
  return tpsSuccess;
}

tpsResult_t Meter::end(const std::string& name) {
  const int64_t t = now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::ClosedWindow w;
  auto err = impl_->book.end(name, t, &w);
  TPS_EXPECT(!err, tpsInvalidUsage, "meter: {}", err.value_or(""));
  impl_->closed.push_back(w);
  for (const auto& s : impl_->sources) s->wake();
  return tpsSuccess;
}

void Meter::readNow() {
  for (const auto& s : impl_->sources) s->wake();
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
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    TPS_EXPECT(!impl_->stopped && !impl_->ordered.empty(), tpsInvalidUsage, "meter: quiesce needs a running source");
  }
  const int64_t start = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(opts.idle_ms));
  const int64_t end = now();
  // Wait (briefly) for every source to have read past `end` on every GPU (an NVLink read is slow; PM
  // records are decoded every pm_decode_ms), so that the interval is bracketed.
  auto bracketed = [&] {
    for (const detail::Source* s : impl_->ordered)
      if (!s->readAfter(end)) return false;
    return true;
  };
  for (int i = 0; i < 1000 && !bracketed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::optional<std::vector<unsigned>>> pids;
  if (opts.check_processes)
    for (size_t k = 0; k < gpus().size(); ++k) pids.push_back(impl_->platform->processes(k));
  const MeterWindow idle = impl_->compute({"quiesce", 0, start, end});
  std::vector<unsigned> own = opts.own_pids;
  own.push_back(static_cast<unsigned>(getpid()));
  *out = detail::evaluateQuiesce(idle, gpus(), opts.threshold_mbps, pids, own);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->quiesces.push_back(*out);
  return tpsSuccess;
}

void Meter::stop() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (const auto& w : impl_->book.closeAll(now())) impl_->closed.push_back(w);
  }
  // Their last reads come after the windows just closed; in the reverse of the order they started.
  for (auto it = impl_->sources.rbegin(); it != impl_->sources.rend(); ++it) (*it)->stop();
}

const std::vector<MeterGpu>& Meter::gpus() const { return impl_->gpus; }
const MeterOptions& Meter::options() const { return impl_->options; }

std::vector<MeterWindow> Meter::windows() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<MeterWindow> out;
  for (const auto& w : impl_->closed) out.push_back(impl_->compute(w));
  return out;
}

std::vector<MeterSample> Meter::samples() const {
  for (const detail::Source* s : impl_->ordered)
    if (std::vector<MeterSample> v = s->samples(); !v.empty()) return v;
  return {};
}

std::vector<MeterDmonSample> Meter::dmonSamples() const {
  for (const detail::Source* s : impl_->ordered)
    if (std::vector<MeterDmonSample> v = s->readings(); !v.empty()) return v;
  return {};
}

std::vector<MeterRecord> Meter::records() const {
  for (const detail::Source* s : impl_->ordered)
    if (std::vector<MeterRecord> v = s->records(); !v.empty()) return v;
  return {};
}

std::vector<MeterSourceStatus> Meter::sourceStatus() const {
  std::vector<MeterSourceStatus> out;
  for (const detail::Source* s : impl_->ordered)
    if (std::optional<MeterSourceStatus> st = s->status()) out.push_back(std::move(*st));
  return out;
}

std::optional<MeterSample> Meter::latest(int gpu) const {
  return impl_->sampler ? impl_->sampler->latest(gpu) : std::nullopt;
}
std::optional<MeterSample> Meter::latestRead(int gpu, MeterGroup group) const {
  return impl_->sampler ? impl_->sampler->latestRead(gpu, group) : std::nullopt;
}

std::optional<MeterDmonSample> Meter::latestDmon(int gpu, MeterCounter counter) const {
  const std::vector<MeterDmonSample> dmon = dmonSamples();
  for (auto it = dmon.rbegin(); it != dmon.rend(); ++it)
    if (it->gpu == gpu && it->counter == counter) return *it;
  return std::nullopt;
}

std::vector<MeterCadence> Meter::cadence() const {
  return impl_->sampler ? impl_->sampler->cadence() : std::vector<MeterCadence>{};
}

const MeterCalibration& Meter::calibration() const { return impl_->ledger.calibration; }

std::optional<double> Meter::ownBytes(int gpu, MeterCounter c, int64_t start_ns, int64_t end_ns) const {
  if (gpu < 0 || gpu >= static_cast<int>(gpus().size())) return std::nullopt;
  return impl_->own(static_cast<size_t>(gpu), c, start_ns + 1, end_ns);
}

std::vector<std::array<std::optional<double>, kMeterCounters>> Meter::ownMBps() const {
  std::vector<std::array<std::optional<double>, kMeterCounters>> out(gpus().size());
  if (!impl_->sampler) return out;
  // Over the span of each GPU's counter reads so far.
  const std::vector<std::pair<int64_t, int64_t>> spans =
      impl_->sampler->withData([](const std::vector<detail::Series>& series) {
        std::vector<std::pair<int64_t, int64_t>> v;
        for (const detail::Series& s : series)
          v.push_back(s.size() < 2 ? std::make_pair(int64_t{0}, int64_t{0})
                                   : std::make_pair(s.front().t_before_ns, s.back().t_after_ns));
        return v;
      });
  for (size_t k = 0; k < out.size() && k < spans.size(); ++k) {
    const auto [a, b] = spans[k];
    for (int c = 0; c < kMeterCounters; ++c) {
      if (!gpus()[k].supported[c] || b <= a) continue;
      if (const std::optional<double> own = impl_->own(k, static_cast<MeterCounter>(c), a, b))
        out[k][c] = *own / ((b - a) * 1e-9) / 1e6;
    }
  }
  return out;
}

int64_t Meter::reads(int gpu, MeterReadKind k) const {
  return gpu < 0 ? 0 : impl_->ledger.calls(static_cast<size_t>(gpu), k);
}

std::optional<double> Meter::ownBytesSoFar(int gpu, MeterCounter c) const {
  const MeterCalibration& cal = calibration();
  if (!cal.calibrated || gpu < 0 || gpu >= static_cast<int>(cal.gpus.size())) return std::nullopt;
  double total = 0;
  for (int k = 0; k < kMeterReadKinds; ++k) {
    const MeterReadKind kind = static_cast<MeterReadKind>(k);
    const int64_t n = reads(gpu, kind);
    if (n == 0) continue;
    const std::optional<double> one = detail::ownBytes(cal.gpus[gpu], kind, static_cast<int>(c), 1);
    if (!one) return std::nullopt;
    total += std::max(0.0, *one) * static_cast<double>(n);  // a noisy negative cost would make it decrease
  }
  return total;
}

MeterPcieLink Meter::pcieLink(int gpu) const {
  return gpu < 0 || gpu >= static_cast<int>(gpus().size()) ? MeterPcieLink{} : impl_->platform->pcieLink(gpu);
}

std::vector<QuiesceRecord> Meter::quiesceRecords() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->quiesces;
}

}  // namespace tpscope
