// SPDX-License-Identifier: Apache-2.0
// media.cc - AllReduce media availability from topology and build.
#include "allreduce/media.h"

#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>

#include "allreduce/auto_table.h"
#include "allreduce/registry.h"
#include "allreduce/wire.h"

namespace tpscope {

namespace {

std::string pairName(const PairInfo& p) { return fmt::format("GPU{}-GPU{}", p.from, p.to); }

MediumStatus make(const char* id, const char* label, tpsBackend_t backend, bool hardware_ok, bool built,
                  std::string reason) {
  MediumStatus s{id, label, MediumState::kUnavailable, std::move(reason), backend};
  if (hardware_ok) {
    s.state = built ? MediumState::kAvailable : MediumState::kNotBuilt;
    if (!built) s.reason += "; this build has no backend for it yet";
  }
  return s;
}

}  // namespace

std::string ncclVersionString(int code) {
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
}

BackendsBuilt backendsBuilt() {
  BackendsBuilt b;
  // A backend is built when the registry has an algorithm of it (src/allreduce/algorithms/).
  auto built = [](tpsBackend_t k) { return !detail::pathsOf(k, 2, detail::kOneProcess).empty(); };
  b.host = built(tpsBackendHost);
  b.p2p = built(tpsBackendP2p);
  b.nccl = built(tpsBackendNccl);
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess && v > 0) b.nccl_version = v;
  return b;
}

const char* mediumStateName(MediumState s) {
  switch (s) {
    case MediumState::kAvailable: return "available";
    case MediumState::kUnavailable: return "unavailable";
    case MediumState::kNotBuilt: return "not built";
  }
  return "?";
}

std::vector<MediumStatus> evaluateMedia(const Topology& topo, const BackendsBuilt& built) {
  const size_t n = topo.gpus.size();
  std::vector<MediumStatus> out;
  if (n < 2) {
    const std::string why = fmt::format("an AllReduce needs 2 or more GPUs; this selection has {}", n);
    out.push_back(make("host", "host staging", tpsBackendHost, false, built.host, why));
    out.push_back(make("p2p_nvlink", "p2p over NVLink", tpsBackendP2p, false, built.p2p, why));
    out.push_back(make("p2p_pcie", "p2p over PCIe", tpsBackendP2p, false, built.p2p, why));
    out.push_back(make("nccl", "NCCL", tpsBackendNccl, false, built.nccl, why));
    return out;
  }

  // Host staging: every GPU must map pinned host memory, and the in-kernel wait uses __nanosleep (7.0+).
  {
    std::string why;
    bool ok = true;
    for (const GpuInfo& g : topo.gpus) {
      if (!g.can_map_host_memory) {
        ok = false;
        why = fmt::format("GPU{} cannot map pinned host memory", g.index);
        break;
      }
      if (g.cc_major < 7) {
        ok = false;
        why = fmt::format("GPU{} is compute capability {}.{}; the flag wait needs 7.0 or newer", g.index, g.cc_major,
                          g.cc_minor);
        break;
      }
    }
    if (ok) {
      bool atomics = true;
      for (const GpuInfo& g : topo.gpus) atomics = atomics && g.host_native_atomics;
      why = fmt::format("pinned, mapped host memory on all {} GPUs; host-native atomics {}", n,
                        atomics ? "yes" : "no, so flags are plain release stores, not atomics");
    }
    out.push_back(make("host", "host staging", tpsBackendHost, ok, built.host, why));
  }

  // Peer media: which pairs lack access, and which pairs have NVLink.
  const PairInfo* no_access = nullptr;
  const PairInfo* no_nvlink = nullptr;
  int min_links = 1 << 30;
  bool any_nvlink = false;
  for (const auto& row : topo.pairs) {
    for (const PairInfo& p : row) {
      if (p.from == p.to) continue;
      if (!p.p2p_access && no_access == nullptr) no_access = &p;
      if (p.kind == LinkKind::kNvlink) {
        any_nvlink = true;
        min_links = std::min(min_links, p.nvlink_links);
      } else if (no_nvlink == nullptr) {
        no_nvlink = &p;
      }
    }
  }
  const bool all_access = no_access == nullptr;
  const bool all_nvlink = no_nvlink == nullptr;
  {
    std::string why;
    if (!all_nvlink)
      why = fmt::format("{} has no NVLink ({})", pairName(*no_nvlink), linkLabel(*no_nvlink));
    else if (!all_access)
      why = fmt::format("NVLink is there but CUDA reports no peer access for {}", pairName(*no_access));
    else
      why = fmt::format("NV{} or more between every pair, peer access both ways", min_links);
    out.push_back(make("p2p_nvlink", "p2p over NVLink", tpsBackendP2p, all_nvlink && all_access, built.p2p, why));
  }
  {
    std::string why;
    bool ok = false;
    if (!all_access)
      why = fmt::format("no peer access between {} ({}): IOMMU, ACS or the driver forbids it", pairName(*no_access),
                        linkLabel(*no_access));
    else if (all_nvlink)
      why = "not used: NVLink joins every pair, so peer traffic takes NVLink";
    else {
      ok = true;
      why = any_nvlink ? "peer access over PCIe for the pairs without NVLink"
                       : "peer access over PCIe between every pair";
    }
    out.push_back(make("p2p_pcie", "p2p over PCIe", tpsBackendP2p, ok, built.p2p, why));
  }
  {
    std::string why;
    if (!built.nccl_version) {
      why = "libnccl could not be loaded";
    } else {
      const char* transport = all_access ? (all_nvlink ? "NVLink (P2P)" : "PCIe P2P") : "host shared memory (SHM)";
      why = fmt::format("NCCL {}; expected transport {}", ncclVersionString(*built.nccl_version), transport);
    }
    out.push_back(make("nccl", "NCCL", tpsBackendNccl, built.nccl_version.has_value(), built.nccl, why));
  }
  return out;
}

