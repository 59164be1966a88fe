// SPDX-License-Identifier: Apache-2.0
// sources/nvml_source.cc - the nvml source: NVML's cumulative PCIe and NVLink byte counters, read every period
// by the Sampler's threads (sampler.h), prorated across window edges (window.h), net of the meter's own
// calls at the costs its calibration measures at start (calibrate.h).
#include <algorithm>

#include "common/log.h"
#include "meter/calibrate.h"
#include "meter/sampler.h"
#include "meter/window.h"

namespace tpscope::detail {

namespace {

class NvmlSource : public Source {
 public:
  NvmlSource(const MeterOptions& options, const std::vector<MeterGpu>& gpus,
             std::vector<std::unique_ptr<CounterReader>> counters, std::vector<std::unique_ptr<DmonReader>> dmon,
             CallLedger& ledger)
      : options_(options),
        dmon_(std::move(dmon)),
        ledger_(ledger),
        sampler_(options, gpus, std::move(counters), ledger) {}

  const char* name() const override { return "nvml"; }

  tpsResult_t start(std::string* reason) override {
    if (!options_.calibrate) {
      ledger_.calibration.note = "not calibrated (turned off): figures include the meter's own reads";
    } else {
      CalibrationPlan plan;
      plan.busy_mbps = options_.busy_mbps;
      plan.pcie_spacing_ns = options_.period_us * 1000;
      ledger_.calibration = calibrateAll(sampler_.readers(), dmon_, sampler_.gpus(), plan);
    }
    dmon_.clear();  // calibration's only: the dmon source reads with its own
    return sampler_.start(reason);
  }
  void stop() override { sampler_.stop(); }
  void wake() override { sampler_.wake(); }

  bool measures(size_t k, MeterCounter c) const override {
    return k < sampler_.gpus().size() && sampler_.gpus()[k].supported[static_cast<int>(c)];
  }
  SourceFigure figure(size_t k, MeterCounter c, int64_t start, int64_t end, double peak_span_ms) const override {
    return sampler_.withData(
        [&](const std::vector<Series>& series) { return counterFigure(series[k], c, start, end, peak_span_ms); });
  }
  // Its reads (pcie, nvlink) with their midpoint in the window, at the calibrated cost per read; counted
  // in the sampler's index of them, so a window costs a bisection, not a pass over the series.
  std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start, int64_t end) const override {
    const MeterCalibration& cal = ledger_.calibration;
    if (!cal.calibrated || k >= cal.gpus.size()) return std::nullopt;
    return sampler_.withReads([&](const std::vector<ReadIndex>& reads) {
      return ownOfReads(cal.gpus[k], static_cast<int>(c), readsInside(reads[k], start, end));
    });
  }
  bool readAfter(int64_t t) const override {
    return sampler_.withData([&](const std::vector<Series>& series) {
      for (size_t k = 0; k < series.size(); ++k)
        if (!detail::readAfter(series[k], sampler_.gpus()[k], t)) return false;
      return true;
    });
  }
  int gapsIn(int64_t start, int64_t end) const override {
    return sampler_.withData([&](const std::vector<Series>& series) {
      int gaps = 0;
      for (size_t k = 0; k < series.size(); ++k)
        gaps += wrapGapsIn(series[k], start, end, sampler_.gpus()[k].pcie_ceiling_mbps);
      return gaps;
    });
  }
  std::vector<MeterSample> samples() const override {
    return sampler_.withData([](const std::vector<Series>& series) {
      std::vector<MeterSample> out;
      for (const auto& s : series) out.insert(out.end(), s.begin(), s.end());
      return out;
    });
  }
  const Sampler* sampler() const override { return &sampler_; }

 private:
  MeterOptions options_;
  std::vector<std::unique_ptr<DmonReader>> dmon_;  // for the calibration of the dmon call, when dmon runs
  CallLedger& ledger_;
  Sampler sampler_;
};

tpsResult_t openNvml(SourceContext& ctx, std::unique_ptr<Source>* out, std::string* reason) {
  std::vector<std::unique_ptr<CounterReader>> counters;
  std::vector<MeterGpu> mine = ctx.gpus;  // with the counters NVML answers here, whatever other sources measure
  for (size_t k = 0; k < ctx.gpus.size(); ++k) {
    std::unique_ptr<CounterReader> r = ctx.platform.counterReader(k, reason);
    if (!r) return tpsUnavailable;
    for (int c = 0; c < kMeterCounters; ++c) {
      mine[k].supported[c] = r->supported() & (1u << c);
      ctx.gpus[k].supported[c] = ctx.gpus[k].supported[c] || mine[k].supported[c];
    }
    mine[k].nvlink_links = ctx.gpus[k].nvlink_links = r->nvlinkLinks();
    if (r->supported() == 0)
      TPS_LOG_WARN("GPU {} answers none of the byte-counter fields (driver older than R555?): all N/A",
                   ctx.gpus[k].index);
    counters.push_back(std::move(r));
  }
  // The dmon call crosses the link too: where the dmon source runs beside, the calibration measures
  // what one call adds, so that its calls are subtracted like the reads.
  std::vector<std::unique_ptr<DmonReader>> dmon;
  const auto& s = ctx.options.sources;
  if (std::find(s.begin(), s.end(), "dmon") != s.end())
    for (size_t k = 0; k < ctx.gpus.size(); ++k) {
      std::unique_ptr<DmonReader> d = ctx.platform.dmonReader(k, reason);
      if (!d) return tpsUnavailable;
      dmon.push_back(std::move(d));
    }
  *out = std::make_unique<NvmlSource>(ctx.options, mine, std::move(counters), std::move(dmon), ctx.ledger);
  return tpsSuccess;
}

}  // namespace

extern const SourceEntry kNvmlSource{"nvml", "NVML's cumulative PCIe and NVLink byte counters, read every period",
                                     openNvml};

}  // namespace tpscope::detail
