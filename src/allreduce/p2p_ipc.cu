// SPDX-License-Identifier: Apache-2.0
// p2p_ipc.cu - backend `p2p` for a rank-per-process communicator: the same kernels as p2p.cu (LL
// one-shot, flag one-shot, two-shot, the fused add + norm), with the peers' receive buffers and flags
// opened from CUDA IPC handles the ranks exchange through the bootstrap.
//
// What differs from one process, and why:
// - The algorithm is a function of the message size alone (p2pAlgoFor with aligned buffers): a rank
//   cannot see its peers' buffers, and every rank must run the same kernel. A buffer that is not aligned
//   for that kernel (8 bytes for LL, 16 for the others) is copied into this rank's aligned stage first
//   and back after: same kernel, same sums, the same bits as everywhere else.
// - Two-shot stores its results into every rank's buffer, and a rank cannot address its peers' buffers:
//   each rank copies its data into its stage (a buffer the peers opened), the kernel runs on the stages,
//   and the result is copied back. A peer writes this rank's stage only in phase 2 of a call, after this
//   rank's phase-1 flag of the same call, which follows (in stream order) the copy back of the call
//   before and the copy in of this one; and before this rank's kernel ends. So the stage is never
//   written by a peer while this rank copies it.
// - Push channels are not offered (pushed calls are tpsUnavailable).
// The grids, the LL geometry and the fused call's choice of kernel are p2p.cu's (p2p_algo.h,
// p2p_launch.cuh); ranks that share a GPU cut the flag kernels' grids as there (backend.h).
#include "allreduce/p2p_ipc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>

#include "allreduce/async_status.h"
#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_launch.cuh"
#include "allreduce/rank_backend.cuh"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kTwoShotPiece = kP2pTwoShotPiece;

// The buffers of this rank that its peers open, in the order of the exchanged handles.
enum Shared { kOneRecv, kOneFlags, kTwoRecv, kTwoFlags, kStage, kLLRecv, kNumShared };

struct Exported {
  std::array<cudaIpcMemHandle_t, kNumShared> handles;
};

class P2pIpcBackend final : public RankBackend<P2pIpcBackend> {
 public:
  ~P2pIpcBackend() override;
  tpsResult_t init(RankGroup& g, const HostTuning& tuning);
  tpsBackend_t kind() const override { return tpsBackendP2p; }
  // Every rank runs the kernel for aligned buffers (a misaligned one goes through the stage).
  tpsPath_t pathFor(const CallArgs& a) const override { return p2pPathOf(p2pAlgoFor(a.bytes())); }
  Traffic trafficFor(tpsPath_t path, size_t bytes) const override {
    const size_t t = p2pBytesPerGpu(path, bytes, static_cast<size_t>(nranks_));
    return Traffic{t, t};
  }
  tpsResult_t allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m) override;
  tpsResult_t asyncError() const override { return status_.error(nranks_); }
  // This rank's call of `count` elements of T (RankBackend::allReduce dispatches here).
  template <typename T>
  tpsResult_t run(void* buf, size_t count, cudaStream_t stream);

 private:
  template <typename T>
  tpsResult_t oneShot(T* buf, size_t count, cudaStream_t stream);

  int device_ = -1, rank_ = 0, nranks_ = 0;
  HostTuning tuning_{};
  AsyncStatus status_;
  std::array<DeviceBuffer, kNumShared> shared_;
  DeviceBuffer one_counters_, two_counters_, ll_counters_, ll_norm_;
  std::vector<std::array<void*, kNumShared>> peers_;  // [rank][buffer]: opened handles (own: own pointers)
  P2pHandle one_{}, two_{};
  P2pLLHandle ll_{};
  int one_blocks_ = 0, two_blocks_ = 0;
  bool ll_pdl_ = false;  // launch the LL kernels as programmatic dependents (this rank's GPU is sm_90+)
};

P2pIpcBackend::~P2pIpcBackend() {
  DeviceGuard g(device_ < 0 ? 0 : device_);
  for (int q = 0; q < static_cast<int>(peers_.size()); ++q)
    if (q != rank_)
      for (void* p : peers_[q])
        if (p) (void)cudaIpcCloseMemHandle(p);
  (void)cudaGetLastError();
}

