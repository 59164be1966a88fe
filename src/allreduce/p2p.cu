// SPDX-License-Identifier: Apache-2.0
// p2p.cu - backend `p2p`, host side: peer access, receive buffers, flags, and the per-call launches.
//
// Which algorithm runs for a call is p2pAlgoFor() in p2p_algo.h (LL one-shot, one-shot, two-shot by
// size and alignment; `tpscope topo` shows the same rule). Two-shot runs in pieces of at most
// kTwoShotPiece bytes, each one launch; a remainder that does not split into N whole vectors goes
// through one-shot. Both are capturable: the only state is device memory.
#include "allreduce/p2p.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "allreduce/async_status.h"
#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_launch.cuh"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kOneShotMax = kP2pOneShotMax;
constexpr size_t kTwoShotPiece = kP2pTwoShotPiece;
constexpr size_t kLLMax = kP2pLLMax;

struct Algo {
  int blocks = 0;
  size_t recv_stride = 0;
  std::vector<DeviceBuffer> recv, flags, counters;
  std::vector<P2pHandle> handles;
};

class P2pBackend final : public Backend {
 public:
  tpsResult_t init(const std::vector<int>& devices, const HostTuning& tuning);
  tpsBackend_t kind() const override { return tpsBackendP2p; }
  tpsPath_t pathFor(const CallArgs& a) const override { return p2pPathOf(algoFor(a)); }
  Traffic trafficFor(tpsPath_t path, size_t bytes) const override {
    const size_t t = p2pBytesPerGpu(path, bytes, devices_.size());
    return Traffic{t, t};
  }
  tpsResult_t allReduce(const CallArgs& a) override {
    switch (a.dtype) {
      case tpsFloat32: return run<float>(a);
      case tpsFloat16: return run<__half>(a);
      case tpsBfloat16: return run<__nv_bfloat16>(a);
      default: return tpsInvalidArgument;
    }
  }
  tpsResult_t asyncError() const override { return status_.error(static_cast<int>(devices_.size())); }
  tpsResult_t allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m) override;
  tpsResult_t pushChannel(int rank, PushChannel* ch) const override;

 private:
  tpsResult_t initAlgo(Algo* a, int blocks, size_t recv_stride);
  P2pAlgo algoFor(const CallArgs& a) const;  // p2pAlgoFor by the call's size and its buffers' alignment
  tpsResult_t pushedAddRmsNorm(const CallArgs& a, const NormArgs& m);
  // p2pLaunchAddNorm<kPushed> on every GPU.
  template <bool kPushed>
  tpsResult_t launchAddNorm(const CallArgs& a, const NormArgs& m);
  template <typename T>
  tpsResult_t run(const CallArgs& a);
  template <typename T>
  tpsResult_t oneShot(const CallArgs& a, size_t off, size_t count, bool aligned);

  std::vector<int> devices_;
  HostTuning tuning_{};
  AsyncStatus status_;
  Algo one_, two_;
  // LL one-shot: lines per (slot, sender) for kLLMax bytes, counters per block.
  std::vector<DeviceBuffer> ll_recv_, ll_counters_, ll_norm_;
  std::vector<P2pLLHandle> ll_;
  int ll_blocks_ = 0;
  bool ll_pdl_ = false;  // launch the LL kernels as programmatic dependents (every GPU sm_90+)
};

