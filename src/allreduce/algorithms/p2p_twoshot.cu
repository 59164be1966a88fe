// SPDX-License-Identifier: Apache-2.0
// algorithms/p2p_twoshot.cu - p2p-twoshot: reduce-scatter then all-gather over peer links
// (p2p_kernels.cuh), each GPU moving 2(N-1)/N of the message; the calls past the one-shot's sizes, in
// pieces of kP2pTwoShotPiece per GPU, in both process shapes.
//
// Phase 2 stores the sums into every rank's buffer, so each rank must address its peers' buffers. In one
// process it does (peer access reaches every cudaMalloc'd buffer) and the kernel works in the callers'
// buffers; a rank whose buffer is not 16-byte aligned, and across processes every rank, copies its piece
// into its stage (memory its peers mapped) first and back after. A peer writes a rank's stage only in
// phase 2 of a call, after that rank's phase-1 flag of the same call, which follows (in stream order) the
// copy back of the piece before and the copy in of this one; and before that rank's kernel ends. So the
// stage is never written by a peer while its rank copies it.
//
// A piece's tail that does not split into N whole vectors goes through the one-shot algorithm (created
// before this one, registry order); it counts as two-shot.
//
// The compressed wires (p2p_wire_kernels.cuh) run on this instance's flags, sequence numbers and receive
// buffers (one sequence for all of a communicator's two-shot calls, whatever their wire), with the stage as
// each rank's gather buffer; their kernel touches only its own rank's buffer, so it needs no staging.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_kernels.cuh"
#include "allreduce/p2p_wire_kernels.cuh"
#include "allreduce/peer_memory.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kAlign = 16;

class P2pTwoShot final : public Algorithm {
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
  // A call on compressed wire W.
  template <WireCode W>
  tpsResult_t launchWire(const CallArgs& a) {
    switch (a.dtype) {
      case tpsFloat32: return runWire<float, W>(a);
      case tpsFloat16:
        if constexpr (W != WireCode::kBf16)
          return runWire<__half, W>(a);
        else
          return tpsInvalidArgument;
      case tpsBfloat16:
        if constexpr (W != WireCode::kBf16)
          return runWire<__nv_bfloat16, W>(a);
        else
          return tpsInvalidArgument;
      default: return tpsInvalidArgument;
    }
  }
  // Loads wire W's kernels on every GPU now (as init does the exact ones), after checking that a piece's
  // slice payload fits the receive and gather strides.
  template <WireCode W>
  tpsResult_t loadWireKernels() const;

 private:
  template <typename T>
  tpsResult_t run(const CallArgs& a);
  template <typename T, WireCode W>
  tpsResult_t runWire(const CallArgs& a);
  // Values per launch of a wire call of T: whole wire blocks per slice.
  template <typename T>
  size_t wirePiece() const {
    const size_t unit = static_cast<size_t>(nranks_) * kWireBlock;
    return kP2pTwoShotPiece / sizeof(T) / unit * unit;
  }

  std::vector<int> devices_;
  int nranks_ = 0;
  int blocks_ = 0;
  bool shared_ = false;     // the callers' buffers are addressable from every rank (one process)
  size_t recv_stride_ = 0;  // bytes per (slot, sender) of a receive buffer; the gather buffer's per owner
  Algorithm* tail_ = nullptr;
  SharedDevice stage_;
  std::vector<DeviceBuffer> counters_;
  std::vector<P2pHandle> handles_;
};

