// SPDX-License-Identifier: Apache-2.0
// peer_memory.h - device memory that every rank of a communicator maps: the p2p backend's one per-rank
// view of its peers (receive buffers, flags, stages), built in one process through peer access or
// across processes from CUDA IPC handles, so the same algorithms run in both shapes (as NCCL's one p2p
// transport does with P2P_SAME_PID).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct RankGroup;

// One allocation of every rank, as each local rank addresses it.
struct SharedDevice {
  std::vector<std::array<void*, TPS_MAX_DEVICES>> at;  // [local rank][rank q]: rank q's memory
  std::vector<int> rank;                               // [local rank] its rank in the communicator
  void* mine(int local) const { return at[local][rank[local]]; }
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  // `bytes` of zero-filled device memory on every rank's GPU, reachable from every rank, kept until the
  // peer memory is destroyed. Collective across processes: every rank asks for the same sizes in the same
  // order and gets the same status.
  virtual tpsResult_t allocate(size_t bytes, SharedDevice* out) = 0;
  // Whether each rank can address the other ranks' buffers of a call (one process with peer access:
  // every cudaMalloc'd buffer is reachable; across processes only what was exchanged is).
  virtual bool callBuffersShared() const = 0;
};

// Every rank in this process, on `devices`: enables peer access between every pair of distinct GPUs.
// tpsUnavailable when a pair has none.
tpsResult_t makeProcessPeerMemory(const std::vector<int>& devices, std::unique_ptr<PeerMemory>* out);
// One rank per process: each rank allocates its own and opens its peers' through CUDA IPC handles.
std::unique_ptr<PeerMemory> makeIpcPeerMemory(RankGroup& g);

}  // namespace tpscope::detail
