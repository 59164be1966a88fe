// SPDX-License-Identifier: Apache-2.0
// topology.cc - queries CUDA and NVML for the devices, links and P2P matrix.
#include "topology/topology.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "nvml/nvml_loader.h"
#include "topology/ceilings.h"

namespace tpscope {

namespace {

struct NvlinkScan {
  int links_up = 0;
  int switch_links = 0;
  std::vector<nvmlPciInfo_t> remote_gpus;  // one entry per active link that ends at a GPU
};

bool samePci(const nvmlPciInfo_t& a, const nvmlPciInfo_t& b) {
  return a.domain == b.domain && a.bus == b.bus && a.device == b.device;
}

std::optional<unsigned> readField(const nvml::Api* api, nvmlDevice_t dev, unsigned field, unsigned scope = 0) {
  nvmlFieldValue_t fv{};
  fv.fieldId = field;
  fv.scopeId = scope;
  if (api->deviceGetFieldValues(dev, 1, &fv) != NVML_SUCCESS || fv.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  return fv.value.uiVal;
}

NvlinkScan scanNvlink(const nvml::Api* api, nvmlDevice_t dev) {
  NvlinkScan s;
  if (api->deviceGetNvLinkState == nullptr) return s;
  for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = NVML_FEATURE_DISABLED;
    if (api->deviceGetNvLinkState(dev, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
    ++s.links_up;
    nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_GPU;
    if (api->deviceGetNvLinkRemoteDeviceType != nullptr &&
        api->deviceGetNvLinkRemoteDeviceType(dev, link, &type) == NVML_SUCCESS &&
        type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
      ++s.switch_links;
      continue;
    }
    nvmlPciInfo_t remote{};
    if (api->deviceGetNvLinkRemotePciInfo != nullptr &&
        api->deviceGetNvLinkRemotePciInfo(dev, link, &remote) == NVML_SUCCESS)
      s.remote_gpus.push_back(remote);
  }
  return s;
}

LinkKind kindFromAncestor(nvmlGpuTopologyLevel_t level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE: return LinkKind::kPix;
    case NVML_TOPOLOGY_MULTIPLE: return LinkKind::kPxb;
    case NVML_TOPOLOGY_HOSTBRIDGE: return LinkKind::kPhb;
    case NVML_TOPOLOGY_NODE: return LinkKind::kNode;
    case NVML_TOPOLOGY_SYSTEM: return LinkKind::kSys;
  }
  return LinkKind::kUnknown;
}

const char* kindName(LinkKind k) {
  switch (k) {
    case LinkKind::kSelf: return "X";
    case LinkKind::kNvlink: return "NV";
    case LinkKind::kPix: return "PIX";
    case LinkKind::kPxb: return "PXB";
    case LinkKind::kPhb: return "PHB";
    case LinkKind::kNode: return "NODE";
    case LinkKind::kSys: return "SYS";
    case LinkKind::kUnknown: break;
  }
  return "?";
}

template <typename T>
nlohmann::json opt(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string linkLabel(const PairInfo& p) {
  if (p.kind == LinkKind::kNvlink) return "NV" + std::to_string(p.nvlink_links);
  return kindName(p.kind);
}

tpsResult_t cudaDeviceCount(int* count, std::string* reason) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaSuccess && *count > 0) return tpsSuccess;
  (void)cudaGetLastError();
  *count = 0;
  switch (e) {
    case cudaSuccess:
    case cudaErrorNoDevice: *reason = "no CUDA GPU is visible on this machine"; break;
    case cudaErrorInsufficientDriver:
      *reason = "no usable NVIDIA driver on this machine (CUDA: " + std::string(cudaGetErrorString(e)) + ")";
      break;
    default: *reason = std::string("CUDA cannot start: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  }
  return tpsUnavailable;
}

namespace {

// "" when every index names a GPU of the `count` this machine has, else the sentence saying which does not.
std::string missingDevice(const std::vector<int>& ids, int count) {
  for (int id : ids)
    if (id < 0 || id >= count)
      return "GPU index " + std::to_string(id) + " does not exist: this machine has " + std::to_string(count) +
             (count == 1 ? " GPU (0)" : " GPUs (0-" + std::to_string(count - 1) + ")");
  return "";
}

// What CUDA says of GPU g->index: name, PCI bus, memory, compute capability, engines, host mapping and atomics.
tpsResult_t readCudaGpu(GpuInfo* g, std::string* reason) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, g->index) != cudaSuccess) {
    (void)cudaGetLastError();
    *reason = "cudaGetDeviceProperties failed for GPU " + std::to_string(g->index);
    return tpsCudaError;
  }
  g->name = prop.name;
  char bus[32] = {};
  (void)cudaDeviceGetPCIBusId(bus, sizeof(bus), g->index);
  g->bus_id = bus;
  g->memory_bytes = prop.totalGlobalMem;
  g->cc_major = prop.major;
  g->cc_minor = prop.minor;
  g->sm_count = prop.multiProcessorCount;
  g->copy_engines = prop.asyncEngineCount;
  g->can_map_host_memory = prop.canMapHostMemory != 0;
  int atomics = 0;
  (void)cudaDeviceGetAttribute(&atomics, cudaDevAttrHostNativeAtomicSupported, g->index);
  g->host_native_atomics = atomics != 0;
  return tpsSuccess;
}

// What NVML adds for the GPU behind `h`: PCIe generation and width with their ceiling, the NVLink links up
// with their rate and ceiling; *pci and *scan keep what the pairs need.
void readNvmlGpu(const nvml::Api* api, nvmlDevice_t h, GpuInfo* g, nvmlPciInfo_t* pci, NvlinkScan* scan) {
  unsigned v = 0;
  if (api->deviceGetCurrPcieLinkGeneration && api->deviceGetCurrPcieLinkGeneration(h, &v) == NVML_SUCCESS)
    g->pcie_gen_current = static_cast<int>(v);
  if (api->deviceGetMaxPcieLinkGeneration && api->deviceGetMaxPcieLinkGeneration(h, &v) == NVML_SUCCESS)
    g->pcie_gen_max = static_cast<int>(v);
  if (api->deviceGetCurrPcieLinkWidth && api->deviceGetCurrPcieLinkWidth(h, &v) == NVML_SUCCESS)
    g->pcie_width_current = static_cast<int>(v);
  if (api->deviceGetMaxPcieLinkWidth && api->deviceGetMaxPcieLinkWidth(h, &v) == NVML_SUCCESS)
    g->pcie_width_max = static_cast<int>(v);
  if (g->pcie_gen_max && g->pcie_width_max)
    g->pcie_ceiling_mbps = pcieCeilingMBps(*g->pcie_gen_max, *g->pcie_width_max);
  if (api->deviceGetPciInfo) (void)api->deviceGetPciInfo(h, pci);
  *scan = scanNvlink(api, h);
  g->nvlink_links_up = scan->links_up;
  if (scan->links_up > 0) {
    std::optional<unsigned> rate = readField(api, h, NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON);
    if (!rate || *rate == 0) rate = readField(api, h, NVML_FI_DEV_NVLINK_GET_SPEED, 0);
    if (rate && *rate > 0) {
      g->nvlink_link_rate_mbps = *rate;
      g->nvlink_ceiling_mbps = nvlinkCeilingMBps(scan->links_up, *rate);
    }
  }
}

// What CUDA says of the pair p->from -> p->to: peer access, peer atomics, performance rank.
void readCudaPair(PairInfo* p) {
  int access = 0, atomics = 0, rank = 0;
  if (cudaDeviceCanAccessPeer(&access, p->from, p->to) == cudaSuccess) p->p2p_access = access != 0;
  if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, p->from, p->to) == cudaSuccess)
    p->p2p_atomics = atomics != 0;
  if (cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, p->from, p->to) == cudaSuccess)
    p->performance_rank = rank;
  (void)cudaGetLastError();
}