tpsResult_t P2pTwoShot::init(BackendContext& ctx) {
  devices_ = ctx.devices;
  nranks_ = ctx.nranks;
  shared_ = ctx.peers->callBuffersShared();
  tail_ = ctx.created("p2p-oneshot");
  TPS_EXPECT(tail_ != nullptr, tpsUnavailable, "p2p backend: two-shot needs the one-shot algorithm for its tails");
  const int n = nranks_;
  blocks_ = sharedGpuGrid(kP2pTwoShotBlocks, ctx.ranks_per_gpu);  // ranks sharing a GPU (backend_call.h)
  // A slice per rank: a piece over N, in whole 16-byte vectors and at 256-byte boundaries (N = 3 divides
  // no power of two).
  const size_t recv_stride = (kP2pTwoShotPiece / n + 64 + 255) / 256 * 256;
  recv_stride_ = recv_stride;
  SharedDevice recv, flags;
  TPS_CHECK(ctx.peers->allocate(2 * n * recv_stride, &recv));
  TPS_CHECK(ctx.peers->allocate(size_t{2} * 2 * n * blocks_ * kP2pFlagStride * sizeof(unsigned long long), &flags));
  // A piece, or N payloads of a receive stride (the wires' gather buffer), whichever is larger.
  TPS_CHECK(ctx.peers->allocate(std::max(kP2pTwoShotPiece, n * recv_stride), &stage_));
  const int local = ctx.localRanks();
  counters_.resize(local);
  handles_.resize(local);
  for (int r = 0; r < local; ++r) {
    const int d = devices_[r];
    TPS_CHECK(DeviceBuffer::create(d, blocks_ * sizeof(unsigned long long), &counters_[r]));
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
    h.recv_stride = recv_stride;
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = ctx.first_rank + r;
    h.nranks = n;
    cudaFuncAttributes fa;  // load the kernels now, as p2p_oneshot.cu does
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShot<float>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShot<__half>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShot<__nv_bfloat16>));
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t P2pTwoShot::run(const CallArgs& a) {
  const int local = static_cast<int>(devices_.size());
  // Which ranks work in their stage: across processes all of them, in one process those whose buffer is
  // not aligned (every rank knows every buffer there).
  bool staged[TPS_MAX_DEVICES] = {};
  for (int q = 0; q < nranks_; ++q) staged[q] = !shared_ || reinterpret_cast<uintptr_t>(a.bufs[q]) % kAlign != 0;
  const size_t unit = static_cast<size_t>(nranks_) * Vec<T>::kElems;  // N whole vectors
  const size_t piece_max = kP2pTwoShotPiece / sizeof(T) / unit * unit;
  std::vector<void*> tail(local);
  for (size_t off = 0; off < a.count; off += piece_max) {
    const size_t cnt = std::min(piece_max, a.count - off);
    const size_t body = cnt / unit * unit;
    for (int r = 0; r < local; ++r) {
      const int rank = handles_[r].rank;
      T* user = static_cast<T*>(a.bufs[r]) + off;
      T* mine = staged[rank] ? static_cast<T*>(stage_.mine(r)) : user;
      DeviceGuard g(devices_[r]);
      if (staged[rank])
        TPS_CUDA_CHECK(cudaMemcpyAsync(mine, user, cnt * sizeof(T), cudaMemcpyDeviceToDevice, a.streams[r]));
      if (body > 0) {
        P2pHandle h = handles_[r];
        for (int q = 0; q < nranks_; ++q)
          h.bufs[q] = staged[q] ? stage_.at[r][q] : static_cast<void*>(static_cast<T*>(a.bufs[q]) + off);
        p2pTwoShot<T><<<blocks_, kP2pThreads, 0, a.streams[r]>>>(h, body);
        TPS_CUDA_CHECK_LAUNCH();
      }
      tail[r] = mine + body;
    }
    if (body < cnt) TPS_CHECK(tail_->launch(CallArgs{tail.data(), cnt - body, a.dtype, a.streams}));
    for (int r = 0; r < local; ++r) {
      if (!staged[handles_[r].rank]) continue;
      DeviceGuard g(devices_[r]);
      TPS_CUDA_CHECK(cudaMemcpyAsync(static_cast<T*>(a.bufs[r]) + off, stage_.mine(r), cnt * sizeof(T),
                                     cudaMemcpyDeviceToDevice, a.streams[r]));
    }
  }
  return tpsSuccess;
}

template <typename T, WireCode W>
tpsResult_t P2pTwoShot::runWire(const CallArgs& a) {
  const size_t piece_max = wirePiece<T>();
  for (size_t off = 0; off < a.count; off += piece_max) {
    const size_t cnt = std::min(piece_max, a.count - off);
    for (size_t r = 0; r < devices_.size(); ++r) {
      DeviceGuard g(devices_[r]);
      P2pHandle h = handles_[r];
      for (int q = 0; q < nranks_; ++q) h.bufs[q] = stage_.at[r][q];
      p2pTwoShotWire<T, W>
          <<<blocks_, kP2pThreads, 0, a.streams[r]>>>(h, static_cast<T*>(a.bufs[r]) + off, cnt, recv_stride_);
      TPS_CUDA_CHECK_LAUNCH();
    }
  }
  return tpsSuccess;
}

template <WireCode W>
tpsResult_t P2pTwoShot::loadWireKernels() const {
  // The largest slice's payload: of 16-bit values on int8 or fp8 about 0.53 of the slice's bytes, of
  // float32 on bf16 half of them; the stride holds the slice at full width.
  auto fits = [&](size_t piece) { return wirePayloadBytes(W, piece / static_cast<size_t>(nranks_)) <= recv_stride_; };
  TPS_EXPECT(fits(wirePiece<float>()) && (W == WireCode::kBf16 || fits(wirePiece<__half>())), tpsInternalError,
             "p2p backend: a two-shot wire payload does not fit its receive buffer");
  for (int d : devices_) {
    DeviceGuard g(d);
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShotWire<float, W>));
    if constexpr (W != WireCode::kBf16) {
      TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShotWire<__half, W>));
      TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pTwoShotWire<__nv_bfloat16, W>));
    }
  }
  return tpsSuccess;
}