tpsResult_t P2pBackend::initAlgo(Algo* al, int blocks, size_t recv_stride) {
  const int n = static_cast<int>(devices_.size());
  al->blocks = blocks;
  al->recv_stride = recv_stride;
  al->recv.resize(n);
  al->flags.resize(n);
  al->counters.resize(n);
  al->handles.resize(n);
  const size_t flag_bytes = size_t{2} * 2 * n * blocks * kP2pFlagStride * sizeof(unsigned long long);
  for (int r = 0; r < n; ++r) {
    const int d = devices_[r];
    DeviceGuard g(d);
    TPS_CHECK(DeviceBuffer::create(d, 2 * n * recv_stride, &al->recv[r]));
    TPS_CHECK(DeviceBuffer::create(d, flag_bytes, &al->flags[r]));
    TPS_CHECK(DeviceBuffer::create(d, blocks * sizeof(unsigned long long), &al->counters[r]));
    TPS_CUDA_CHECK(cudaMemset(al->flags[r].get(), 0, flag_bytes));
    TPS_CUDA_CHECK(cudaMemset(al->counters[r].get(), 0, al->counters[r].bytes()));
  }
  for (int r = 0; r < n; ++r) {
    P2pHandle& h = al->handles[r];
    std::memset(&h, 0, sizeof(h));
    for (int q = 0; q < n; ++q) {
      h.recv[q] = al->recv[q].as<char>();
      h.flags[q] = al->flags[q].as<unsigned long long>();
    }
    h.counters = al->counters[r].as<unsigned long long>();
    TPS_CHECK(status_.devicePointer(devices_[r], &h.status));
    h.recv_stride = recv_stride;
    h.timeout_ns = static_cast<unsigned long long>(tuning_.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = n;
  }
  return tpsSuccess;
}

tpsResult_t P2pBackend::init(const std::vector<int>& devices, const HostTuning& tuning) {
  devices_ = devices;
  tuning_ = tuning;
  const int n = static_cast<int>(devices.size());
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      TPS_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      TPS_EXPECT(ok, tpsUnavailable, "p2p backend: GPU {} has no peer access to GPU {}", a, b);
      DeviceGuard g(a);
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        TPS_CUDA_CHECK(e);
    }
  TPS_CHECK(status_.create());
  // Ranks that share a GPU (tpsConfig_t.shared_devices) cut the grids of the flag kernels, whose blocks
  // take a whole SM each, so that every rank's grid is resident at once (backend.h).
  const int per_gpu = ranksPerGpu(devices);
  TPS_CHECK(initAlgo(&one_, sharedGpuGrid(kP2pOneShotBlocks, per_gpu), kOneShotMax));
  TPS_CHECK(initAlgo(&two_, sharedGpuGrid(kP2pTwoShotBlocks, per_gpu), kTwoShotPiece / n + 64));
  const size_t lines = kLLMax / 8;
  ll_blocks_ = kP2pLLBlocks;
  // Programmatic dependents (cudaLaunchAttributeProgrammaticStreamSerialization) where every GPU is
  // sm_90 or later: the LL kernels' blocks are then resident and waiting (pdlWait, common/pdl.cuh) when
  // the kernel before them on the caller's stream ends, instead of being launched then.
  ll_pdl_ = true;
  for (int d : devices_) {
    int major = 0;
    TPS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    ll_pdl_ = ll_pdl_ && major >= 9;
  }
  ll_recv_.resize(n);
  ll_counters_.resize(n);
  ll_norm_.resize(n);
  ll_.resize(n);
  for (int r = 0; r < n; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CHECK(DeviceBuffer::create(devices_[r], size_t{2} * n * lines * sizeof(LLLine), &ll_recv_[r]));
    TPS_CUDA_CHECK(cudaMemset(ll_recv_[r].get(), 0, ll_recv_[r].bytes()));
    TPS_CHECK(DeviceBuffer::create(devices_[r], ll_blocks_ * sizeof(unsigned long long), &ll_counters_[r]));
    TPS_CUDA_CHECK(cudaMemset(ll_counters_[r].get(), 0, ll_counters_[r].bytes()));
    // The fused add + norm's per-row counters ([blocks] unsigned, zero) and per-block sums ([blocks] float).
    TPS_CHECK(DeviceBuffer::create(devices_[r], ll_blocks_ * (sizeof(unsigned) + sizeof(float)), &ll_norm_[r]));
    TPS_CUDA_CHECK(cudaMemset(ll_norm_[r].get(), 0, ll_norm_[r].bytes()));
  }
  for (int r = 0; r < n; ++r) {
    P2pLLHandle& h = ll_[r];
    std::memset(&h, 0, sizeof(h));
    for (int q = 0; q < n; ++q) h.recv[q] = ll_recv_[q].as<LLLine>();
    h.own = h.recv[r];
    h.counters = ll_counters_[r].as<unsigned long long>();
    h.norm_done = ll_norm_[r].as<unsigned>();
    h.norm_part = reinterpret_cast<float*>(h.norm_done + ll_blocks_);
    TPS_CHECK(status_.devicePointer(devices_[r], &h.status));
    h.lines = lines;
    h.timeout_ns = static_cast<unsigned long long>(tuning_.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = n;
  }
  for (int d : devices_) {
    DeviceGuard g(d);
    TPS_CUDA_CHECK(p2pLoadKernels());
  }
  TPS_LOG_INFO("p2p backend: {} GPUs, one-shot up to {} B, two-shot pieces of {} B", n, kOneShotMax, kTwoShotPiece);
  return tpsSuccess;
}

// A pushed call's rows are the LL grid's blocks (each row one block of the by-row kernel, whose
// counter the pushing kernel reads), its words the LL lines.
tpsResult_t P2pBackend::pushChannel(int rank, PushChannel* ch) const {
  const P2pLLHandle& h = ll_[rank];
  *ch = PushChannel{};
  for (int q = 0; q < h.nranks; ++q) ch->lines[q] = h.recv[q];
  ch->counters = h.counters;
  ch->lines_per_sender = h.lines;
  ch->rank = rank, ch->nranks = h.nranks;
  ch->max_rows = ll_blocks_;
  ch->max_width = kRowThreads * kRowWords * 4;
  ch->max_words = kLLMax / 8;
  return tpsSuccess;
}

// Every buffer of a fused call 8-byte aligned (the LL kernels move 8-byte words).
bool aligned8(const CallArgs& a, const NormArgs& m, size_t ndev) {
  for (size_t r = 0; r < ndev; ++r)
    for (const void* p :
         std::initializer_list<const void*>{a.bufs[r], m.residual_in[r], m.residual_out[r],
                                            m.normed ? m.normed[r] : nullptr, m.weight ? m.weight[r] : nullptr})
      if (reinterpret_cast<uintptr_t>(p) % 8 != 0) return false;
  return true;
}

template <bool kPushed>
tpsResult_t P2pBackend::launchAddNorm(const CallArgs& a, const NormArgs& m) {
  for (size_t r = 0; r < devices_.size(); ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CUDA_CHECK(p2pLaunchAddNorm<kPushed>(
        ll_pdl_, ll_[r], static_cast<const __nv_bfloat16*>(a.bufs[r]),
        static_cast<const __nv_bfloat16*>(m.residual_in[r]), static_cast<__nv_bfloat16*>(m.residual_out[r]),
        m.weight ? static_cast<const __nv_bfloat16*>(m.weight[r]) : nullptr,
        m.normed ? static_cast<__nv_bfloat16*>(m.normed[r]) : nullptr, m.rows, m.width, m.eps, a.streams[r]));
  }
  return tpsSuccess;
}

// Fused where the call would take the LL one-shot (p2pFusedFits).
tpsResult_t P2pBackend::allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m) {
  if (m.pushed) return pushedAddRmsNorm(a, m);
  const size_t n = devices_.size();
  bool apart = true;
  for (size_t r = 0; r < n; ++r) apart = apart && m.residual_in[r] != m.residual_out[r];
  if (!p2pFusedFits(a.dtype, a.bytes(), m.rows, m.width, aligned8(a, m, n), m.weight != nullptr, apart))
    return tpsUnavailable;
  return launchAddNorm<false>(a, m);
}

