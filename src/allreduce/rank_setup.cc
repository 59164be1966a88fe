// SPDX-License-Identifier: Apache-2.0
// rank_setup.cc - joining a rank-per-process communicator: the bootstrap, this rank's GPU, and which
// pairs of GPUs can reach each other.
#include "allreduce/rank_setup.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/checks.h"
#include "common/log.h"

namespace tpscope::detail {

namespace {

// What each rank tells the others about its GPU.
struct RankInfo {
  char pci_bus_id[32];  // "0000:19:00.0": names the GPU alike in every process, whatever its ordinal there
};

}  // namespace

tpsResult_t exchange(RankGroup& g, const char* what, tpsResult_t status, const void* mine, size_t bytes,
                     std::vector<char>* all) {
  const size_t slot = sizeof(int32_t) + bytes;
  std::vector<char> buf(slot * g.nranks, 0);
  const int32_t s = status;
  std::memcpy(buf.data() + slot * g.rank, &s, sizeof(s));
  if (bytes) std::memcpy(buf.data() + slot * g.rank + sizeof(s), mine, bytes);
  std::string error;
  const tpsResult_t r = g.boot->allGather(buf.data(), slot, &error);
  TPS_EXPECT(r == tpsSuccess, r, "tpsCommInitRank: rank {}: {}: {}", g.rank, what, error);
  for (int q = 0; q < g.nranks; ++q) {
    int32_t sq = 0;
    std::memcpy(&sq, buf.data() + slot * q, sizeof(sq));
    if (sq != tpsSuccess) {
      if (q != g.rank)
        TPS_LOG_WARN("tpsCommInitRank: rank {}: {} failed on rank {} ({})", g.rank, what, q,
                     tpsGetErrorString(static_cast<tpsResult_t>(sq)));
      return static_cast<tpsResult_t>(sq);
    }
  }
  if (all) {
    all->assign(bytes * g.nranks, 0);
    for (int q = 0; q < g.nranks; ++q)
      if (bytes) std::memcpy(all->data() + bytes * q, buf.data() + slot * q + sizeof(int32_t), bytes);
  }
  return tpsSuccess;
}

tpsResult_t agree(RankGroup& g, const char* what, tpsResult_t status) {
  return exchange(g, what, status, nullptr, 0, nullptr);
}

tpsResult_t joinRankGroup(const tpsUniqueId& id, int nranks, int rank, int device, bool may_share, unsigned timeout_ms,
                          const std::vector<uint32_t>& peer_uids, RankGroup* out) {
  std::string error;
  const tpsResult_t joined = Bootstrap::join(id, nranks, rank, timeout_ms, peer_uids, &out->boot, &error);
  TPS_EXPECT(joined == tpsSuccess, joined, "tpsCommInitRank: rank {} of {}: {}", rank, nranks, error);
  out->rank = rank;
  out->nranks = nranks;
  out->device = device;

  // This rank's GPU, named by its PCI address.
  RankInfo mine{};
  tpsResult_t status = tpsSuccess;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    TPS_LOG_WARN("tpsCommInitRank: rank {}: no CUDA device is usable in this process", rank);
    status = tpsUnavailable;
  } else if (device < 0 || device >= count) {
    TPS_LOG_WARN("tpsCommInitRank: rank {}: GPU {} does not exist ({} GPUs)", rank, device, count);
    status = tpsInvalidArgument;
  } else if (cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof(mine.pci_bus_id), device) != cudaSuccess) {
    (void)cudaGetLastError();
    TPS_LOG_WARN("tpsCommInitRank: rank {}: cannot read GPU {}'s PCI address", rank, device);
    status = tpsCudaError;
  }
  std::vector<char> all;
  TPS_CHECK(exchange(*out, "learning the ranks' GPUs", status, &mine, sizeof(mine), &all));
  const auto* info = reinterpret_cast<const RankInfo*>(all.data());

  // Ranks on one GPU only when the config lets them (as tpsCommCreate); the others can reach a GPU when
  // it is visible here and has peer access from this rank's. Every rank counts the ranks per GPU from
  // the same list, so all agree on it.
  for (int q = 0; q < nranks; ++q) {
    int same = 0;
    for (int p = 0; p < nranks; ++p)
      same += std::strncmp(info[p].pci_bus_id, info[q].pci_bus_id, sizeof(info[q].pci_bus_id)) == 0;
    out->ranks_per_gpu = std::max(out->ranks_per_gpu, same);
  }
  status = tpsSuccess;
  unsigned char reach = 1;
  for (int q = 0; q < nranks; ++q) {
    if (q == rank) continue;
    if (std::strncmp(info[q].pci_bus_id, mine.pci_bus_id, sizeof(mine.pci_bus_id)) == 0) {
      out->shared_device = true;
      if (!may_share) {
        TPS_LOG_WARN("tpsCommInitRank: ranks {} and {} are on one GPU ({}); give each rank its own GPU", rank, q,
                     mine.pci_bus_id);
        status = tpsInvalidArgument;
      }
      continue;
    }
    int peer = -1, ok = 0;
    if (cudaDeviceGetByPCIBusId(&peer, info[q].pci_bus_id) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&ok, device, peer) != cudaSuccess) {
      (void)cudaGetLastError();
      ok = 0;  // not visible in this process: no peer access that this process can check
    }
    reach = reach && ok;
  }
  // Bit 0: this rank reaches every other GPU; bit 1: it shares its GPU. Both become facts of the group.
  const unsigned char facts = static_cast<unsigned char>(reach | (out->shared_device ? 2 : 0));
  TPS_CHECK(exchange(*out, "checking the ranks' GPUs", status, &facts, 1, &all));
  for (int q = 0; q < nranks; ++q) {
    out->all_peer_access = out->all_peer_access && (all[q] & 1);
    out->shared_device = out->shared_device || (all[q] & 2);
  }
  return tpsSuccess;
}

}  // namespace tpscope::detail
