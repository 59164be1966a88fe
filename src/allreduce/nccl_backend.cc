// SPDX-License-Identifier: Apache-2.0
// nccl_backend.cc - backend `nccl`. NCCL picks its own transport (NVLink, PCIe P2P, or host shared memory
// when NCCL_P2P_DISABLE=1); the library's accounting uses the ring estimate 2(N-1)/N x size per
// direction, which is what a ring moves.
#include "allreduce/nccl_backend.h"

#include <nccl.h>

#include <cstring>

#include "allreduce/nccl_types.h"
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

class NcclBackend final : public Backend {
 public:
  ~NcclBackend() override {
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommDestroy(c);
  }
  tpsResult_t init(const std::vector<int>& devices) {
    n_ = static_cast<int>(devices.size());
    comms_.assign(devices.size(), nullptr);
    TPS_NCCL_CHECK(ncclCommInitAll(comms_.data(), n_, devices.data()));
    return tpsSuccess;
  }
  // One rank of a rank-per-process communicator: rank 0's ncclUniqueId reaches the others through the
  // bootstrap. n_ is the communicator's size; comms_ holds this process's one communicator.
  tpsResult_t initRank(RankGroup& g) {
    ncclUniqueId id{};
    tpsResult_t status = tpsSuccess;
    if (g.rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) status = tpsNcclError;
    std::vector<char> all;
    TPS_CHECK(exchange(g, "sharing the NCCL id", status, &id, sizeof(id), &all));
    std::memcpy(&id, all.data(), sizeof(id));
    n_ = g.nranks;
    comms_.assign(1, nullptr);
    DeviceGuard dg(g.device);
    ncclResult_t r = ncclCommInitRank(&comms_[0], g.nranks, id, g.rank);
    if (r != ncclSuccess) {
      TPS_LOG_WARN("ncclCommInitRank on rank {}: {}", g.rank, ncclGetErrorString(r));
      comms_[0] = nullptr;
    }
    return agree(g, "ncclCommInitRank", r == ncclSuccess ? tpsSuccess : tpsNcclError);
  }
  tpsBackend_t kind() const override { return tpsBackendNccl; }
  tpsPath_t pathFor(const CallArgs&) const override { return tpsPathNccl; }
  Traffic trafficFor(tpsPath_t, size_t bytes) const override {
    const size_t ring = bytes * 2 * (n_ - 1) / n_;
    return Traffic{ring, ring};
  }
  tpsResult_t allReduce(const CallArgs& a) override {
    TPS_NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r < comms_.size(); ++r) {
      ncclResult_t res =
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
  int n_ = 0;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

tpsResult_t createNcclBackend(const std::vector<int>& devices, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<NcclBackend>();
  TPS_CHECK(b->init(devices));
  *out = std::move(b);
  return tpsSuccess;
}

tpsResult_t createNcclRankBackend(RankGroup& g, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<NcclBackend>();
  TPS_CHECK(b->initRank(g));
  *out = std::move(b);
  return tpsSuccess;
}

}  // namespace tpscope::detail
