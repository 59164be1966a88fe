// SPDX-License-Identifier: Apache-2.0
// rank_backend.cuh - what the backends of a rank-per-process communicator (host_shm.cu, p2p_ipc.cu)
// share: a call carries this rank's one buffer and stream, dispatched by dtype to the backend's
// run<T>(buf, count, stream), and the backend is made by its collective init(group, tuning).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <memory>

#include "allreduce/backend.h"
#include "allreduce/rank_setup.h"
#include "allreduce/tuning.h"

namespace tpscope::detail {

template <class Derived>
class RankBackend : public Backend {
 public:
  tpsResult_t allReduce(const CallArgs& a) override {
    Derived& d = static_cast<Derived&>(*this);
    switch (a.dtype) {
      case tpsFloat32: return d.template run<float>(a.bufs[0], a.count, a.streams[0]);
      case tpsFloat16: return d.template run<__half>(a.bufs[0], a.count, a.streams[0]);
      case tpsBfloat16: return d.template run<__nv_bfloat16>(a.bufs[0], a.count, a.streams[0]);
      default: return tpsInvalidArgument;
    }
  }

  // The backend, made by its init (collective over the group: every rank gets the same status).
  static tpsResult_t create(RankGroup& g, const HostTuning& tuning, std::unique_ptr<Backend>* out) {
    auto b = std::make_unique<Derived>();
    const tpsResult_t r = b->init(g, tuning);
    if (r == tpsSuccess) *out = std::move(b);
    return r;
  }
};

}  // namespace tpscope::detail