// What NVML says of the pair from GPU a (handle ha, scan sa) to GPU b: its NVLink links, else the PCIe path's kind.
void readNvmlPair(const nvml::Api* api, nvmlDevice_t ha, nvmlDevice_t hb, const NvlinkScan& sa, const NvlinkScan& sb,
                  const nvmlPciInfo_t& pci_b, PairInfo* p) {
  // Links that end at the peer directly, plus links through NVSwitch when both GPUs have some.
  int direct = static_cast<int>(std::count_if(sa.remote_gpus.begin(), sa.remote_gpus.end(),
                                              [&](const nvmlPciInfo_t& r) { return samePci(r, pci_b); }));
  int via_switch = (sa.switch_links > 0 && sb.switch_links > 0) ? std::min(sa.switch_links, sb.switch_links) : 0;
  p->nvlink_links = direct + via_switch;
  if (p->nvlink_links == 0 && api->deviceGetP2PStatus != nullptr && sa.links_up > 0 && sb.links_up > 0) {
    // Some virtualised hosts hide the remote end of each link; NVML's P2P status still tells.
    nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
    if (api->deviceGetP2PStatus(ha, hb, NVML_P2P_CAPS_INDEX_NVLINK, &st) == NVML_SUCCESS && st == NVML_P2P_STATUS_OK)
      p->nvlink_links = std::min(sa.links_up, sb.links_up);
  }
  if (p->nvlink_links > 0) {
    p->kind = LinkKind::kNvlink;
  } else if (api->deviceGetTopologyCommonAncestor != nullptr) {
    nvmlGpuTopologyLevel_t level{};
    if (api->deviceGetTopologyCommonAncestor(ha, hb, &level) == NVML_SUCCESS) p->kind = kindFromAncestor(level);
  }
}

}  // namespace

