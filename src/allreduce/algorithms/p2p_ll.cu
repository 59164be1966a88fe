// SPDX-License-Identifier: Apache-2.0
// algorithms/p2p_ll.cu - p2p-ll: the LL one-shot (p2p_ll_kernels.cuh). Each 8 bytes travel into every
// peer's memory as one 16-byte line with the call's sequence number, so there is no flag round trip at
// all: decode sizes, up to kP2pLLMax per GPU in whole 8-byte words, both process shapes. It also carries
// the reduction fused with the residual add and RMSNorm after it (tpsAllReduceAddRmsNorm) and, in one
// process, pushed calls (push.h), whose lines are these.
//
// Every rank runs the same kernel on an 8-byte aligned buffer: a buffer that is not so aligned goes
// through a stage of its rank first and back after (the same sums, the same bits). The kernels are
// launched as programmatic dependents (common/pdl.cuh) on sm_90 and later: their blocks are then
// resident and waiting when the kernel before them on the caller's stream ends.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <initializer_list>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/p2p_algo.h"
#include "allreduce/p2p_ll_kernels.cuh"
#include "allreduce/peer_memory.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

namespace {

constexpr size_t kLines = kP2pLLMax / 8;  // lines per (slot, sender)
static_assert(kP2pLLThreadsMax <= kP2pThreads && kP2pLLThreads <= kFusedThreads);

class P2pLL final : public Algorithm {
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
  tpsResult_t addRmsNorm(const CallArgs& a, const NormArgs& m) override;
  tpsResult_t pushChannel(int rank, PushChannel* ch) const override;

 private:
  template <typename T>
  tpsResult_t run(const CallArgs& a);
  // The fused kernel on every local rank (the call already fits: p2pFusedFits, or a checked push).
  template <bool kPushed>
  tpsResult_t launchAddNorm(const CallArgs& a, const NormArgs& m);
  bool aligned8(const CallArgs& a, const NormArgs& m) const;

  std::vector<int> devices_;
  bool pushes_ = false;  // pushed calls are taken (one process: the caller's kernels address every rank)
  std::vector<bool> pdl_;
  std::vector<DeviceBuffer> counters_, norm_, stage_;
  std::vector<P2pLLHandle> handles_;
};

tpsResult_t P2pLL::init(BackendContext& ctx) {
  devices_ = ctx.devices;
  pushes_ = ctx.shape == kOneProcess;
  const int n = ctx.nranks;
  SharedDevice lines;
  TPS_CHECK(ctx.peers->allocate(size_t{2} * n * kLines * sizeof(LLLine), &lines));
  const int local = ctx.localRanks();
  counters_.resize(local);
  norm_.resize(local);
  stage_.resize(local);
  handles_.resize(local);
  pdl_.resize(local);
  for (int r = 0; r < local; ++r) {
    const int d = devices_[r];
    int major = 0;
    TPS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    pdl_[r] = major >= 9;
    TPS_CHECK(DeviceBuffer::create(d, kP2pLLBlocks * sizeof(unsigned long long), &counters_[r]));
    // The fused add + norm's per-row counters ([blocks] unsigned, zero) and per-block sums ([blocks] float).
    TPS_CHECK(DeviceBuffer::create(d, kP2pLLBlocks * (sizeof(unsigned) + sizeof(float)), &norm_[r]));
    TPS_CHECK(DeviceBuffer::create(d, kP2pLLMax, &stage_[r]));
    DeviceGuard g(d);
    TPS_CUDA_CHECK(cudaMemset(counters_[r].get(), 0, counters_[r].bytes()));
    TPS_CUDA_CHECK(cudaMemset(norm_[r].get(), 0, norm_[r].bytes()));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    P2pLLHandle& h = handles_[r];
    std::memset(&h, 0, sizeof(h));
    for (int q = 0; q < n; ++q) h.recv[q] = static_cast<LLLine*>(lines.at[r][q]);
    h.own = static_cast<LLLine*>(lines.mine(r));
    h.counters = counters_[r].as<unsigned long long>();
    h.norm_done = norm_[r].as<unsigned>();
    h.norm_part = reinterpret_cast<float*>(h.norm_done + kP2pLLBlocks);
    TPS_CHECK(ctx.status->devicePointer(d, &h.status));
    h.lines = kLines;
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = ctx.first_rank + r;
    h.nranks = n;
    // Load the kernels now: lazy loading waits for an idle device, which a peer's spinning kernel may
    // never allow.
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLL<float>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLL<__half>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLL<__nv_bfloat16>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLLAddNorm));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLLAddNormRow<false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, p2pOneShotLLAddNormRow<true>));
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t P2pLL::run(const CallArgs& a) {
  const size_t bytes = a.bytes();
  for (size_t r = 0; r < devices_.size(); ++r) {
    DeviceGuard g(devices_[r]);
    T* user = static_cast<T*>(a.bufs[r]);
    const bool direct = reinterpret_cast<uintptr_t>(user) % 8 == 0;
    T* buf = direct ? user : stage_[r].as<T>();
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(buf, user, bytes, cudaMemcpyDeviceToDevice, a.streams[r]));
    TPS_CUDA_CHECK(launchKernel(pdl_[r], p2pOneShotLL<T>, dim3(kP2pLLBlocks), dim3(p2pLLThreads(bytes)), a.streams[r],
                                handles_[r], buf, a.count));
    if (!direct) TPS_CUDA_CHECK(cudaMemcpyAsync(user, buf, bytes, cudaMemcpyDeviceToDevice, a.streams[r]));
  }
  return tpsSuccess;
}