tpsResult_t P2pIpcBackend::init(RankGroup& g, const HostTuning& tuning) {
  device_ = g.device, rank_ = g.rank, nranks_ = g.nranks, tuning_ = tuning;
  const int n = nranks_;
  one_blocks_ = sharedGpuGrid(kP2pOneShotBlocks, g.ranks_per_gpu);
  two_blocks_ = sharedGpuGrid(kP2pTwoShotBlocks, g.ranks_per_gpu);
  const int ll_blocks = kP2pLLBlocks;
  const size_t lines = kP2pLLMax / 8;
  const size_t one_stride = kP2pOneShotMax, two_stride = kTwoShotPiece / n + 64;

  // This rank's buffers and their handles; a failure here is exchanged, so every rank gives up alike.
  auto local = [&]() -> tpsResult_t {
    DeviceGuard dg(device_);
    int major = 0;
    TPS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    ll_pdl_ = major >= 9;
    TPS_CHECK(status_.create());
    const size_t flag_one = size_t{2} * 2 * n * one_blocks_ * kP2pFlagStride * sizeof(unsigned long long);
    const size_t flag_two = size_t{2} * 2 * n * two_blocks_ * kP2pFlagStride * sizeof(unsigned long long);
    const std::array<size_t, kNumShared> sizes = {2 * n * one_stride, flag_one,
                                                  2 * n * two_stride, flag_two,
                                                  kTwoShotPiece,      size_t{2} * n * lines * sizeof(LLLine)};
    for (int k = 0; k < kNumShared; ++k) {
      TPS_CHECK(DeviceBuffer::create(device_, sizes[k], &shared_[k]));
      TPS_CUDA_CHECK(cudaMemset(shared_[k].get(), 0, sizes[k]));
    }
    TPS_CHECK(DeviceBuffer::create(device_, one_blocks_ * sizeof(unsigned long long), &one_counters_));
    TPS_CHECK(DeviceBuffer::create(device_, two_blocks_ * sizeof(unsigned long long), &two_counters_));
    TPS_CHECK(DeviceBuffer::create(device_, ll_blocks * sizeof(unsigned long long), &ll_counters_));
    TPS_CHECK(DeviceBuffer::create(device_, ll_blocks * (sizeof(unsigned) + sizeof(float)), &ll_norm_));
    for (DeviceBuffer* b : {&one_counters_, &two_counters_, &ll_counters_, &ll_norm_})
      TPS_CUDA_CHECK(cudaMemset(b->get(), 0, b->bytes()));
    // The memsets must be done before a peer can write into these buffers.
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    // Load the kernels now (lazy loading waits for an idle device, which a peer's kernel may never allow).
    TPS_CUDA_CHECK(p2pLoadKernels());
    return tpsSuccess;
  };
  Exported mine{};
  tpsResult_t status = local();
  for (int k = 0; k < kNumShared && status == tpsSuccess; ++k)
    if (cudaIpcGetMemHandle(&mine.handles[k], shared_[k].get()) != cudaSuccess) {
      (void)cudaGetLastError();
      TPS_LOG_WARN("p2p backend: rank {}: cudaIpcGetMemHandle failed (CUDA IPC is not available here)", rank_);
      status = tpsUnavailable;
    }
  std::vector<char> all;
  TPS_CHECK(exchange(g, "exporting the p2p buffers", status, &mine, sizeof(mine), &all));

  // Open the peers' buffers.
  status = tpsSuccess;
  peers_.assign(n, {});
  {
    DeviceGuard dg(device_);
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < kNumShared; ++k) {
        if (q == rank_) {
          peers_[q][k] = shared_[k].get();
          continue;
        }
        if (status != tpsSuccess) continue;
        const cudaIpcMemHandle_t& h = reinterpret_cast<const Exported*>(all.data())[q].handles[k];
        const cudaError_t e = cudaIpcOpenMemHandle(&peers_[q][k], h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          peers_[q][k] = nullptr;
          TPS_LOG_WARN("p2p backend: rank {} cannot open rank {}'s memory: {} ({})", rank_, q, cudaGetErrorName(e),
                       cudaGetErrorString(e));
          status = tpsUnavailable;
        }
      }
  }
  TPS_CHECK(agree(g, "opening the peers' p2p buffers", status));

  auto fill = [&](P2pHandle* h, Shared recv, Shared flags, const DeviceBuffer& counters, size_t stride) {
    std::memset(h, 0, sizeof(*h));
    for (int q = 0; q < n; ++q) {
      h->recv[q] = static_cast<char*>(peers_[q][recv]);
      h->flags[q] = static_cast<unsigned long long*>(peers_[q][flags]);
      h->bufs[q] = peers_[q][kStage];
    }
    h->counters = counters.as<unsigned long long>();
    h->recv_stride = stride;
    h->timeout_ns = static_cast<unsigned long long>(tuning_.spin_timeout_ms) * 1000000ull;
    h->rank = rank_;
    h->nranks = n;
    return status_.devicePointer(device_, &h->status);
  };
  TPS_CHECK(fill(&one_, kOneRecv, kOneFlags, one_counters_, one_stride));
  TPS_CHECK(fill(&two_, kTwoRecv, kTwoFlags, two_counters_, two_stride));
  std::memset(&ll_, 0, sizeof(ll_));
  for (int q = 0; q < n; ++q) ll_.recv[q] = static_cast<LLLine*>(peers_[q][kLLRecv]);
  ll_.own = ll_.recv[rank_];
  ll_.counters = ll_counters_.as<unsigned long long>();
  ll_.norm_done = ll_norm_.as<unsigned>();
  ll_.norm_part = reinterpret_cast<float*>(ll_.norm_done + ll_blocks);
  TPS_CHECK(status_.devicePointer(device_, &ll_.status));
  ll_.lines = lines;
  ll_.timeout_ns = one_.timeout_ns;
  ll_.rank = rank_;
  ll_.nranks = n;
  TPS_LOG_INFO("p2p backend: rank {} of {} on GPU {}, peers' buffers through CUDA IPC", rank_, n, device_);
  return tpsSuccess;
}

