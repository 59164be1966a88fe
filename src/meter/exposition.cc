// SPDX-License-Identifier: Apache-2.0
// exposition.cc - the metric families of `tpscope meter --serve` (names and labels: docs/cli.md).
#include "meter/exposition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tpscope::detail {

void MetricsText::family(const std::string& name, const char* type, const std::string& help) {
  name_ = name;
  std::string h;  // HELP text escapes backslash and newline only
  for (char c : help) h += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
  text_ += "# HELP " + name + " " + h + "\n# TYPE " + name + " " + type + "\n";
}

void MetricsText::labels(const Labels& labels) {
  text_ += name_;
  if (labels.empty()) return;
  text_ += '{';
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) text_ += ',';
    text_ += labels[i].first + "=\"";
    for (char c : labels[i].second)
      text_ += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
    text_ += '"';
  }
  text_ += '}';
}

void MetricsText::sample(const Labels& l, double value) {
  labels(l);
  if (std::isnan(value))
    text_ += " NaN\n";
  else if (std::isinf(value))
    text_ += value > 0 ? " +Inf\n" : " -Inf\n";
  else
    text_ += fmt::format(" {}\n", value);
}

void MetricsText::sample(const Labels& l, uint64_t value) {
  labels(l);
  text_ += " " + std::to_string(value) + "\n";
}

namespace {

struct CounterMetric {
  MeterCounter counter;
  const char* name;  // after "tpscope_" and before "_bytes_total"
  const char* what;
};
constexpr CounterMetric kCounters[] = {
    {MeterCounter::kPcieRx, "pcie_rx", "PCIe bytes the GPU received (H2D, peer reads and writes into it)"},
    {MeterCounter::kPcieTx, "pcie_tx", "PCIe bytes the GPU sent (D2H, peer traffic out of it)"},
    {MeterCounter::kNvlinkRx, "nvlink_rx", "NVLink data bytes the GPU received, summed over its links"},
    {MeterCounter::kNvlinkTx, "nvlink_tx", "NVLink data bytes the GPU sent, summed over its links"},
    {MeterCounter::kNvlinkRawRx, "nvlink_raw_rx", "NVLink bytes received with protocol, summed over its links"},
    {MeterCounter::kNvlinkRawTx, "nvlink_raw_tx", "NVLink bytes sent with protocol, summed over its links"},
};

MetricsText::Labels gpuLabels(const MeterGpu& g) {
  return {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"bus_id", g.bus_id}};
}

MetricsText::Labels with(MetricsText::Labels l, const char* key, const std::string& value) {
  l.emplace_back(key, value);
  return l;
}

bool anySupported(const std::vector<MeterGpu>& gpus, MeterCounter c) {
  for (const MeterGpu& g : gpus)
    if (g.supported[static_cast<int>(c)]) return true;
  return false;
}

}  // namespace

