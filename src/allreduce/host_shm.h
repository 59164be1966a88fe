// SPDX-License-Identifier: Apache-2.0
// host_shm.h - backend `host` for one rank of a rank-per-process communicator (host_shm.cu).
#pragma once

#include <memory>

#include "allreduce/backend.h"
#include "allreduce/rank_setup.h"
#include "allreduce/tuning.h"

namespace tpscope::detail {

// Collective over the group: rank 0 creates the staging area in POSIX shared memory, every rank maps it
// and registers it with CUDA. tpsUnavailable on every rank when one rank cannot.
tpsResult_t createHostShmBackend(RankGroup& g, const HostTuning& tuning, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