tpsResult_t queryTopology(const std::vector<int>& devices, Topology* out, std::string* reason) {
  *out = Topology{};
  int count = 0;
  if (tpsResult_t r = cudaDeviceCount(&count, reason); r != tpsSuccess) return r;
  std::vector<int> ids = devices;
  if (ids.empty())
    for (int i = 0; i < count; ++i) ids.push_back(i);
  if (std::string missing = missingDevice(ids, count); !missing.empty()) {
    *reason = missing;
    return tpsInvalidArgument;
  }
  (void)cudaDriverGetVersion(&out->cuda_driver_version);
  (void)cudaRuntimeGetVersion(&out->cuda_runtime_version);

  const nvml::Api* api = nvml::Nvml::get();
  out->nvml_available = api != nullptr;
  out->nvml_reason = nvml::Nvml::unavailableReason();
  out->driver_version = nvml::Nvml::driverVersion();

  // The GPUs.
  std::vector<nvmlDevice_t> handles(ids.size(), nullptr);
  std::vector<nvmlPciInfo_t> pci(ids.size());
  std::vector<NvlinkScan> scans(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    GpuInfo g;
    g.index = ids[k];
    if (tpsResult_t r = readCudaGpu(&g, reason); r != tpsSuccess) return r;
    if (api != nullptr && api->deviceGetHandleByPciBusId(g.bus_id.c_str(), &handles[k]) == NVML_SUCCESS)
      readNvmlGpu(api, handles[k], &g, &pci[k], &scans[k]);
    out->gpus.push_back(std::move(g));
  }

  // Every ordered pair.
  const size_t n = ids.size();
  out->pairs.assign(n, std::vector<PairInfo>(n));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      PairInfo& p = out->pairs[a][b];
      p.from = ids[a];
      p.to = ids[b];
      if (a == b) {
        p.kind = LinkKind::kSelf;
        continue;
      }
      readCudaPair(&p);
      if (api == nullptr || handles[a] == nullptr || handles[b] == nullptr) continue;
      readNvmlPair(api, handles[a], handles[b], scans[a], scans[b], pci[b], &p);
    }
  }
  return tpsSuccess;
}

nlohmann::json toJson(const Topology& topo) {
  using nlohmann::json;
  json gpus = json::array();
  for (const GpuInfo& g : topo.gpus) {
    char cc[16];
    std::snprintf(cc, sizeof(cc), "%d.%d", g.cc_major, g.cc_minor);
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"bus_id", g.bus_id},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_capability", cc},
                    {"sm_count", g.sm_count},
                    {"pcie",
                     {{"gen_current", opt(g.pcie_gen_current)},
                      {"gen_max", opt(g.pcie_gen_max)},
                      {"width_current", opt(g.pcie_width_current)},
                      {"width_max", opt(g.pcie_width_max)},
                      {"ceiling_mbps_per_direction", opt(g.pcie_ceiling_mbps)}}},
                    {"nvlink",
                     {{"links_up", opt(g.nvlink_links_up)},
                      {"link_rate_mbps", opt(g.nvlink_link_rate_mbps)},
                      {"ceiling_mbps_per_direction", opt(g.nvlink_ceiling_mbps)}}},
                    {"copy_engines", g.copy_engines},
                    {"host_native_atomics", g.host_native_atomics},
                    {"can_map_host_memory", g.can_map_host_memory}});
  }
  json pairs = json::array();
  for (const auto& row : topo.pairs) {
    for (const PairInfo& p : row) {
      if (p.from == p.to) continue;
      pairs.push_back({{"from", p.from},
                       {"to", p.to},
                       {"link", linkLabel(p)},
                       {"nvlink_links", p.nvlink_links},
                       {"p2p_access", p.p2p_access},
                       {"p2p_atomics", p.p2p_atomics},
                       {"performance_rank", opt(p.performance_rank)}});
    }
  }
  return {{"driver_version", topo.driver_version.empty() ? json(nullptr) : json(topo.driver_version)},
          {"cuda_driver_version", topo.cuda_driver_version},
          {"cuda_runtime_version", topo.cuda_runtime_version},
          {"nvml",
           {{"available", topo.nvml_available},
            {"reason", topo.nvml_reason.empty() ? json(nullptr) : json(topo.nvml_reason)}}},
          {"gpus", gpus},
          {"pairs", pairs}};
}

}  // namespace tpscope
