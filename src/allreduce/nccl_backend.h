// SPDX-License-Identifier: Apache-2.0
// nccl_backend.h - backend `nccl`: NCCL communicators over the same devices (ncclCommInitAll), grouped calls.
#pragma once

#include <memory>
#include <vector>

#include "allreduce/backend.h"
#include "allreduce/rank_setup.h"

namespace tpscope::detail {

tpsResult_t createNcclBackend(const std::vector<int>& devices, std::unique_ptr<Backend>* out);
// One rank of a rank-per-process communicator (ncclCommInitRank); collective over the group.
tpsResult_t createNcclRankBackend(RankGroup& g, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
