// SPDX-License-Identifier: Apache-2.0
// meter.cc - the public Meter: options, the window book, quiescing; the threads live in Sampler.
//
// Locks: mu guards the book, the closed windows and the quiescing records; the sampler has its
// own lock for the series. Where both are needed, mu is taken first and the sampler's inside it
// (windows()); the sampler never calls back into the Meter, so there is no opposite order.
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
#include "meter/pm_sampler.h"
#include "meter/sampler.h"

TPS_PARAM_INT(MeterPeriodUs, "TPSCOPE_METER_PERIOD_US", tpscope::detail::kDefaultPeriodUs)
TPS_PARAM_INT(MeterNvlinkLinksPerCall, "TPSCOPE_METER_NVLINK_LINKS_PER_CALL",
              tpscope::detail::kDefaultNvlinkLinksPerCall)

namespace tpscope {

struct Meter::Impl {
  Impl(const MeterOptions& o, detail::SourceSet src) : options(o) {
    std::vector<std::unique_ptr<detail::PmReader>> pm_readers = std::move(src.pm);
    if (!pm_readers.empty()) pm = std::make_unique<detail::PmSampler>(o, std::move(pm_readers), src.gpus);
    sampler = std::make_unique<detail::Sampler>(o, std::move(src));
  }

  MeterOptions options;
  std::unique_ptr<detail::Sampler> sampler;
  std::unique_ptr<detail::PmSampler> pm;  // source pm/both
  mutable std::mutex mu;                  // guards the members below
  bool stopped = false;
  detail::WindowBook book;
  std::vector<detail::ClosedWindow> closed;
  std::vector<QuiesceRecord> quiesces;

  MeterWindow compute(const detail::ClosedWindow& w) const { return computeAll({w}).front(); }

