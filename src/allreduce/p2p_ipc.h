// SPDX-License-Identifier: Apache-2.0
// p2p_ipc.h - backend `p2p` for one rank of a rank-per-process communicator (p2p_ipc.cu).
#pragma once

#include <memory>

#include "allreduce/backend.h"
#include "allreduce/rank_setup.h"
#include "allreduce/tuning.h"

namespace tpscope::detail {

// Collective over the group: allocates this rank's buffers, exchanges CUDA IPC handles and opens the
// peers'. tpsUnavailable on every rank when one rank cannot export or open (no CUDA IPC, no peer access).
tpsResult_t createP2pIpcBackend(RankGroup& g, const HostTuning& tuning, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
