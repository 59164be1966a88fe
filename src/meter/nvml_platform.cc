// SPDX-License-Identifier: Apache-2.0
// nvml_platform.cc - the real GPUs: NVML field values for the counters, the throughput call for dmon.
#include "meter/nvml_platform.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "topology/topology.h"

namespace tpscope::detail {

namespace {

int64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

uint64_t valueOf(const nvmlFieldValue_t& f) {
  switch (f.valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT: return f.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return f.value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return f.value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return static_cast<uint64_t>(f.value.sllVal);
    case NVML_VALUE_TYPE_SIGNED_INT: return static_cast<uint32_t>(f.value.siVal);
    default: return 0;
  }
}

int widthOf(nvmlValueType_t t) {
  return (t == NVML_VALUE_TYPE_UNSIGNED_INT || t == NVML_VALUE_TYPE_SIGNED_INT) ? 32 : 64;
}

}  // namespace

NvmlCounterReader::NvmlCounterReader(const nvml::Api* api, nvmlDevice_t dev, const std::vector<unsigned>& links,
                                     bool nvlink_raw, int links_per_call)
    : api_(api), dev_(dev) {
  std::vector<nvmlFieldValue_t> fields;
  std::vector<int> counter_of;
  auto add = [&](unsigned field, unsigned scope, MeterCounter c) {
    nvmlFieldValue_t f{};
    f.fieldId = field;
    f.scopeId = scope;
    fields.push_back(f);
    counter_of.push_back(static_cast<int>(c));
  };
  add(kFieldPcieTx, 0, MeterCounter::kPcieTx);
  add(kFieldPcieRx, 0, MeterCounter::kPcieRx);
  for (unsigned link : links) {
    add(kFieldNvlinkTx, link, MeterCounter::kNvlinkTx);
    add(kFieldNvlinkRx, link, MeterCounter::kNvlinkRx);
    if (nvlink_raw) {
      add(kFieldNvlinkRawTx, link, MeterCounter::kNvlinkRawTx);
      add(kFieldNvlinkRawRx, link, MeterCounter::kNvlinkRawRx);
    }
  }
  // Probe: a counter is supported when every one of its fields succeeds (GeForce answers N/A for
  // NVLink data; drivers before R555 have no PCIe byte counters).
  std::vector<nvmlFieldValue_t> probe = fields;
  nvmlReturn_t r = api_->deviceGetFieldValues(dev_, static_cast<int>(probe.size()), probe.data());
  uint32_t failed = 0, seen = 0;
  for (size_t i = 0; i < probe.size(); ++i) {
    const uint32_t bit = 1u << counter_of[i];
    seen |= bit;
    if (r != NVML_SUCCESS || probe[i].nvmlReturn != NVML_SUCCESS) {
      failed |= bit;
      TPS_LOG_INFO("NVML field {} scope {}: {}; counter {} is N/A", probe[i].fieldId, probe[i].scopeId,
                   nvml::Nvml::errorString(r != NVML_SUCCESS ? r : probe[i].nvmlReturn),
                   meterCounterName(static_cast<MeterCounter>(counter_of[i])));
    } else {
      width_[counter_of[i]] = widthOf(probe[i].valueType);
    }
  }
  supported_ = seen & ~failed;
  // Keep only the fields of supported counters, so a read never pays for a field that fails; each
  // group gets its own list (its thread refills it), links in order.
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!(supported_ & (1u << counter_of[i]))) continue;
    Group& g = groups_[static_cast<int>(groupOf(static_cast<MeterCounter>(counter_of[i])))];
    g.fields.push_back(fields[i]);
    g.counter_of.push_back(counter_of[i]);
  }
  Group& pcie = groups_[static_cast<int>(MeterGroup::kPcie)];
  pcie.per_call = static_cast<int>(pcie.fields.size());
  Group& nvl = groups_[static_cast<int>(MeterGroup::kNvlink)];
  const int per_link = __builtin_popcount(supported_ & groupMask(MeterGroup::kNvlink));
  nvl.per_call = links_per_call > 0 ? std::min<int>(per_link * links_per_call, static_cast<int>(nvl.fields.size()))
                                    : static_cast<int>(nvl.fields.size());
  if (supported_ & (1u << static_cast<int>(MeterCounter::kNvlinkTx))) links_read_ = static_cast<int>(links.size());
}

