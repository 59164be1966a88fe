// SPDX-License-Identifier: Apache-2.0
// host_staged.h - backend `host`: every reduction staged through pinned host memory (llama.cpp's
// "internal" design, generalised to 2..8 GPUs, with a bounded wait and tuned thresholds).
#pragma once

#include <memory>
#include <vector>

#include "allreduce/backend.h"
#include "allreduce/tuning.h"

namespace tpscope::detail {

// Creates the backend for `devices`, allocating all staging now. tpsUnavailable when a GPU cannot map
// pinned host memory or predates compute capability 7.0 (the wait uses __nanosleep).
tpsResult_t createHostStagedBackend(const std::vector<int>& devices, const HostTuning& tuning,
                                    std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
