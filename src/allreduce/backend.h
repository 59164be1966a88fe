// SPDX-License-Identifier: Apache-2.0
// backend.h - a backend on one communicator: the registered algorithms of one kind (host, p2p, nccl),
// created over the resources they share, and the choice of algorithm for each call.
//
// The communicator validates arguments, picks the backend and records statistics; the backend picks
// the algorithm (chooseAlgorithm, registry.h) and has it enqueue the call. Everything is allocated when
// the backend is made, so failures happen at creation, not mid-run.
#pragma once

#include <memory>
#include <vector>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/backend_call.h"

namespace tpscope::detail {

class Backend {
 public:
  // What a backend is made of: its context and the resources the context points to, which the backend
  // keeps for its algorithms' lifetime.
  struct Parts {
    BackendContext ctx;
    std::unique_ptr<AsyncStatus> status;
    std::unique_ptr<HostStaging> staging;
    std::unique_ptr<PeerMemory> peers;
  };
  // Creates every registered algorithm of parts.ctx.backend that runs with its ranks and shape. An
  // algorithm whose factory returns tpsUnavailable is left out (it has said why); any other error fails
  // the backend. tpsUnavailable when no algorithm is left.
  static tpsResult_t create(Parts parts, std::unique_ptr<Backend>* out);
  ~Backend();

  tpsBackend_t kind() const { return parts_.ctx.backend; }
  const BackendContext& context() const { return parts_.ctx; }
  // The paths of the algorithms this backend has, in registry order.
  const std::vector<int>& paths() const { return paths_; }
  // The path that carries `a`, or -1 when none of this backend's algorithms takes it.
  int pathFor(const CallArgs& a) const;
  // Per-GPU payload of call `a` on `path` (identical for every GPU in these algorithms).
  Traffic trafficFor(int path, const CallArgs& a) const;
  // Enqueues the call on the path pathFor() names; tpsUnavailable (logged) when there is none.
  tpsResult_t allReduce(const CallArgs& a);
  // Enqueues the call on `path`, which must be one of paths() and take the call (the p2p self-check).
  tpsResult_t launchPath(int path, const CallArgs& a);
  // The reduction fused with the add and norm, where the call's algorithm has it (else tpsUnavailable,
  // nothing enqueued); a pushed call goes to the algorithm that gave the push channels. *path: the path
  // that carried it.
  tpsResult_t allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m, int* path);
  // The push channel of local rank `rank`, where one of the algorithms takes pushed calls.
  tpsResult_t pushChannel(int rank, PushChannel* out) const;
  // tpsSuccess, or an error a kernel reported after its call returned (tpsTimeout).
  tpsResult_t asyncError() const;

 private:
  Backend() = default;
  Algorithm* instance(int path) const;

  Parts parts_;  // declared first: the algorithms below use its resources until they are gone
  std::vector<int> paths_;
  std::vector<std::unique_ptr<Algorithm>> algos_;  // [i] runs paths_[i]
};

// Makes the `kind` backend (host, p2p or nccl) for this process's ranks: every rank on `devices` in one
// process (group null), or this rank of `group` on its device (devices = {group->device}). Collective over
// the group. tpsUnavailable when the backend cannot run on these GPUs (the log says why).
tpsResult_t createBackend(tpsBackend_t kind, const std::vector<int>& devices, RankGroup* group,
                          const HostTuning& tuning, std::unique_ptr<Backend>* out);

}  // namespace tpscope::detail
