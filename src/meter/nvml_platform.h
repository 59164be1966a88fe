// SPDX-License-Identifier: Apache-2.0
// nvml_platform.h - the real GPUs: NVML field-value counters and the dmon method per GPU (the platform
// of source.h; its PM readers are CUPTI's, pm_cupti.cc).
#pragma once

#include <nvml.h>

#include <vector>

#include "meter/source.h"
#include "nvml/nvml_loader.h"

namespace tpscope::detail {

// Field ids (nvml.h; each read back on H200 with the widths and units noted here).
constexpr unsigned kFieldPcieTx = 197;       // NVML_FI_DEV_PCIE_COUNT_TX_BYTES: bytes, 32-bit, wraps
constexpr unsigned kFieldPcieRx = 198;       // NVML_FI_DEV_PCIE_COUNT_RX_BYTES
constexpr unsigned kFieldNvlinkTx = 138;     // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: KiB per link
constexpr unsigned kFieldNvlinkRx = 139;     // ..._DATA_RX
constexpr unsigned kFieldNvlinkRawTx = 140;  // ..._RAW_TX: data + protocol, KiB per link
constexpr unsigned kFieldNvlinkRawRx = 141;  // ..._RAW_RX

// Reads one GPU's counters in two groups (MeterGroup), each with its own field list so the two
// sampler threads never share a buffer: PCIe TX/RX in one nvmlDeviceGetFieldValues call, and per
// active link the NVLink fields with scopeId = link, `links_per_call` links per call (0: all in one
// call). (scopeId UINT_MAX, "all links", returned success with value 0 on a freshly booted H200, and
// without a scope only link 0 comes back: so we sum the links ourselves.)
class NvmlCounterReader : public CounterReader {
 public:
  // Probes the fields once; those that fail are dropped and their counters are N/A.
  NvmlCounterReader(const nvml::Api* api, nvmlDevice_t dev, const std::vector<unsigned>& links, bool nvlink_raw,
                    int links_per_call = 0);
  uint32_t supported() const override { return supported_; }
  int widthBits(MeterCounter c) const override { return width_[static_cast<int>(c)]; }
  int nvlinkLinks() const override { return links_read_; }
  bool read(MeterGroup group, Reading* out) override;
  // Fields in one NVML call of this group's read (the last call of a read may have fewer).
  int fieldsPerCall(MeterGroup group) const { return groups_[static_cast<int>(group)].per_call; }

 private:
  struct Group {
    std::vector<nvmlFieldValue_t> fields;  // preallocated: read() only refills it
    std::vector<int> counter_of;           // fields[i] feeds counter counter_of[i]
    int per_call = 0;
  };
  const nvml::Api* api_;
  nvmlDevice_t dev_;
  std::array<Group, kMeterGroups> groups_;
  uint32_t supported_ = 0;
  int links_read_ = 0;
  std::array<int, kMeterCounters> width_{32, 32, 64, 64, 64, 64};
};

class NvmlDmonReader : public DmonReader {
 public:
  NvmlDmonReader(const nvml::Api* api, nvmlDevice_t dev, int gpu) : api_(api), dev_(dev), gpu_(gpu) {}
  bool read(MeterCounter direction, MeterDmonSample* out) override;

 private:
  const nvml::Api* api_;
  nvmlDevice_t dev_;
  int gpu_;
};

}  // namespace tpscope::detail
