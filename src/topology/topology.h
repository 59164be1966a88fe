// SPDX-License-Identifier: Apache-2.0
// topology.h - the GPUs of this host, their links and what each pair can do directly.
//
// Everything a user needs before choosing a split mode and an AllReduce path: per GPU its PCIe link
// (current and max generation and width) and ceiling, NVLink links up and their rate, copy engines and
// host-native atomics; per pair the link like `nvidia-smi topo -m` (NV18, PIX, PHB, SYS, ...) with P2P
// access and P2P atomics. Values NVML cannot give are std::nullopt (N/A, JSON null), never 0.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope {

struct GpuInfo {
  int index = 0;  // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;
  std::string bus_id;  // "0000:18:00.0"
  uint64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::optional<int> pcie_gen_current, pcie_gen_max, pcie_width_current, pcie_width_max;
  std::optional<double> pcie_ceiling_mbps;  // per direction, from max generation x max width
  std::optional<int> nvlink_links_up;       // nullopt when NVML cannot say
  std::optional<double> nvlink_link_rate_mbps;
  std::optional<double> nvlink_ceiling_mbps;  // per direction, links up x rate
  int copy_engines = 0;                       // cudaDeviceProp::asyncEngineCount
  bool host_native_atomics = false;           // cudaDevAttrHostNativeAtomicSupported
  bool can_map_host_memory = false;
};

// How two GPUs are connected, in nvidia-smi topo -m terms.
enum class LinkKind { kSelf, kNvlink, kPix, kPxb, kPhb, kNode, kSys, kUnknown };

struct PairInfo {
  int from = 0, to = 0;  // CUDA ordinals
  LinkKind kind = LinkKind::kUnknown;
  int nvlink_links = 0;      // links that join the pair (directly or through NVSwitch)
  bool p2p_access = false;   // cudaDeviceCanAccessPeer(from, to)
  bool p2p_atomics = false;  // cudaDevP2PAttrNativeAtomicSupported
  std::optional<int> performance_rank;
};

struct Topology {
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<PairInfo>> pairs;  // pairs[i][j], i, j index into gpus
  std::string driver_version;                // from NVML; empty when NVML is unavailable
  int cuda_driver_version = 0;               // cudaDriverGetVersion, e.g. 13000
  int cuda_runtime_version = 0;
  bool nvml_available = false;
  std::string nvml_reason;  // why NVML is unavailable
};

// "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "X" (self), "?" (unknown).
std::string linkLabel(const PairInfo& p);

// The number of CUDA devices, or an error with a one-sentence reason (no driver, no GPU).
tpsResult_t cudaDeviceCount(int* count, std::string* reason);

// Queries `devices` (CUDA ordinals; empty means all). Returns tpsUnavailable with *reason when no GPU or
// no driver is present, tpsInvalidArgument when an ordinal does not exist.
tpsResult_t queryTopology(const std::vector<int>& devices, Topology* out, std::string* reason);

// The JSON form printed by `tpscope topo --format json` and embedded in benchmark and run records.
nlohmann::json toJson(const Topology& topo);

}  // namespace tpscope
