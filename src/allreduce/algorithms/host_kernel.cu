// SPDX-License-Identifier: Apache-2.0
// algorithms/host_kernel.cu - host-kernel: the host backend's one-kernel path. One kernel per GPU writes
// its data to pinned, mapped host memory, publishes, waits for the peers (bounded) and reduces
// (host_kernels.cuh has the protocol). Both process shapes, every size, in pieces of the staging stride;
// where the copy-engine path runs, it takes the calls below that path's threshold: latency-bound decode
// traffic lives here.
//
// Every rank runs the vector kernel on a 16-byte aligned buffer (the ranks must split the work alike, and
// across processes they cannot see each other's buffers): a buffer that is not aligned goes through a
// scratch buffer of its rank first and back after, which gives the same sums, so the same bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/host_kernels.cuh"
#include "allreduce/host_staging.h"
#include "allreduce/rank_setup.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

// Staging per (slot, rank): sized to the copy threshold (bigger messages go in pieces), at most 4 MiB in
// one process and 1 MiB across processes (2 slots x 8 ranks x 1 MiB fits a small /dev/shm).
constexpr size_t kStageMaxOneProcess = 4u << 20, kStageMaxShared = 1u << 20;
constexpr size_t kAlign = 16;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// What the ranks of several processes must agree on to share one layout.
struct Layout {
  uint64_t stride;
  int32_t blocks;
  int32_t pad;
};

class HostKernel final : public Algorithm {
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
  size_t stride_ = 0;
  std::vector<DeviceBuffer> counters_, scratch_;
  std::vector<HostKernelHandle> handles_;
};

tpsResult_t HostKernel::init(BackendContext& ctx) {
  devices_ = ctx.devices;
  const int n = ctx.nranks;
  const size_t cap = ctx.shape == kOneProcess ? kStageMaxOneProcess : kStageMaxShared;
  stride_ = roundUp(std::min(std::max(ctx.tuning.copy_threshold, size_t{64} << 10), cap), kAlign);
  blocks_ = ctx.tuning.blocks;
  if (ctx.group != nullptr) {
    Layout mine{stride_, blocks_, 0};
    std::vector<char> all;
    TPS_CHECK(exchange(*ctx.group, "agreeing on the host staging layout", tpsSuccess, &mine, sizeof(mine), &all));
    tpsResult_t status = tpsSuccess;
    for (int q = 0; q < n && status == tpsSuccess; ++q) {
      const Layout* l = reinterpret_cast<const Layout*>(all.data()) + q;
      if (l->stride != mine.stride || l->blocks != mine.blocks) {
        TPS_LOG_WARN(
            "host backend: ranks {} and {} disagree on the host tuning (stride {} / {}, blocks {} / {}); give "
            "every rank the same config, environment and tune file",
            ctx.first_rank, q, mine.stride, l->stride, mine.blocks, l->blocks);
        status = tpsInvalidArgument;
      }
    }
    TPS_CHECK(agree(*ctx.group, "agreeing on the host staging layout", status));
  }
  SharedHost stage, flags;
  TPS_CHECK(ctx.staging->allocate(2 * n * stride_, &stage));
  TPS_CHECK(ctx.staging->allocate(size_t{2} * n * blocks_ * kFlagStride * sizeof(unsigned long long), &flags));
  const int local = ctx.localRanks();
  counters_.resize(local);
  scratch_.resize(local);
  handles_.resize(local);
  for (int r = 0; r < local; ++r) {
    const int d = devices_[r];
    TPS_CHECK(DeviceBuffer::create(d, blocks_ * sizeof(unsigned long long), &counters_[r]));
    TPS_CHECK(DeviceBuffer::create(d, stride_, &scratch_[r]));
    DeviceGuard g(d);
    TPS_CUDA_CHECK(cudaMemset(counters_[r].get(), 0, counters_[r].bytes()));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());  // the counters are zero before any kernel reads them
    HostKernelHandle& h = handles_[r];
    h.stage = stage.device[r];
    h.stage_stride = stride_;
    h.flags = reinterpret_cast<unsigned long long*>(flags.device[r]);
    h.counters = counters_[r].as<unsigned long long>();
    TPS_CHECK(ctx.status->devicePointer(d, &h.status));
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = ctx.first_rank + r;
    h.nranks = n;
    // Load the kernels now. With CUDA's lazy module loading the first launch would load them, and loading
    // waits for the device to go idle: a first call whose peer GPU is busy with a kernel that waits on the
    // host (or on this call) would deadlock inside the launch.
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<float, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__half, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__nv_bfloat16, true>));
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t HostKernel::run(const CallArgs& a) {
  const size_t piece = stride_ / sizeof(T);
  for (size_t off = 0; off < a.count; off += piece) {
    const size_t cnt = std::min(piece, a.count - off);
    for (size_t r = 0; r < devices_.size(); ++r) {
      DeviceGuard g(devices_[r]);
      T* src = static_cast<T*>(a.bufs[r]) + off;
      const bool aligned = reinterpret_cast<uintptr_t>(src) % kAlign == 0;
      T* buf = aligned ? src : scratch_[r].as<T>();
      if (!aligned) TPS_CUDA_CHECK(cudaMemcpyAsync(buf, src, cnt * sizeof(T), cudaMemcpyDeviceToDevice, a.streams[r]));
      hostKernelAllReduce<T, true><<<blocks_, kKernelThreads, 0, a.streams[r]>>>(handles_[r], buf, cnt);
      TPS_CUDA_CHECK_LAUNCH();
      if (!aligned) TPS_CUDA_CHECK(cudaMemcpyAsync(src, buf, cnt * sizeof(T), cudaMemcpyDeviceToDevice, a.streams[r]));
    }
  }
  return tpsSuccess;
}

tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  auto a = std::make_unique<HostKernel>();
  TPS_CHECK(a->init(ctx));
  *out = std::move(a);
  return tpsSuccess;
}

}  // namespace

const AlgorithmInfo& hostKernelAlgorithm() {
  static const AlgorithmInfo info = [] {
    AlgorithmInfo a;
    a.name = "host-kernel";
    a.label = "kernel";
    a.backend = tpsBackendHost;
    a.medium = Medium::kHostMemory;
    a.shapes = kAnyShape;
    a.align = kAlign;
    // Each GPU writes its data to host memory once and reads every peer's once.
    a.traffic = [](size_t bytes, int n) { return Traffic{bytes, bytes * static_cast<size_t>(n - 1)}; };
    a.create = create;
    return a;
  }();
  return info;
}

}  // namespace tpscope::detail
