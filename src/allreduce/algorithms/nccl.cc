// SPDX-License-Identifier: Apache-2.0
// algorithms/nccl.cc - nccl: ncclAllReduce over NCCL communicators of the same devices (ncclCommInitAll
// in one process, ncclCommInitRank with an id rank 0 shares through the bootstrap across processes),
// grouped over this process's ranks. NCCL picks its own transport (NVLink, PCIe P2P, or host shared
// memory when NCCL_P2P_DISABLE=1); it takes one rank per GPU.
#include <nccl.h>

#include <cstring>

#include "allreduce/algorithm.h"
#include "allreduce/nccl_types.h"
#include "allreduce/rank_setup.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

#define TPS_NCCL_CHECK(call)                                                     \
  do {                                                                           \
    ncclResult_t tps_nr_ = (call);                                               \
    if (tps_nr_ != ncclSuccess) {                                                \
      TPS_LOG_WARN("NCCL failure '{}': {}", #call, ncclGetErrorString(tps_nr_)); \
      return tpsNcclError;                                                       \
    }                                                                            \
  } while (0)

namespace tpscope::detail {

namespace {

class Nccl final : public Algorithm {
 public:
  ~Nccl() override {
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommDestroy(c);
  }
  tpsResult_t init(BackendContext& ctx) {
    if (ctx.group == nullptr) {
      comms_.assign(ctx.devices.size(), nullptr);
      TPS_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(ctx.devices.size()), ctx.devices.data()));
      return tpsSuccess;
    }
    // One rank of several processes: rank 0's ncclUniqueId reaches the others through the bootstrap.
    RankGroup& g = *ctx.group;
    ncclUniqueId id{};
    tpsResult_t status = tpsSuccess;
    if (g.rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) status = tpsNcclError;
    std::vector<char> all;
    TPS_CHECK(exchange(g, "sharing the NCCL id", status, &id, sizeof(id), &all));
    std::memcpy(&id, all.data(), sizeof(id));
    comms_.assign(1, nullptr);
    DeviceGuard dg(g.device);
    const ncclResult_t r = ncclCommInitRank(&comms_[0], g.nranks, id, g.rank);
    if (r != ncclSuccess) {
      TPS_LOG_WARN("ncclCommInitRank on rank {}: {}", g.rank, ncclGetErrorString(r));
      comms_[0] = nullptr;
    }
    return agree(g, "ncclCommInitRank", r == ncclSuccess ? tpsSuccess : tpsNcclError);
  }
  tpsResult_t launch(const CallArgs& a) override {
    TPS_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      const ncclResult_t res =
          ncclAllReduce(a.bufs[r], a.bufs[r], a.count, ncclTypeOf(a.dtype), ncclSum, comms_[r], a.streams[r]);
      if (res != ncclSuccess) {
        (void)ncclGroupEnd();
        TPS_LOG_WARN("ncclAllReduce on rank {}: {}", r, ncclGetErrorString(res));
        return tpsNcclError;
      }
    }
    TPS_NCCL_CHECK(ncclGroupEnd());
    return tpsSuccess;
  }
  tpsResult_t asyncError() const override {
    for (ncclComm_t c : comms_) {
      if (c == nullptr) continue;
      ncclResult_t e = ncclSuccess;
      if (ncclCommGetAsyncError(c, &e) != ncclSuccess || e != ncclSuccess) return tpsNcclError;
    }
    return tpsSuccess;
  }

 private:
  std::vector<ncclComm_t> comms_;
};

tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  auto a = std::make_unique<Nccl>();
  TPS_CHECK(a->init(ctx));
  *out = std::move(a);
  return tpsSuccess;
}

}  // namespace

const AlgorithmInfo& ncclAlgorithm() {
  static const AlgorithmInfo info = [] {
    AlgorithmInfo a;
    a.name = "nccl";
    a.label = "NCCL's choice";
    a.backend = tpsBackendNccl;
    a.medium = Medium::kNccl;
    // NCCL's ring moves 2(N-1)/N of the message per direction; its own protocol bytes are not counted.
    a.traffic = [](size_t bytes, size_t, int n) {
      const size_t ring = bytes * 2 * static_cast<size_t>(n - 1) / static_cast<size_t>(n);
      return Traffic{ring, ring};
    };
    a.create = create;
    return a;
  }();
  return info;
}

}  // namespace tpscope::detail