  // Every window of `ws` over one look at the series: the reads indexed once (detail::indexReads), so
  // each window costs the reads around it, not a pass over the series (a command may mark 200,000).
  std::vector<MeterWindow> computeAll(const std::vector<detail::ClosedWindow>& ws) const {
    std::vector<MeterWindow> out =
        sampler->withData([&](const std::vector<detail::Series>& series, const std::vector<MeterDmonSample>& dmon) {
          std::vector<detail::ReadIndex> index;
          if (ws.size() > 1)
            for (size_t k = 0; k < series.size(); ++k)
              index.push_back(detail::indexReads(series[k], dmon, static_cast<int>(k)));
          std::vector<MeterWindow> all;
          all.reserve(ws.size());
          for (const detail::ClosedWindow& w : ws) {
            MeterWindow mw =
                detail::computeWindow(w.name, w.repetition, w.start_ns, w.end_ns, series, sampler->gpus(), dmon,
                                      options.peak_span_ms, &sampler->calibration(), index.empty() ? nullptr : &index);
            for (size_t k = 0; k < series.size(); ++k)
              mw.nvml_wrap_gaps +=
                  detail::nvmlWrapGapsIn(series[k], w.start_ns, w.end_ns, sampler->gpus()[k].pcie_ceiling_mbps);
            all.push_back(std::move(mw));
          }
          return all;
        });
    if (pm) {
      pm->withData([&](const std::vector<detail::PmSeries>& series) {
        for (MeterWindow& mw : out)
          detail::applyPm(&mw, series, sampler->gpus(), pm->ownBps(), options.source == MeterSource::kPm,
                          options.peak_span_ms);
      });
      if (options.source == MeterSource::kPm)
        for (MeterWindow& mw : out) mw.complete = mw.pm_complete;
    }
    return out;
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
  detail::SourceSet set;
  tpsResult_t r = o.fake_gpus ? detail::openFakeSources(o, &set, reason) : detail::openNvmlSources(o, &set, reason);
  if (r != tpsSuccess) return r;
  if (!o.fake_gpus && o.source != MeterSource::kNvml) {
    if (o.source == MeterSource::kPm) {  // NVML is not read: PCIe from PM only, NVLink N/A
      set.counters.clear();
      for (MeterGpu& g : set.gpus)
        for (int c = 2; c < kMeterCounters; ++c) g.supported[c] = false;
    }
    if (tpsResult_t p = detail::openCuptiPmReaders(o, set.gpus, &set.pm, reason); p != tpsSuccess) return p;
  }
  return detail::createMeter(o, std::move(set), out, reason);
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
  return tpsSuccess;
}

tpsResult_t detail::createMeter(const MeterOptions& options, SourceSet sources, std::unique_ptr<Meter>* out,
                                std::string* reason) {
  auto impl = std::make_unique<Meter::Impl>(options, std::move(sources));
  // PM first: its configuration (~0.3 s) and the measure of its own traffic then see the NVML
  // sampler's steady idle reads only, and the NVML calibration sees PM's steady traffic in both of
  // its alternating intervals, where it cancels.
  if (impl->pm)
    if (tpsResult_t r = impl->pm->start(reason); r != tpsSuccess) return r;
  if (tpsResult_t r = impl->sampler->start(reason); r != tpsSuccess) return r;
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
  impl_->sampler->wake();  // a read right after the edge (when the period adapts)
  return tpsSuccess;
}

tpsResult_t Meter::end(const std::string& name) {
  const int64_t t = now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  detail::ClosedWindow w;
  auto err = impl_->book.end(name, t, &w);
  TPS_EXPECT(!err, tpsInvalidUsage, "meter: {}", err.value_or(""));
  impl_->closed.push_back(w);
  impl_->sampler->wake();
  return tpsSuccess;
}

void Meter::readNow() { impl_->sampler->wake(); }

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
  const bool counters = impl_->sampler->hasCounters();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // With source pm NVML is not read: the idle interval is judged on PM's PCIe figures alone.
    TPS_EXPECT(!impl_->stopped && (counters || impl_->pm), tpsInvalidUsage,
               "meter: quiesce needs a running counter or PM sampler");
  }
  const int64_t start = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(opts.idle_ms));
  const int64_t end = now();
  // Wait (briefly) for a read of every counter after `end` on every GPU (NVLink reads take ~22 ms on
  // H200), and for PM records past `end` (they are decoded every pm_decode_ms), so that the interval
  // is bracketed.
  auto counters_bracketed = [this, end](const std::vector<detail::Series>& series,
                                        const std::vector<MeterDmonSample>&) {
    for (size_t k = 0; k < series.size(); ++k)
      if (!detail::readAfter(series[k], gpus()[k], end)) return false;
    return true;
  };
  auto pm_bracketed = [end](const std::vector<detail::PmSeries>& series) {
    for (const detail::PmSeries& s : series)
      if (!s.ended && (s.samples.empty() || s.samples.back().t_end_ns < end)) return false;
    return true;
  };
  auto bracketed = [&] {
    return (!counters || impl_->sampler->withData(counters_bracketed)) &&
           (!impl_->pm || impl_->pm->withData(pm_bracketed));
  };
  for (int i = 0; i < 1000 && !bracketed(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::optional<std::vector<unsigned>>> pids;
  if (opts.check_processes)
    for (size_t k = 0; k < gpus().size(); ++k) pids.push_back(impl_->sampler->processes(static_cast<int>(k)));
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
  impl_->sampler->stop();  // its last reads come after the windows just closed
  if (impl_->pm) impl_->pm->stop();
}

std::vector<MeterPmSample> Meter::pmSamples() const {
  if (!impl_->pm) return {};
  return impl_->pm->withData([](const std::vector<detail::PmSeries>& series) {
    std::vector<MeterPmSample> out;
    for (const auto& s : series) out.insert(out.end(), s.samples.begin(), s.samples.end());
    return out;
  });
}

Meter::PmStatus Meter::pmStatus() const { return impl_->pm ? impl_->pm->status() : PmStatus{}; }

const char* meterSourceName(MeterSource s) {
  return s == MeterSource::kPm ? "pm" : s == MeterSource::kBoth ? "both" : "nvml";
}

const std::vector<MeterGpu>& Meter::gpus() const { return impl_->sampler->gpus(); }
const MeterOptions& Meter::options() const { return impl_->options; }

std::vector<MeterWindow> Meter::windows() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->closed.empty() ? std::vector<MeterWindow>{} : impl_->computeAll(impl_->closed);
}

