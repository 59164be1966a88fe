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
#include "allreduce/wire_kernels.cuh"
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

// The kernel path on every wire: the exact wire's instance owns the staging, flags and sequence numbers,
// and each compressed wire's instance runs its calls on them (one sequence for all of a communicator's
// kernel-path calls, whatever their wire).
class HostKernel final : public Algorithm {
 public:
  tpsResult_t init(BackendContext& ctx);
  tpsResult_t launch(const CallArgs& a) override { return launchOn<WireCode::kExact>(a); }
  template <WireCode W>
  tpsResult_t launchOn(const CallArgs& a) {
    switch (a.dtype) {
      case tpsFloat32: return run<float, W>(a);
      case tpsFloat16: return run<__half, W>(a);
      case tpsBfloat16: return run<__nv_bfloat16, W>(a);
      default: return tpsInvalidArgument;
    }
  }
  // Loads a wire's kernels on every GPU now: with lazy loading the first launch would wait for an idle
  // device, which a peer GPU's kernel (waiting on this call) may never allow.
  template <WireCode W>
  tpsResult_t loadKernels() const {
    for (int d : devices_) {
      DeviceGuard g(d);
      cudaFuncAttributes fa;
      if constexpr (W == WireCode::kExact) {
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<float, true>));
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__half, true>));
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__nv_bfloat16, true>));
      } else {
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelWire<float, W>));
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelWire<__half, W>));
        TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelWire<__nv_bfloat16, W>));
      }
    }
    return tpsSuccess;
  }

 private:
  template <typename T, WireCode W>
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
  }
  return loadKernels<WireCode::kExact>();
}

template <typename T, WireCode W>
tpsResult_t HostKernel::run(const CallArgs& a) {
  const size_t piece = stride_ / sizeof(T);
  for (size_t off = 0; off < a.count; off += piece) {
    const size_t cnt = std::min(piece, a.count - off);
    for (size_t r = 0; r < devices_.size(); ++r) {
      DeviceGuard g(devices_[r]);
      T* src = static_cast<T*>(a.bufs[r]) + off;
      if constexpr (W != WireCode::kExact) {  // element loads: any alignment of T
        hostKernelWire<T, W><<<blocks_, kKernelThreads, 0, a.streams[r]>>>(handles_[r], src, cnt);
        TPS_CUDA_CHECK_LAUNCH();
        continue;
      }
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

// A compressed wire's calls, on the exact wire's instance.
template <WireCode W>
class HostKernelWire final : public Algorithm {
 public:
  explicit HostKernelWire(HostKernel* k) : kernel_(k) {}
  tpsResult_t launch(const CallArgs& a) override { return kernel_->launchOn<W>(a); }

 private:
  HostKernel* kernel_;
};

template <WireCode W>
tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  if constexpr (W == WireCode::kExact) {
    auto a = std::make_unique<HostKernel>();
    TPS_CHECK(a->init(ctx));
    *out = std::move(a);
  } else {
    auto* k = dynamic_cast<HostKernel*>(ctx.created("host-kernel"));
    TPS_EXPECT(k != nullptr, tpsInternalError, "host backend: a wire of the kernel path without the kernel path");
    TPS_CHECK(k->loadKernels<W>());
    *out = std::make_unique<HostKernelWire<W>>(k);
  }
  return tpsSuccess;
}

template <WireCode W>
AlgorithmInfo info(const char* name, const char* label) {
  AlgorithmInfo a;
  a.name = name;
  a.label = label;
  a.backend = tpsBackendHost;
  a.medium = Medium::kHostMemory;
  a.wire = W;
  a.shapes = kAnyShape;
  a.align = W == WireCode::kExact ? kAlign : 1;
  if (W == WireCode::kBf16) a.dtypes = dtypeBit(tpsFloat32);
  // Each GPU writes its payload to host memory once and reads every peer's once. A call of several pieces
  // pads each piece's codes to 16 bytes: up to 15 bytes a piece more than counted here.
  a.traffic = [](size_t bytes, size_t count, int n) {
    const size_t p = W == WireCode::kExact ? bytes : wirePayloadBytes(W, count);
    return Traffic{p, p * static_cast<size_t>(n - 1)};
  };
  a.create = create<W>;
  return a;
}

}  // namespace

// The exact wire, and one algorithm per compressed wire (wire_codec.h).
const AlgorithmInfo& hostKernelAlgorithm() {
  static const AlgorithmInfo a = info<WireCode::kExact>("host-kernel", "kernel");
  return a;
}
const AlgorithmInfo& hostKernelBf16Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kBf16>("host-kernel+bf16", "kernel, bf16");
  return a;
}
const AlgorithmInfo& hostKernelInt8Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kInt8>("host-kernel+int8", "kernel, int8");
  return a;
}
const AlgorithmInfo& hostKernelFp8Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kFp8>("host-kernel+fp8", "kernel, fp8");
  return a;
}
const AlgorithmInfo& hostKernelInt4Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kInt4>("host-kernel+int4", "kernel, int4");
  return a;
}

}  // namespace tpscope::detail