// A compressed wire's calls, on the exact wire's instance.
template <WireCode W>
class P2pTwoShotWire final : public Algorithm {
 public:
  explicit P2pTwoShotWire(P2pTwoShot* k) : twoshot_(k) {}
  tpsResult_t launch(const CallArgs& a) override { return twoshot_->launchWire<W>(a); }

 private:
  P2pTwoShot* twoshot_;
};

template <WireCode W>
tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  if constexpr (W == WireCode::kExact) {
    auto a = std::make_unique<P2pTwoShot>();
    TPS_CHECK(a->init(ctx));
    *out = std::move(a);
  } else {
    auto* k = dynamic_cast<P2pTwoShot*>(ctx.created("p2p-twoshot"));
    TPS_EXPECT(k != nullptr, tpsInternalError, "p2p backend: a wire of the two-shot without the two-shot");
    TPS_CHECK(k->loadWireKernels<W>());
    *out = std::make_unique<P2pTwoShotWire<W>>(k);
  }
  return tpsSuccess;
}

// A compressed wire: each GPU sends and receives 2(N-1) slice payloads, one per peer in each phase (a call
// of several pieces pads each piece's slices). It takes the two-shot's sizes only: below them the exact
// LL and one-shot calls move too few bytes for a wire to pay for its two encodes, so a call that asks for
// a wire runs exact there, and its path says so.
template <WireCode W>
AlgorithmInfo wireInfo(const char* name, const char* label) {
  AlgorithmInfo a;
  a.name = name;
  a.label = label;
  a.backend = tpsBackendP2p;
  a.medium = Medium::kPeerLinks;
  a.wire = W;
  a.sum_on_wire = true;
  if (W == WireCode::kBf16) a.dtypes = dtypeBit(tpsFloat32);
  a.min_bytes = [](const HostTuning&) { return kP2pOneShotMax + 1; };
  a.traffic = [](size_t, size_t count, int n) {
    const size_t slice = (wireBlocks(count) + n - 1) / n * kWireBlock;
    const size_t t = 2 * static_cast<size_t>(n - 1) * wirePayloadBytes(W, slice);
    return Traffic{t, t};
  };
  a.create = create<W>;
  return a;
}

}  // namespace

const AlgorithmInfo& p2pTwoShotAlgorithm() {
  static const AlgorithmInfo info = [] {
    AlgorithmInfo a;
    a.name = "p2p-twoshot";
    a.label = "two-shot";
    a.backend = tpsBackendP2p;
    a.medium = Medium::kPeerLinks;
    a.align = kAlign;
    // Each GPU sends (and receives) 2(N-1)/N of the message.
    a.traffic = [](size_t bytes, size_t, int n) {
      const size_t t = bytes * 2 * static_cast<size_t>(n - 1) / static_cast<size_t>(n);
      return Traffic{t, t};
    };
    // Just past the one-shot slot, with a remainder that does not split into whole vectors per rank.
    a.selfcheck_count = (kP2pOneShotMax + 65536) / 4 + 3;
    a.create = create<WireCode::kExact>;
    return a;
  }();
  return info;
}

// One algorithm per compressed wire (wire_codec.h); no self-check call: the self-check compares exact sums.
const AlgorithmInfo& p2pTwoShotBf16Algorithm() {
  static const AlgorithmInfo a = wireInfo<WireCode::kBf16>("p2p-twoshot+bf16", "two-shot, bf16");
  return a;
}
const AlgorithmInfo& p2pTwoShotInt8Algorithm() {
  static const AlgorithmInfo a = wireInfo<WireCode::kInt8>("p2p-twoshot+int8", "two-shot, int8");
  return a;
}
const AlgorithmInfo& p2pTwoShotFp8Algorithm() {
  static const AlgorithmInfo a = wireInfo<WireCode::kFp8>("p2p-twoshot+fp8", "two-shot, fp8");
  return a;
}
const AlgorithmInfo& p2pTwoShotInt4Algorithm() {
  static const AlgorithmInfo a = wireInfo<WireCode::kInt4>("p2p-twoshot+int4", "two-shot, int4");
  return a;
}

}  // namespace tpscope::detail
