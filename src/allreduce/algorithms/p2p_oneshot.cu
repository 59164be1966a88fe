// SPDX-License-Identifier: Apache-2.0
// algorithms/p2p_oneshot.cu - p2p-oneshot: each GPU pushes its message into every peer's receive buffer
// and flags it, waits for the peers' flags in its own memory, and sums in rank order (p2p_kernels.cuh).
// Calls of up to kP2pOneShotMax per GPU (the receive slot per peer), past the LL one-shot's; both process
// shapes. Every rank runs the vector kernel: a buffer that is not 16-byte aligned goes through a stage of
// its rank first and back after (the same kernel, the same sums, the same bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_kernels.cuh"
#include "allreduce/peer_memory.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kAlign = 16;

class P2pOneShot final : public Algorithm {
 public:
  tpsResult_t init(BackendContext& ctx);
  tpsResult_t launch(const CallArgs& a) override {
    switch (a.dtype) {
      case tpsFloat32: return run<float>(a);
      case tpsFloat16: return run<__half>(a);
      case tpsBfloat16: return run<__nv_bfloat16>(a);
      default: return tpsInvalidArgument;
    }
  }

 private:
  template <typename T>
  tpsResult_t run(const CallArgs& a);

  std::vector<int> devices_;
  int blocks_ = 0;
  std::vector<DeviceBuffer> counters_, stage_;
  std::vector<P2pHandle> handles_;
};

tpsResult_t P2pOneShot::init(BackendContext& ctx) {
  devices_ = ctx.devices;
  const int n = ctx.nranks;
  // Ranks that share a GPU cut the grid, whose blocks spin on each other (backend_call.h).
  blocks_ = sharedGpuGrid(kP2pOneShotBlocks, ctx.ranks_per_gpu);
  SharedDevice recv, flags;
  TPS_CHECK(ctx.peers->allocate(2 * n * kP2pOneShotMax, &recv));
  TPS_CHECK(ctx.peers->allocate(size_t{2} * 2 * n * blocks_ * kP2pFlagStride * sizeof(unsigned long long), &flags));
  const int local = ctx.localRanks();
  counters_.resize(local);
  stage_.resize(local);
  handles_.resize(local);
  for (int r = 0; r < local; ++r) {
    const int d = devices_[r];
    TPS_CHECK(DeviceBuffer::create(d, blocks_ * sizeof(unsigned long long), &counters_[r]));
    TPS_CHECK(DeviceBuffer::create(d, kP2pOneShotMax, &stage_[r]));
    DeviceGuard g(d);
    TPS_CUDA_CHECK(cudaMemset(counters_[r].get(), 0, counters_[r].bytes()));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    P2pHandle& h = handles_[r];
    std::memset(&h, 0, sizeof(h));
    for (int q = 0; q < n; ++q) {
      h.recv[q] = static_cast<char*>(recv.at[r][q]);
      h.flags[q] = static_cast<unsigned long long*>(flags.at[r][q]);
    }
    h.counters = counters_[r].as<unsigned long long>();
    TPS_CHECK(ctx.status->devicePointer(d, &h.status));
    h.recv_stride = kP2pOneShotMax;
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = ctx.first_rank + r;
    h.nranks = n;
    // Load the kernels now: lazy loading waits for an idle device, which a peer's spinning kernel may
    // never allow.
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShot<float, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShot<__half, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShot<__nv_bfloat16, true>));
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t P2pOneShot::run(const CallArgs& a) {
  const size_t bytes = a.bytes();
  for (size_t r = 0; r < devices_.size(); ++r) {
    DeviceGuard g(devices_[r]);
    T* user = static_cast<T*>(a.bufs[r]);
    const bool direct = reinterpret_cast<uintptr_t>(user) % kAlign == 0;
    T* buf = direct ? user : stage_[r].as<T>();
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(buf, user, bytes, cudaMemcpyDeviceToDevice, a.streams[r]));
    p2pOneShot<T, true><<<blocks_, kP2pThreads, 0, a.streams[r]>>>(handles_[r], buf, a.count);
    TPS_CUDA_CHECK_LAUNCH();
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(user, buf, bytes, cudaMemcpyDeviceToDevice, a.streams[r]));
  }
  return tpsSuccess;
}

tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  auto a = std::make_unique<P2pOneShot>();
  TPS_CHECK(a->init(ctx));
  *out = std::move(a);
  return tpsSuccess;
}

}  // namespace

const AlgorithmInfo& p2pOneShotAlgorithm() {
  static const AlgorithmInfo info = [] {
    AlgorithmInfo a;
    a.name = "p2p-oneshot";
    a.label = "one-shot";
    a.backend = tpsBackendP2p;
    a.medium = Medium::kPeerLinks;
    a.align = kAlign;
    a.max_bytes = kP2pOneShotMax;
    // Each GPU sends its whole message to every peer.
    a.traffic = [](size_t bytes, size_t, int n) {
      const size_t t = bytes * static_cast<size_t>(n - 1);
      return Traffic{t, t};
    };
    a.selfcheck_count = (kP2pLLMax + 4096) / 4;  // past the LL one-shot's sizes
    a.create = create;
    return a;
  }();
  return info;
}

}  // namespace tpscope::detail