bool NvmlCounterReader::read(MeterGroup group, Reading* out) {
  Group& g = groups_[static_cast<int>(group)];
  *out = Reading{};
  if (g.fields.empty()) {
    out->t_before_ns = out->t_after_ns = monotonicNs();
    return false;
  }
  // The pair (monotonic, realtime) maps NVML's wall-clock stamps into the monotonic clock. Both are
  // vDSO reads (tens of ns), taken back to back so their difference is the current offset.
  out->t_before_ns = monotonicNs();
  const int64_t realtime_offset = realtimeNs() - out->t_before_ns;
  const int n_fields = static_cast<int>(g.fields.size());
  for (int i = 0; i < n_fields; i += g.per_call) {
    const int n = std::min(g.per_call, n_fields - i);
    const nvmlReturn_t r = api_->deviceGetFieldValues(dev_, n, g.fields.data() + i);
    if (r != NVML_SUCCESS)
      for (int j = i; j < i + n; ++j) g.fields[j].nvmlReturn = r;  // the call failed: so did its fields
  }
  out->t_after_ns = monotonicNs();
  const int64_t mid = out->t_before_ns + (out->t_after_ns - out->t_before_ns) / 2;
  std::array<int64_t, kMeterCounters> t_sum{};
  std::array<int, kMeterCounters> n{};
  uint32_t failed = 0;
  for (int i = 0; i < n_fields; ++i) {
    const nvmlFieldValue_t& f = g.fields[i];
    const int c = g.counter_of[i];
    if (f.nvmlReturn != NVML_SUCCESS) {
      failed |= 1u << c;
      if (out->error == nullptr)  // NVML's text is static; a partial API (tests) may lack the call
        out->error = api_->errorString ? api_->errorString(f.nvmlReturn) : "NVML error";
      continue;
    }
    if (out->nvml_timestamp_us == 0) out->nvml_timestamp_us = f.timestamp;
    // NVLink fields are KiB per link: sum the links, then convert once.
    out->raw[c] += valueOf(f);
    int64_t t = f.timestamp > 0 ? f.timestamp * 1000 - realtime_offset : mid;
    if (t < out->t_before_ns || t > out->t_after_ns) t = mid;  // a clock step: trust the bracket
    t_sum[c] += t - out->t_before_ns;
    ++n[c];
  }
  for (int c = 0; c < kMeterCounters; ++c) {
    if (n[c] == 0) continue;
    if (!isPcie(static_cast<MeterCounter>(c))) out->raw[c] *= 1024;
    // The links of one counter are read one after another; their sum is the value at their mean time.
    out->t_ns[c] = out->t_before_ns + t_sum[c] / n[c];
    out->valid |= 1u << c;
  }
  out->valid &= ~failed;  // a partial sum over the links is not a value
  return out->valid != 0;
}

bool NvmlDmonReader::read(MeterCounter direction, MeterDmonSample* out) {
  out->gpu = gpu_;
  out->counter = direction;
  out->mbps.reset();
  unsigned kbps = 0;
  const nvmlPcieUtilCounter_t which =
      direction == MeterCounter::kPcieTx ? NVML_PCIE_UTIL_TX_BYTES : NVML_PCIE_UTIL_RX_BYTES;
  out->t_before_ns = monotonicNs();
  nvmlReturn_t r = api_->deviceGetPcieThroughput(dev_, which, &kbps);
  out->t_after_ns = monotonicNs();
  // NVML documents KB/s; read as 1000 bytes, it matches the byte counters on H200 (METHOD.md).
  if (r == NVML_SUCCESS) out->mbps = kbps / 1000.0;
  return r == NVML_SUCCESS;
}

namespace {

class NvmlPlatform : public Platform {
 public:
  NvmlPlatform(const MeterOptions& options, const nvml::Api* api, std::vector<nvmlDevice_t> handles,
               std::vector<MeterGpu> gpus)
      : options_(options), api_(api), handles_(std::move(handles)), gpus_(std::move(gpus)) {}
  const std::vector<MeterGpu>& gpus() const override { return gpus_; }