// Every buffer of a fused call 8-byte aligned (the LL kernels move 8-byte words).
bool P2pLL::aligned8(const CallArgs& a, const NormArgs& m) const {
  for (size_t r = 0; r < devices_.size(); ++r)
    for (const void* p :
         std::initializer_list<const void*>{a.bufs[r], m.residual_in[r], m.residual_out[r],
                                            m.normed ? m.normed[r] : nullptr, m.weight ? m.weight[r] : nullptr})
      if (reinterpret_cast<uintptr_t>(p) % 8 != 0) return false;
  return true;
}

// With a norm, one block per row where a row fits one block (faster than the row spread over the LL grid:
// docs/PERFORMANCE.md, "Workload (tp)"); the add alone, or a wider row, takes the spread kernel (without a
// norm it is the LL kernel plus the add). A pushed call always takes the by-row kernel, on the whole LL
// grid so that every block's sequence number advances as in the other LL kernels.
template <bool kPushed>
tpsResult_t P2pLL::launchAddNorm(const CallArgs& a, const NormArgs& m) {
  const bool by_row = kPushed || (m.weight != nullptr && m.width / 4 <= static_cast<size_t>(kRowThreads) * kRowWords);
  for (size_t r = 0; r < devices_.size(); ++r) {
    DeviceGuard g(devices_[r]);
    const auto* partial = static_cast<const __nv_bfloat16*>(a.bufs[r]);
    const auto* res_in = static_cast<const __nv_bfloat16*>(m.residual_in[r]);
    auto* res_out = static_cast<__nv_bfloat16*>(m.residual_out[r]);
    const auto* weight = m.weight ? static_cast<const __nv_bfloat16*>(m.weight[r]) : nullptr;
    auto* normed = m.normed ? static_cast<__nv_bfloat16*>(m.normed[r]) : nullptr;
    const int rows = static_cast<int>(m.rows), width = static_cast<int>(m.width);
    if (by_row)
      TPS_CUDA_CHECK(launchKernel(pdl_[r], p2pOneShotLLAddNormRow<kPushed>, dim3(kP2pLLBlocks), dim3(kRowThreads),
                                  a.streams[r], handles_[r], partial, res_in, res_out, weight, normed, rows, width,
                                  m.eps));
    else
      TPS_CUDA_CHECK(launchKernel(pdl_[r], p2pOneShotLLAddNorm, dim3(kP2pLLBlocks), dim3(kP2pLLThreads), a.streams[r],
                                  handles_[r], partial, res_in, res_out, weight, normed, rows, width, m.eps));
  }
  return tpsSuccess;
}

