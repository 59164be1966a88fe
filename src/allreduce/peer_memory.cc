// SPDX-License-Identifier: Apache-2.0
// peer_memory.cc - device memory every rank maps: peer access in one process, CUDA IPC across processes.
#include "allreduce/peer_memory.h"

#include <cuda_runtime_api.h>

#include "allreduce/rank_setup.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

class ProcessPeerMemory final : public PeerMemory {
 public:
  explicit ProcessPeerMemory(std::vector<int> devices) : devices_(std::move(devices)) {}
  tpsResult_t allocate(size_t bytes, SharedDevice* out) override {
    const int n = static_cast<int>(devices_.size());
    std::array<void*, TPS_MAX_DEVICES> all{};
    for (int r = 0; r < n; ++r) {
      DeviceBuffer b;
      TPS_CHECK(DeviceBuffer::create(devices_[r], bytes, &b));
      DeviceGuard g(devices_[r]);
      TPS_CUDA_CHECK(cudaMemset(b.get(), 0, bytes));
      all[r] = b.get();
      buffers_.push_back(std::move(b));
    }
    out->at.assign(n, all);
    out->rank.resize(n);
    for (int r = 0; r < n; ++r) out->rank[r] = r;
    return tpsSuccess;
  }
  bool callBuffersShared() const override { return true; }

 private:
  std::vector<int> devices_;
  std::vector<DeviceBuffer> buffers_;
};

class IpcPeerMemory final : public PeerMemory {
 public:
  explicit IpcPeerMemory(RankGroup& g) : g_(g) {}
  ~IpcPeerMemory() override {
    DeviceGuard guard(g_.device);
    for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
    (void)cudaGetLastError();
  }
  tpsResult_t allocate(size_t bytes, SharedDevice* out) override;
  bool callBuffersShared() const override { return false; }

 private:
  RankGroup& g_;
  std::vector<DeviceBuffer> own_;
  std::vector<void*> opened_;
};

tpsResult_t IpcPeerMemory::allocate(size_t bytes, SharedDevice* out) {
  // This rank's buffer and its handle; a failure here is exchanged, so every rank gives up alike.
  cudaIpcMemHandle_t mine{};
  DeviceBuffer b;
  auto local = [&]() -> tpsResult_t {
    TPS_CHECK(DeviceBuffer::create(g_.device, bytes, &b));
    DeviceGuard dg(g_.device);
    TPS_CUDA_CHECK(cudaMemset(b.get(), 0, bytes));
    // The memset must be done before a peer can write into the buffer.
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    if (cudaIpcGetMemHandle(&mine, b.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      TPS_LOG_WARN("p2p backend: rank {}: cudaIpcGetMemHandle failed (CUDA IPC is not available here)", g_.rank);
      return tpsUnavailable;
    }
    return tpsSuccess;
  };
  std::vector<char> all;
  TPS_CHECK(exchange(g_, "exporting the p2p buffers", local(), &mine, sizeof(mine), &all));
  std::array<void*, TPS_MAX_DEVICES> at{};
  at[g_.rank] = b.get();
  own_.push_back(std::move(b));
  tpsResult_t status = tpsSuccess;
  {
    DeviceGuard dg(g_.device);
    for (int q = 0; q < g_.nranks && status == tpsSuccess; ++q) {
      if (q == g_.rank) continue;
      const cudaIpcMemHandle_t& h = reinterpret_cast<const cudaIpcMemHandle_t*>(all.data())[q];
      const cudaError_t e = cudaIpcOpenMemHandle(&at[q], h, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        at[q] = nullptr;
        TPS_LOG_WARN("p2p backend: rank {} cannot open rank {}'s memory: {} ({})", g_.rank, q, cudaGetErrorName(e),
                     cudaGetErrorString(e));
        status = tpsUnavailable;
      } else {
        opened_.push_back(at[q]);
      }
    }
  }
  TPS_CHECK(agree(g_, "opening the peers' p2p buffers", status));
  out->at.assign(1, at);
  out->rank.assign(1, g_.rank);
  return tpsSuccess;
}

}  // namespace

tpsResult_t makeProcessPeerMemory(const std::vector<int>& devices, std::unique_ptr<PeerMemory>* out) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      TPS_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      TPS_EXPECT(ok, tpsUnavailable, "p2p backend: GPU {} has no peer access to GPU {}", a, b);
      DeviceGuard g(a);
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        TPS_CUDA_CHECK(e);
    }
  *out = std::make_unique<ProcessPeerMemory>(devices);
  return tpsSuccess;
}

std::unique_ptr<PeerMemory> makeIpcPeerMemory(RankGroup& g) { return std::make_unique<IpcPeerMemory>(g); }

}  // namespace tpscope::detail
