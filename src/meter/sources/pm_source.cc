// SPDX-License-Identifier: Apache-2.0
// sources/pm_source.cc - the pm source: CUPTI's PM sampling, PCIe bytes the GPU counts itself per interval
// (MeterOptions::pm_interval_us) on its own clock, decoded by PmSampler's threads (pm_sampler.h). A
// window's bytes are the records inside it whole and the two edge records prorated (pm.h computePm);
// its own traffic is the sampler's rate, measured over a quiet interval at start, times the window's
// length. PCIe only.
#include "meter/pm_sampler.h"
#include "meter/source.h"

namespace tpscope::detail {

namespace {

class PmSource : public Source {
 public:
  PmSource(const MeterOptions& options, std::vector<std::unique_ptr<PmReader>> readers,
           const std::vector<MeterGpu>& gpus)
      : options_(options), gpus_(gpus), sampler_(options, std::move(readers), gpus) {}

  const char* name() const override { return "pm"; }
  tpsResult_t start(std::string* reason) override { return sampler_.start(reason); }
  void stop() override { sampler_.stop(); }

  bool measures(size_t k, MeterCounter c) const override { return k < gpus_.size() && isPcie(c); }
  SourceFigure figure(size_t k, MeterCounter c, int64_t start, int64_t end, double peak_span_ms) const override {
    const int dir = c == MeterCounter::kPcieTx ? kPmTx : kPmRx;
    return sampler_.withData([&](const std::vector<PmSeries>& series) {
      const PmFigure p = computePm(series[k], dir, start, end);
      SourceFigure f;
      f.bytes = p.bytes;
      f.low = p.low;
      f.high = p.high;
      f.samples = p.samples;
      f.complete = p.complete;
      f.why = p.why;
      f.peak_mbps = pmPeakMBps(series[k], dir, start, end, peak_span_ms);
      return f;
    });
  }
  std::optional<OwnBytes> own(size_t k, MeterCounter c, int64_t start, int64_t end) const override {
    if (!isPcie(c) || k >= sampler_.ownBps().size()) return std::nullopt;
    const std::optional<double>& bps = sampler_.ownBps()[k][c == MeterCounter::kPcieTx ? kPmTx : kPmRx];
    if (!bps) return std::nullopt;
    const double bytes = *bps * (end - start) * 1e-9;
    return OwnBytes{bytes, bytes, bytes};
  }
  bool readAfter(int64_t t) const override {
    return sampler_.withData([t](const std::vector<PmSeries>& series) {
      for (const PmSeries& s : series)
        if (!s.ended && (s.samples.empty() || s.samples.back().t_end_ns < t)) return false;
      return true;
    });
  }
  std::optional<MeterSourceStatus> status() const override {
    MeterSourceStatus st;
    st.source = name();
    st.how = "PM sampling (CUPTI): a record every " + std::to_string(options_.pm_interval_us) +
             " us on the GPU's clock, decoded every " + std::to_string(options_.pm_decode_ms) + " ms";
    const PmSampler::Status s = sampler_.status();
    st.records = s.records;
    st.dropped = s.dropped;
    st.gaps = s.holes;
    st.ended = s.ended;
    for (const auto& bps : sampler_.ownBps()) {
      std::array<std::optional<double>, kMeterCounters> mbps{};
      for (int dir : {kPmTx, kPmRx})
        if (bps[dir])
          mbps[static_cast<int>(dir == kPmTx ? MeterCounter::kPcieTx : MeterCounter::kPcieRx)] = *bps[dir] / 1e6;
      st.own_mbps.push_back(mbps);
    }
    return st;
  }
  std::vector<MeterRecord> records() const override {
    return sampler_.withData([](const std::vector<PmSeries>& series) {
      std::vector<MeterRecord> out;
      for (const auto& s : series) out.insert(out.end(), s.samples.begin(), s.samples.end());
      return out;
    });
  }

 private:
  MeterOptions options_;
  std::vector<MeterGpu> gpus_;
  PmSampler sampler_;
};

tpsResult_t openPm(SourceContext& ctx, std::unique_ptr<Source>* out, std::string* reason) {
  std::vector<std::unique_ptr<PmReader>> readers;
  if (tpsResult_t r = ctx.platform.pmReaders(&readers, reason); r != tpsSuccess) return r;
  for (MeterGpu& g : ctx.gpus)
    for (MeterCounter c : {MeterCounter::kPcieTx, MeterCounter::kPcieRx}) g.supported[static_cast<int>(c)] = true;
  *out = std::make_unique<PmSource>(ctx.options, std::move(readers), ctx.gpus);
  return tpsSuccess;
}

}  // namespace

extern const SourceEntry kPmSource{
    "pm", "CUPTI's PM sampling: PCIe bytes the GPU counts itself per interval (needs profiling rights)", openPm};

}  // namespace tpscope::detail