std::string renderMetrics(const Meter& meter, const ExpositionContext& ctx) {
  MetricsText m;
  const std::vector<MeterGpu>& gpus = meter.gpus();
  const int n = static_cast<int>(gpus.size());
  std::vector<std::optional<MeterSample>> latest(n);
  for (int k = 0; k < n; ++k) latest[k] = meter.latest(k);

  // The byte counters as the GPU counted them, then what the meter's own reads added to each: net is
  // the difference (rate(tpscope_pcie_rx_bytes_total[1m]) - rate(tpscope_meter_own_pcie_rx_bytes_total[1m])).
  for (const CounterMetric& cm : kCounters) {
    if (!anySupported(gpus, cm.counter)) continue;
    m.family(std::string("tpscope_") + cm.name + "_bytes_total", "counter",
             std::string(cm.what) + ", since the meter started (includes the meter's own reads)");
    for (int k = 0; k < n; ++k) {
      const int c = static_cast<int>(cm.counter);
      if (gpus[k].supported[c] && latest[k] && latest[k]->bytes[c]) m.sample(gpuLabels(gpus[k]), *latest[k]->bytes[c]);
    }
  }
  if (meter.calibration().calibrated) {
    for (const CounterMetric& cm : kCounters) {
      if (!anySupported(gpus, cm.counter)) continue;
      m.family(std::string("tpscope_meter_own_") + cm.name + "_bytes_total", "counter",
               std::string("Bytes the meter's own reads added to tpscope_") + cm.name +
                   "_bytes_total (reads x calibrated cost per read)");
      for (int k = 0; k < n; ++k)
        if (gpus[k].supported[static_cast<int>(cm.counter)])
          if (const std::optional<double> own = meter.ownBytesSoFar(k, cm.counter))
            m.sample(gpuLabels(gpus[k]), static_cast<uint64_t>(std::llround(*own)));
    }
  }

  m.family("tpscope_meter_reads_total", "counter",
           "Counter reads the meter made, by kind (pcie_read, nvlink_read, dmon_call)");
  for (int k = 0; k < n; ++k)
    for (int r = 0; r < kMeterReadKinds; ++r) {
      const MeterReadKind kind = static_cast<MeterReadKind>(r);
      if (kind == MeterReadKind::kNvlink && !gpus[k].supported[static_cast<int>(MeterCounter::kNvlinkTx)] &&
          !gpus[k].supported[static_cast<int>(MeterCounter::kNvlinkRx)])
        continue;
      const std::vector<std::string>& sources = meter.options().sources;
      if (kind == MeterReadKind::kDmon && std::find(sources.begin(), sources.end(), "dmon") == sources.end()) continue;
      m.sample(with(gpuLabels(gpus[k]), "kind", meterReadKindName(kind)), static_cast<uint64_t>(meter.reads(k, kind)));
    }

  const std::vector<MeterCadence> cadence = meter.cadence();
  auto perStream = [&](const char* name, const char* type, const char* help, auto value) {
    m.family(name, type, help);
    for (const MeterCadence& c : cadence)
      if (c.gpu >= 0 && c.gpu < n) value(c, with(gpuLabels(gpus[c.gpu]), "group", meterGroupName(c.group)));
  };
  perStream("tpscope_meter_failed_reads_total", "counter",
            "Reads that returned no value for a counter the GPU supports",
            [&](const MeterCadence& c, const MetricsText::Labels& l) { m.sample(l, uint64_t(c.failed_reads)); });
  perStream("tpscope_meter_wrap_gaps_total", "counter",
            "PCIe read gaps long enough for a 32-bit counter to wrap unseen at the link's ceiling (should stay 0)",
            [&](const MeterCadence& c, const MetricsText::Labels& l) {
              if (c.group == MeterGroup::kPcie) m.sample(l, uint64_t(c.wrap_gaps));
            });
  perStream(
      "tpscope_meter_read_period_seconds", "gauge",
      "Configured period between reads of a counter group: state busy while the link moves, idle while it is quiet",
      [&](const MeterCadence& c, const MetricsText::Labels& l) {
        m.sample(with(l, "state", "busy"), c.period_target_ms * 1e-3);
        m.sample(with(l, "state", "idle"), c.idle_period_ms * 1e-3);
      });
  perStream("tpscope_meter_read_period_median_seconds", "gauge",
            "Median period between reads of a counter group over the meter's recent history",
            [&](const MeterCadence& c, const MetricsText::Labels& l) {
              if (c.reads > 1) m.sample(l, c.period_p50_ms * 1e-3);
            });

  m.family("tpscope_pcie_link_generation", "gauge", "PCIe generation the link trained at now");
  auto linkGauge = [&](std::optional<int> MeterPcieLink::*field) {
    for (int k = 0; k < n && k < static_cast<int>(ctx.links.size()); ++k)
      if (const std::optional<int>& v = ctx.links[k].*field) m.sample(gpuLabels(gpus[k]), double(*v));
  };
  linkGauge(&MeterPcieLink::gen_current);
  m.family("tpscope_pcie_link_generation_max", "gauge", "Highest PCIe generation the GPU and its slot support");
  linkGauge(&MeterPcieLink::gen_max);
  m.family("tpscope_pcie_link_width", "gauge", "PCIe lanes the link trained with now");
  linkGauge(&MeterPcieLink::width_current);
  m.family("tpscope_pcie_link_width_max", "gauge", "Most PCIe lanes the GPU and its slot support");
  linkGauge(&MeterPcieLink::width_max);
  m.family(
      "tpscope_pcie_link_below_max", "gauge",
      "1 when the PCIe link trained below its maximum generation or width (an idle link may train down to save power)");
  for (int k = 0; k < n && k < static_cast<int>(ctx.links.size()); ++k)
    m.sample(gpuLabels(gpus[k]), ctx.links[k].belowMax() ? 1.0 : 0.0);

  m.family("tpscope_pcie_ceiling_bytes_per_second", "gauge",
           "PCIe line rate per direction at the maximum generation and width");
  for (int k = 0; k < n; ++k)
    if (gpus[k].pcie_ceiling_mbps) m.sample(gpuLabels(gpus[k]), *gpus[k].pcie_ceiling_mbps * 1e6);
  if (anySupported(gpus, MeterCounter::kNvlinkTx) || anySupported(gpus, MeterCounter::kNvlinkRx)) {
    m.family("tpscope_nvlink_ceiling_bytes_per_second", "gauge", "NVLink data rate per direction, links up x rate");
    for (int k = 0; k < n; ++k)
      if (gpus[k].nvlink_ceiling_mbps) m.sample(gpuLabels(gpus[k]), *gpus[k].nvlink_ceiling_mbps * 1e6);
    m.family("tpscope_nvlink_links", "gauge", "NVLink links whose counters are summed");
    for (int k = 0; k < n; ++k) m.sample(gpuLabels(gpus[k]), double(gpus[k].nvlink_links));
  }

  m.family("tpscope_gpu_info", "gauge", "The metered GPUs (value 1), with their names");
  for (int k = 0; k < n; ++k) m.sample(with(gpuLabels(gpus[k]), "name", gpus[k].name), 1.0);
  m.family("tpscope_meter_calibrated", "gauge",
           "1 when the meter measured what its own reads cost (tpscope_meter_own_* exist), 0 when not");
  m.sample({}, meter.calibration().calibrated ? 1.0 : 0.0);
  m.family("tpscope_meter_start_time_seconds", "gauge",
           "When the meter started, Unix time: the byte counters count from here");
  m.sample({}, ctx.start_unix_s);
  return m.text();
}

}  // namespace tpscope::detail
