// SPDX-License-Identifier: Apache-2.0
// p2p.h - backend `p2p`: direct loads and stores between GPUs over NVLink or PCIe P2P.
#pragma once

#include <memory>
#include <vector>

#include "allreduce/backend.h"
#include "allreduce/tuning.h"

namespace tpscope::detail {

// tpsUnavailable when some pair of `devices` has no peer access.
tpsResult_t createP2pBackend(const std::vector<int>& devices, const HostTuning& tuning, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