tpsResult_t P2pLL::addRmsNorm(const CallArgs& a, const NormArgs& m) {
  if (m.pushed) {
    // The peers' words are already on their way: only the by-row kernel's wait, sum, add and norm remain.
    // The shape was the caller's to check against the channel before it pushed, so a call outside it is
    // an argument error (not tpsUnavailable: the steps cannot be run apart any more).
    TPS_EXPECT(pushes_, tpsUnavailable, "pushed reduction: push channels are offered in one process only");
    TPS_EXPECT(a.dtype == tpsBfloat16, tpsInvalidArgument, "pushed reduction: dtype {} (bf16 only)",
               tpsDataTypeName(a.dtype));
    TPS_EXPECT(m.rows <= static_cast<size_t>(kP2pLLBlocks) && m.width % 4 == 0 &&
                   m.width / 4 <= static_cast<size_t>(kRowThreads) * kRowWords && a.count / 4 <= kLines,
               tpsInvalidArgument, "pushed reduction: {} rows x {} do not fit the push channel ({} rows, {} words)",
               m.rows, m.width, kP2pLLBlocks, kLines);
    TPS_EXPECT(aligned8(a, m), tpsInvalidArgument, "pushed reduction: a buffer is not 8-byte aligned");
    return launchAddNorm<true>(a, m);
  }
  bool apart = true;
  for (size_t r = 0; r < devices_.size(); ++r) apart = apart && m.residual_in[r] != m.residual_out[r];
  if (!p2pFusedFits(a.dtype, a.bytes(), m.rows, m.width, aligned8(a, m), m.weight != nullptr, apart))
    return tpsUnavailable;
  return launchAddNorm<false>(a, m);
}

// A pushed call's rows are the LL grid's blocks (each row one block of the by-row kernel, whose counter
// the pushing kernel reads), its words the LL lines.
tpsResult_t P2pLL::pushChannel(int rank, PushChannel* ch) const {
  if (!pushes_ || rank < 0 || rank >= static_cast<int>(handles_.size())) return tpsUnavailable;
  const P2pLLHandle& h = handles_[rank];
  *ch = PushChannel{};
  for (int q = 0; q < h.nranks; ++q) ch->lines[q] = h.recv[q];
  ch->counters = h.counters;
  ch->lines_per_sender = h.lines;
  ch->rank = h.rank, ch->nranks = h.nranks;
  ch->max_rows = kP2pLLBlocks;
  ch->max_width = kRowThreads * kRowWords * 4;
  ch->max_words = kLines;
  return tpsSuccess;
}

tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  auto a = std::make_unique<P2pLL>();
  TPS_CHECK(a->init(ctx));
  *out = std::move(a);
  return tpsSuccess;
}

}  // namespace

const AlgorithmInfo& p2pLLAlgorithm() {
  static const AlgorithmInfo info = [] {
    AlgorithmInfo a;
    a.name = "p2p-ll";
    a.label = "LL one-shot";
    a.backend = tpsBackendP2p;
    a.medium = Medium::kPeerLinks;
    a.align = 8;
    a.granule = 8;
    a.max_bytes = kP2pLLMax;
    // Each GPU sends its whole message to every peer (the lines carry as many flag bytes again: payload
    // is what the statistics count).
    a.traffic = [](size_t bytes, size_t, int n) {
      const size_t t = bytes * static_cast<size_t>(n - 1);
      return Traffic{t, t};
    };
    a.selfcheck_count = 4096;
    a.create = create;
    return a;
  }();
  return info;
}

}  // namespace tpscope::detail
