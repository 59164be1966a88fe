// SPDX-License-Identifier: Apache-2.0
// nccl.h - backend `nccl`: NCCL communicators over the same devices (ncclCommInitAll), grouped calls.
#pragma once

#include <memory>
#include <vector>

#include "allreduce/backend.h"

namespace tpscope::detail {

tpsResult_t createNcclBackend(const std::vector<int>& devices, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