std::vector<MeterSample> Meter::samples() const {
  return impl_->sampler->withData([](const std::vector<detail::Series>& series, const std::vector<MeterDmonSample>&) {
    std::vector<MeterSample> out;
    for (const auto& s : series) out.insert(out.end(), s.begin(), s.end());
    return out;
  });
}

std::vector<MeterDmonSample> Meter::dmonSamples() const {
  return impl_->sampler->withData(
      [](const std::vector<detail::Series>&, const std::vector<MeterDmonSample>& dmon) { return dmon; });
}

std::optional<MeterSample> Meter::latest(int gpu) const { return impl_->sampler->latest(gpu); }
std::optional<MeterSample> Meter::latestRead(int gpu, MeterGroup group) const {
  return impl_->sampler->latestRead(gpu, group);
}

std::optional<MeterDmonSample> Meter::latestDmon(int gpu, MeterCounter counter) const {
  return impl_->sampler->withData([&](const std::vector<detail::Series>&,
                                      const std::vector<MeterDmonSample>& dmon) -> std::optional<MeterDmonSample> {
    for (auto it = dmon.rbegin(); it != dmon.rend(); ++it)
      if (it->gpu == gpu && it->counter == counter) return *it;
    return std::nullopt;
  });
}

std::vector<MeterCadence> Meter::cadence() const { return impl_->sampler->cadence(); }

const MeterCalibration& Meter::calibration() const { return impl_->sampler->calibration(); }

std::optional<double> Meter::ownBytes(int gpu, MeterCounter c, int64_t start_ns, int64_t end_ns) const {
  const MeterCalibration& cal = calibration();
  if (!cal.calibrated || gpu < 0 || gpu >= static_cast<int>(cal.gpus.size())) return std::nullopt;
  return impl_->sampler->withData([&](const std::vector<detail::Series>& series,
                                      const std::vector<MeterDmonSample>& dmon) -> std::optional<double> {
    const std::array<int64_t, kMeterReadKinds> reads =
        detail::readsInside(series[gpu], dmon, gpu, start_ns + 1, end_ns);
    return detail::ownBytes(cal.gpus[gpu], static_cast<int>(c), reads);
  });
}

std::vector<std::array<std::optional<double>, kMeterCounters>> Meter::ownMBps() const {
  const MeterCalibration& cal = calibration();
  std::vector<std::array<std::optional<double>, kMeterCounters>> out(gpus().size());
  if (!cal.calibrated) return out;
  // Over the span of each GPU's reads so far: every kind of read, at its calibrated cost.
  return impl_->sampler->withData(
      [&](const std::vector<detail::Series>& series, const std::vector<MeterDmonSample>& dmon) {
        for (size_t k = 0; k < out.size() && k < series.size(); ++k) {
          if (series[k].size() < 2) continue;
          const int64_t a = series[k].front().t_before_ns, b = series[k].back().t_after_ns;
          const std::array<int64_t, kMeterReadKinds> reads =
              detail::readsInside(series[k], dmon, static_cast<int>(k), a, b);
          for (int c = 0; c < kMeterCounters; ++c) {
            if (!gpus()[k].supported[c] || b <= a) continue;
            if (const std::optional<double> own = detail::ownBytes(cal.gpus[k], c, reads))
              out[k][c] = *own / ((b - a) * 1e-9) / 1e6;
          }
        }
        return out;
      });
}

int64_t Meter::reads(int gpu, MeterReadKind k) const {
  return gpu < 0 ? 0 : impl_->sampler->reads(static_cast<size_t>(gpu), k);
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

MeterPcieLink Meter::pcieLink(int gpu) const { return impl_->sampler->pcieLink(gpu); }

std::vector<QuiesceRecord> Meter::quiesceRecords() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->quiesces;
}

}  // namespace tpscope