template <typename T>
tpsResult_t P2pIpcBackend::oneShot(T* buf, size_t count, cudaStream_t stream) {
  const size_t piece = kP2pOneShotMax / sizeof(T);
  for (size_t p = 0; p < count; p += piece) {
    p2pOneShot<T, true><<<one_blocks_, kP2pThreads, 0, stream>>>(one_, buf + p, std::min(piece, count - p));
    TPS_CUDA_CHECK_LAUNCH();
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t P2pIpcBackend::run(void* user, size_t count, cudaStream_t stream) {
  DeviceGuard g(device_);
  const size_t bytes = count * sizeof(T);
  T* stage = shared_[kStage].as<T>();
  const uintptr_t addr = reinterpret_cast<uintptr_t>(user);
  const P2pAlgo algo = p2pAlgoFor(bytes);
  if (algo != P2pAlgo::kTwoShot) {
    // Through the stage when the buffer is not aligned for the kernel every rank runs.
    const bool direct = addr % (algo == P2pAlgo::kLL ? 8 : 16) == 0;
    T* buf = direct ? static_cast<T*>(user) : stage;
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(stage, user, bytes, cudaMemcpyDeviceToDevice, stream));
    if (algo == P2pAlgo::kLL)
      TPS_CUDA_CHECK(p2pLaunchLL<T>(ll_pdl_, ll_, buf, count, stream));
    else
      TPS_CHECK(oneShot<T>(buf, count, stream));
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(user, stage, bytes, cudaMemcpyDeviceToDevice, stream));
    return tpsSuccess;
  }
  // Two-shot on the stages, piece by piece; a piece's tail that is not N whole vectors takes one-shot.
  const size_t unit = static_cast<size_t>(nranks_) * Vec<T>::kElems;
  const size_t piece_max = kTwoShotPiece / sizeof(T) / unit * unit;
  for (size_t off = 0; off < count; off += piece_max) {
    const size_t cnt = std::min(piece_max, count - off);
    const size_t body = cnt / unit * unit;
    T* src = static_cast<T*>(user) + off;
    TPS_CUDA_CHECK(cudaMemcpyAsync(stage, src, cnt * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    if (body > 0) {
      p2pTwoShot<T><<<two_blocks_, kP2pThreads, 0, stream>>>(two_, body);
      TPS_CUDA_CHECK_LAUNCH();
    }
    if (body < cnt) TPS_CHECK(oneShot<T>(stage + body, cnt - body, stream));
    TPS_CUDA_CHECK(cudaMemcpyAsync(src, stage, cnt * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  }
  return tpsSuccess;
}

// As P2pBackend::allReduceAddRmsNorm for this rank's buffers (p2pFusedFits, p2pLaunchAddNorm).
tpsResult_t P2pIpcBackend::allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m) {
  if (m.pushed) return tpsUnavailable;
  bool aligned8 = true;
  for (const void* p :
       {static_cast<const void*>(a.bufs[0]), m.residual_in[0], static_cast<const void*>(m.residual_out[0]),
        m.normed ? static_cast<const void*>(m.normed[0]) : nullptr, m.weight ? m.weight[0] : nullptr})
    aligned8 = aligned8 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
  if (!p2pFusedFits(a.dtype, a.bytes(), m.rows, m.width, aligned8, m.weight != nullptr,
                    m.residual_in[0] != m.residual_out[0]))
    return tpsUnavailable;
  DeviceGuard g(device_);
  TPS_CUDA_CHECK(p2pLaunchAddNorm<false>(
      ll_pdl_, ll_, static_cast<const __nv_bfloat16*>(a.bufs[0]), static_cast<const __nv_bfloat16*>(m.residual_in[0]),
      static_cast<__nv_bfloat16*>(m.residual_out[0]),
      m.weight ? static_cast<const __nv_bfloat16*>(m.weight[0]) : nullptr,
      m.normed ? static_cast<__nv_bfloat16*>(m.normed[0]) : nullptr, m.rows, m.width, m.eps, a.streams[0]));
  return tpsSuccess;
}

}  // namespace

tpsResult_t createP2pIpcBackend(RankGroup& g, const HostTuning& tuning, std::unique_ptr<Backend>* out) {
  return P2pIpcBackend::create(g, tuning, out);
}

}  // namespace tpscope::detail
