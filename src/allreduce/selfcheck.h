// SPDX-License-Identifier: Apache-2.0
// selfcheck.h - the p2p backend proves its peer mappings before a communicator uses it.
//
// Boxes exist whose peer-to-peer writes arrive corrupted with no error from CUDA (consumer cards with
// patched drivers, broken PCIe switches): an AllReduce over them returns wrong sums silently. So every
// communicator that sets up the p2p backend first runs one small AllReduce per p2p algorithm (each of
// the backend's algorithms with a self-check call in its AlgorithmInfo) over its own buffers, with integer-valued
// float32 data whose sums are exact, and compares every GPU's result bit for bit with the sum computed on the host. A
// mismatch refuses p2p for that communicator: forced, the creation fails with tpsUnavailable; under auto the
// communicator goes on without p2p (host, or NCCL where it runs). The check's calls are not counted in
// the statistics.
#pragma once

#include <string>
#include <vector>

#include "allreduce/backend.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

// Runs the check on `p2p` for this process's ranks: `devices[i]` is rank first_rank + i of `nranks`
// (all ranks for tpsCommCreate, one for tpsCommInitRank, whose peers run it at the same time).
// Returns tpsSuccess when every local rank's results are exact; tpsUnavailable with *why (one sentence)
// on a mismatch; tpsTimeout (a peer that did not take part) or tpsCudaError otherwise. *ms is the
// check's wall time. TPSCOPE_TEST_P2P_CHECK_FAULT=R corrupts rank R's result (tests only).
tpsResult_t selfCheckP2p(Backend& p2p, const std::vector<int>& devices, int first_rank, int nranks, std::string* why,
                         double* ms);

}  // namespace tpscope::detail
