// SPDX-License-Identifier: Apache-2.0
// rank_setup.h - what the ranks of a rank-per-process communicator learn about each other when they
// join, and the exchange helper the backends build their cross-process resources with.
//
// Every step that can fail on one rank is followed by an exchange of every rank's status, so all ranks
// take the same branch (a backend is available on all of them or on none) and none waits for a peer
// that has already given up.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/bootstrap.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct RankGroup {
  std::unique_ptr<Bootstrap> boot;  // open while the communicator is made, closed after
  int rank = 0, nranks = 0;
  int device = -1;              // this rank's CUDA ordinal in this process
  bool all_peer_access = true;  // every pair of ranks' GPUs is one GPU or has peer access (as seen from both ends)
  bool shared_device = false;   // some ranks share a GPU (tpsConfig_t.shared_devices only)
  int ranks_per_gpu = 1;        // the most ranks on any one GPU (ranksPerGpu in backend.h, across processes)
};

// Joins the communicator of `id` (Bootstrap::join, bounded by timeout_ms, with peers of this process's
// uid or one of peer_uids), checks this rank's device and learns every rank's GPU; ranks may share a GPU
// only when every rank says `may_share` (tpsConfig_t.shared_devices). Errors as tpsCommInitRank; every
// rank returns the same status, except for argument errors found before the join.
tpsResult_t joinRankGroup(const tpsUniqueId& id, int nranks, int rank, int device, bool may_share, unsigned timeout_ms,
                          const std::vector<uint32_t>& peer_uids, RankGroup* out);

// Every rank's `bytes`-byte blob, in rank order, with this rank's `status` exchanged beside it: returns
// the first non-success status of any rank (tpsUnavailable from ranks other than this one's viewpoint:
// the rank that failed has logged why), so all ranks agree. `what` names the step in log lines.
tpsResult_t exchange(RankGroup& g, const char* what, tpsResult_t status, const void* mine, size_t bytes,
                     std::vector<char>* all);
// exchange() without a payload: only the statuses.
tpsResult_t agree(RankGroup& g, const char* what, tpsResult_t status);

}  // namespace tpscope::detail