  std::unique_ptr<CounterReader> counterReader(size_t k, std::string*) override {
    std::vector<unsigned> links;
    if (options_.nvlink && api_->deviceGetNvLinkState != nullptr) {
      for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
        nvmlEnableState_t active = NVML_FEATURE_DISABLED;
        if (api_->deviceGetNvLinkState(handles_[k], link, &active) == NVML_SUCCESS && active == NVML_FEATURE_ENABLED)
          links.push_back(link);
      }
    }
    return std::make_unique<NvmlCounterReader>(api_, handles_[k], links, options_.nvlink_raw,
                                               options_.nvlink_links_per_call);
  }

  std::unique_ptr<DmonReader> dmonReader(size_t k, std::string* reason) override {
    if (api_->deviceGetPcieThroughput == nullptr) {
      *reason = "cannot use the dmon method: this NVML has no nvmlDeviceGetPcieThroughput";
      return nullptr;
    }
    return std::make_unique<NvmlDmonReader>(api_, handles_[k], static_cast<int>(k));
  }

  tpsResult_t pmReaders(std::vector<std::unique_ptr<PmReader>>* out, std::string* reason) override {
    return openCuptiPmReaders(options_, gpus_, out, reason);
  }

  std::optional<std::vector<unsigned>> processes(size_t k) override {
    if (api_->deviceGetComputeRunningProcesses == nullptr) return std::nullopt;
    std::vector<nvmlProcessInfo_t> infos(64);
    unsigned count = static_cast<unsigned>(infos.size());
    if (api_->deviceGetComputeRunningProcesses(handles_[k], &count, infos.data()) != NVML_SUCCESS) return std::nullopt;
    std::vector<unsigned> pids;
    for (unsigned i = 0; i < count; ++i) pids.push_back(infos[i].pid);
    return pids;
  }

  MeterPcieLink pcieLink(size_t k) override {
    MeterPcieLink l;
    auto get = [&](decltype(api_->deviceGetCurrPcieLinkWidth) f, std::optional<int>* v) {
      unsigned x = 0;
      if (f && f(handles_[k], &x) == NVML_SUCCESS) *v = static_cast<int>(x);
    };
    get(api_->deviceGetCurrPcieLinkGeneration, &l.gen_current);
    get(api_->deviceGetMaxPcieLinkGeneration, &l.gen_max);
    get(api_->deviceGetCurrPcieLinkWidth, &l.width_current);
    get(api_->deviceGetMaxPcieLinkWidth, &l.width_max);
    return l;
  }

 private:
  MeterOptions options_;
  const nvml::Api* api_;
  std::vector<nvmlDevice_t> handles_;
  std::vector<MeterGpu> gpus_;
};

}  // namespace

tpsResult_t openNvmlPlatform(const MeterOptions& options, std::unique_ptr<Platform>* out, std::string* reason) {
  Topology topo;
  if (tpsResult_t r = queryTopology(options.devices, &topo, reason); r != tpsSuccess) return r;
  const nvml::Api* api = nvml::Nvml::get();
  if (api == nullptr) {
    *reason = "cannot meter: " + nvml::Nvml::unavailableReason();
    return tpsUnavailable;
  }
  std::vector<nvmlDevice_t> handles;
  std::vector<MeterGpu> gpus;
  for (const GpuInfo& g : topo.gpus) {
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = api->deviceGetHandleByPciBusId(g.bus_id.c_str(), &dev);
    if (r != NVML_SUCCESS) {
      *reason = "NVML does not know GPU " + std::to_string(g.index) + " (bus " + g.bus_id +
                "): " + nvml::Nvml::errorString(r);
      return tpsUnavailable;
    }
    handles.push_back(dev);
    MeterGpu m;
    m.index = g.index;
    m.name = g.name;
    m.bus_id = g.bus_id;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (api->deviceGetUUID && api->deviceGetUUID(dev, uuid, sizeof(uuid)) == NVML_SUCCESS) m.uuid = uuid;
    m.pcie_ceiling_mbps = g.pcie_ceiling_mbps;
    m.nvlink_ceiling_mbps = g.nvlink_ceiling_mbps;
    gpus.push_back(std::move(m));
  }
  *out = std::make_unique<NvmlPlatform>(options, api, std::move(handles), std::move(gpus));
  return tpsSuccess;
}

}  // namespace tpscope::detail