nlohmann::json toJson(const std::vector<MediumStatus>& media) {
  nlohmann::json a = nlohmann::json::array();
  for (const MediumStatus& p : media)
    a.push_back({{"id", p.id},
                 {"label", p.label},
                 {"state", mediumStateName(p.state)},
                 {"available", p.state == MediumState::kAvailable},
                 {"reason", p.reason}});
  return a;
}

nlohmann::json topologyDocument(const Topology& topo, const std::vector<MediumStatus>& media,
                                const std::string& nccl_version) {
  nlohmann::json doc = toJson(topo);
  doc["tpscope_version"] = tpsGetVersion();
  doc["nccl_version"] = nccl_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(nccl_version);
  doc["allreduce_paths"] = toJson(media);
  return doc;
}

const std::vector<uint64_t>& autoSizeClasses() {
  static const std::vector<uint64_t> kSizes{8u << 10, 64u << 10, 256u << 10, 1u << 20, 16u << 20, 256u << 20, 1u << 30};
  return kSizes;
}

AutoSummary autoPicks(const Topology& topo, const std::vector<MediumStatus>& media, const detail::AutoTable* table,
                      const std::string& why_no_table, size_t host_copy_threshold,
                      const std::function<detail::WireCode(uint64_t bytes, tpsBackend_t backend)>& wire) {
  auto available = [&](const char* id) {
    for (const MediumStatus& p : media)
      if (p.id == id) return p.state == MediumState::kAvailable;
    return false;
  };
  // The communicator's availability, predicted: p2p is created exactly when every pair has peer access
  // (which the p2p media's states already require), host and NCCL when their media are available.
  detail::Availability a;
  a.host = available("host");
  a.p2p = available("p2p_nvlink") || available("p2p_pcie");
  a.nccl = available("nccl");
  a.all_peer_access = topo.gpus.size() >= 2;
  for (const auto& row : topo.pairs)
    for (const PairInfo& p : row) a.all_peer_access = a.all_peer_access && (p.from == p.to || p.p2p_access);

  AutoSummary s;
  s.fingerprint = detail::boxFingerprint(topo);
  if (table)
    s.tune_file = fmt::format("tune file {}, measured {}", table->path, table->measured);
  else
    s.note = why_no_table;
  const int nranks = std::max<int>(2, static_cast<int>(topo.gpus.size()));
  detail::HostTuning tuning{};
  tuning.copy_threshold = host_copy_threshold;
  for (uint64_t bytes : autoSizeClasses()) {
    AutoPick pick;
    pick.bytes = bytes;
    bool from_table = false;
    pick.backend = detail::chooseAuto(a, bytes, table, &from_table);
    // The registry's choice within the backend (registry.h), as a communicator of these GPUs makes it.
    const int path = detail::chooseAlgorithm(detail::pathsOf(pick.backend, nranks, detail::kOneProcess), bytes,
                                             tpsBfloat16, nranks, detail::kOneProcess, tuning,
                                             wire ? wire(bytes, pick.backend) : detail::WireCode::kExact);
    const detail::AlgorithmInfo* algo = detail::algorithmOf(path);
    pick.algorithm = algo ? algo->label : "-";
    pick.wire = algo ? detail::wireName(algo->wire) : "-";
    pick.source = from_table ? s.tune_file : std::string("built-in default");
    s.picks.push_back(std::move(pick));
  }
  return s;
}

nlohmann::json toJson(const AutoSummary& summary) {
  nlohmann::json picks = nlohmann::json::array();
  for (const AutoPick& p : summary.picks)
    picks.push_back(
        {{"size_bytes", p.bytes},
         {"backend", p.backend == tpsBackendAuto ? nlohmann::json(nullptr) : nlohmann::json(tpsBackendName(p.backend))},
         {"algorithm", p.algorithm},
         {"wire", p.wire},
         {"source", p.source}});
  auto orNull = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"fingerprint", summary.fingerprint},     {"note", orNull(summary.note)},
          {"tune_file", orNull(summary.tune_file)}, {"wire_policy", summary.wire_policy},
          {"wire_note", orNull(summary.wire_note)}, {"picks", picks}};
}

}  // namespace tpscope