// The peers' words are already on their way: only the by-row kernel's wait, sum, add and norm remain.
// The shape was the caller's to check against the channel before it pushed, so a call outside it is
// an argument error (not tpsUnavailable: the steps cannot be run apart any more).
tpsResult_t P2pBackend::pushedAddRmsNorm(const CallArgs& a, const NormArgs& m) {
  TPS_EXPECT(a.dtype == tpsBfloat16, tpsInvalidArgument, "pushed reduction: dtype {} (bf16 only)",
             tpsDataTypeName(a.dtype));
  TPS_EXPECT(m.rows <= static_cast<size_t>(ll_blocks_) && m.width % 4 == 0 &&
                 m.width / 4 <= static_cast<size_t>(kRowThreads) * kRowWords && a.count / 4 <= kLLMax / 8,
             tpsInvalidArgument, "pushed reduction: {} rows x {} do not fit the push channel ({} rows, {} words)",
             m.rows, m.width, ll_blocks_, kLLMax / 8);
  TPS_EXPECT(aligned8(a, m, devices_.size()), tpsInvalidArgument, "pushed reduction: a buffer is not 8-byte aligned");
  return launchAddNorm<true>(a, m);
}

template <typename T>
tpsResult_t P2pBackend::oneShot(const CallArgs& a, size_t off, size_t count, bool aligned) {
  const size_t piece = kOneShotMax / sizeof(T);
  for (size_t p = 0; p < count; p += piece) {
    const size_t cnt = std::min(piece, count - p);
    for (size_t r = 0; r < devices_.size(); ++r) {
      DeviceGuard g(devices_[r]);
      T* buf = static_cast<T*>(a.bufs[r]) + off + p;
      if (aligned)
        p2pOneShot<T, true><<<one_.blocks, kP2pThreads, 0, a.streams[r]>>>(one_.handles[r], buf, cnt);
      else
        p2pOneShot<T, false><<<one_.blocks, kP2pThreads, 0, a.streams[r]>>>(one_.handles[r], buf, cnt);
      TPS_CUDA_CHECK_LAUNCH();
    }
  }
  return tpsSuccess;
}

// Whether every GPU's buffer of the call is `align`-byte aligned.
bool buffersAligned(const CallArgs& a, size_t ndev, uintptr_t align) {
  for (size_t r = 0; r < ndev; ++r)
    if (reinterpret_cast<uintptr_t>(a.bufs[r]) % align != 0) return false;
  return true;
}

P2pAlgo P2pBackend::algoFor(const CallArgs& a) const {
  const size_t n = devices_.size();
  return p2pAlgoFor(a.bytes(), buffersAligned(a, n, 8), buffersAligned(a, n, 16));
}

template <typename T>
tpsResult_t P2pBackend::run(const CallArgs& a) {
  const size_t n = devices_.size();
  const P2pAlgo algo = algoFor(a);
  const bool aligned = buffersAligned(a, n, 16);
  if (algo == P2pAlgo::kLL) {
    for (size_t r = 0; r < n; ++r) {
      DeviceGuard g(devices_[r]);
      TPS_CUDA_CHECK(p2pLaunchLL<T>(ll_pdl_, ll_[r], static_cast<T*>(a.bufs[r]), a.count, a.streams[r]));
    }
    return tpsSuccess;
  }
  // Misaligned buffers (rare: an offset into an allocation) take the scalar one-shot for everything.
  if (algo == P2pAlgo::kOneShot) return oneShot<T>(a, 0, a.count, aligned);
  const size_t unit = n * Vec<T>::kElems;  // two-shot needs N whole vectors per piece
  const size_t piece_max = kTwoShotPiece / sizeof(T) / unit * unit;
  const size_t body = a.count / unit * unit;
  for (size_t off = 0; off < body; off += piece_max) {
    const size_t cnt = std::min(piece_max, body - off);
    for (size_t r = 0; r < n; ++r) {
      DeviceGuard g(devices_[r]);
      P2pHandle h = two_.handles[r];
      for (size_t q = 0; q < n; ++q) h.bufs[q] = static_cast<T*>(a.bufs[q]) + off;
      p2pTwoShot<T><<<two_.blocks, kP2pThreads, 0, a.streams[r]>>>(h, cnt);
      TPS_CUDA_CHECK_LAUNCH();
    }
  }
  if (body < a.count) TPS_CHECK(oneShot<T>(a, body, a.count - body, true));
  return tpsSuccess;
}

}  // namespace

tpsResult_t createP2pBackend(const std::vector<int>& devices, const HostTuning& tuning, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<P2pBackend>();
  TPS_CHECK(b->init(devices, tuning));
  *out = std::move(b);
  return tpsSuccess;
}

}  // namespace tpscope::detail
