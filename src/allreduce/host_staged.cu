// SPDX-License-Identifier: Apache-2.0
// host_staged.cu - backend `host`: AllReduce through pinned host memory, for boxes with no usable
// GPU-to-GPU path (and as the baseline the study measured).
//
// Two paths, chosen per call by size (HostTuning::copy_threshold, measured on the box):
// - kernel path (below the threshold): one kernel per GPU writes, publishes, waits and reduces
//   (host_kernels.cuh explains the protocol). Latency-bound decode traffic lives here.
// - copy-engine path (at or above it): in rounds of up to kRoundBytes per GPU, each GPU copies its
//   data to its host stage in chunks on a D2H side stream; each chunk, once every peer's D2H of it is
//   done (cross-device events), is copied H2D into the GPU's scratch on a second side stream; an add
//   kernel after them on the H2D stream then sums in rank order, and the caller's stream joins it. D2H and
//   H2D run on separate copy engines and directions of the link.
// No GPU waits on an event that depends on another GPU's caller stream: in an eager call the side
// streams start from their caller's through a gate word and a rendezvous kernel (copyRendezvous below),
// so a peer that never arrives costs the spin timeout and a tpsTimeout, never an unbounded wait. A
// captured call forks them with events instead (one graph's branches start together). Where the driver
// has no stream memory operations, every size takes the kernel path.
#include "allreduce/host_staged.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "allreduce/async_status.h"
#include "allreduce/host_kernels.cuh"
#include "common/checks.h"
#include "common/cuda_raii.h"
#include "common/stream_memops.h"

namespace tpscope::detail {

namespace {

// Copy-engine staging per GPU: two halves, so round r+1's D2H fills one half while the peers still
// read round r's data from the other (one round's worth of copy time hides the hand-over).
constexpr size_t kStageBytes = 64u << 20;
constexpr size_t kRoundBytes = kStageBytes / 2;
constexpr size_t kKernelStageMax = 4u << 20;  // kernel-path staging per (slot, rank)
// Copy-engine chunks shrink with the message so that even a few-MiB call pipelines D2H against H2D
// (about 8 chunks in flight); HostTuning::chunk_bytes is the largest chunk, kMinChunk the smallest.
constexpr size_t kMinChunk = 256u << 10;
constexpr size_t kAlign = 16;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// The copy-engine path's start. The path orders copies across GPUs with CUDA events, and a wait on
// another GPU's event cannot be bounded: a peer whose stream never reaches the call would hold this
// GPU's H2D copies for as long as it is held. So in an eager call no side stream depends on its caller's
// stream through an event. Each caller stream r sets its gate word to 1 (a stream write, after its
// earlier work: the buffer is ready); rank r's gate stream waits for that word on the GPU's front end
// (cuStreamWaitValue32), clears it, and records the event the D2H and H2D streams start from. The gate
// stream then runs the rendezvous kernel below, which bounds the wait for the peers: it publishes this
// call's sequence number and waits for every peer's, as the kernel path does, for at most timeout_ns
// from its start. A rank that gives up records tpsTimeout and sets every rank's gate word, so a
// held-back rank's side streams run through their (now meaningless) copies and every event another
// GPU waits on completes: each GPU's call ends within the timeout plus its own copy time, with the
// error reported. The waits and polls of host memory stay on the gate stream, where no copy queues
// behind them (on a copy stream they would hold the copies back). The
// calls of all ranks enqueue every gate write before any gate wait, and every rendezvous before any
// copy, so streams that share a hardware queue never stall a signal behind its wait. A captured call
// starts the side streams from an event on the caller's stream instead: a graph takes side streams only
// through events, and one graph's branches start together.
struct CopyGateHandle {
  unsigned long long* gates;    // mapped host: [2][nranks] x kFlagStride: [0] gate words, [1] sequence numbers
  unsigned long long* counter;  // device: this rank's call count
  unsigned* status;             // mapped host: [nranks], nonzero after a timeout
  unsigned long long timeout_ns;
  int rank;
  int nranks;
};

__device__ inline unsigned long long* copyGateWord(const CopyGateHandle& h, int q) { return h.gates + q * kFlagStride; }
__device__ inline unsigned long long* copyGateSeq(const CopyGateHandle& h, int q) {
  return h.gates + (h.nranks + q) * kFlagStride;
}

// One warp: lane q (q != rank) waits for peer q's sequence number.
__global__ void copyRendezvous(CopyGateHandle h) {
  const int lane = threadIdx.x;
  unsigned long long s = 0;
  if (lane == 0) {
    s = *h.counter + 1;
    *h.counter = s;
    storeRelease(copyGateSeq(h, h.rank), s);
  }
  s = __shfl_sync(0xffffffffu, s, 0);
  bool gave_up = false;
  if (lane < h.nranks && lane != h.rank) {
    const unsigned long long* f = copyGateSeq(h, lane);
    const unsigned long long t0 = globalTimerNs();
    for (unsigned polls = 1; loadAcquire(f) < s; ++polls) {
      if (polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks)) break;  // another rank gave up
      if (globalTimerNs() - t0 > h.timeout_ns) {
        gave_up = true;
        break;
      }
      __nanosleep(64);
    }
  }
  if (__any_sync(0xffffffffu, gave_up) && lane == 0) {
    reportTimeout(h.status, h.rank);
    // Open every rank's gate (the low word of its line, which cuStreamWaitValue32 reads).
    for (int q = 0; q < h.nranks; ++q) storeRelease(copyGateWord(h, q), 1);
  }
}

class HostStagedBackend final : public Backend {
 public:
  tpsResult_t init(const std::vector<int>& devices, const HostTuning& tuning);
  tpsBackend_t kind() const override { return tpsBackendHost; }
  tpsPath_t pathFor(const CallArgs& a) const override {
    return copy_path_ && a.bytes() >= tuning_.copy_threshold ? tpsPathHostCopyEngine : tpsPathHostKernel;
  }
  Traffic trafficFor(tpsPath_t, size_t bytes) const override {
    // Each GPU writes its data to host memory once and reads every peer's data once.
    return Traffic{bytes, bytes * (devices_.size() - 1)};
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

 private:
  template <typename T>
  tpsResult_t run(const CallArgs& a);
  template <typename T>
  tpsResult_t kernelPath(const CallArgs& a);
  template <typename T>
  tpsResult_t copyPath(const CallArgs& a);

  int n() const { return static_cast<int>(devices_.size()); }
  tpsResult_t initCopyPath();

  std::vector<int> devices_;
  HostTuning tuning_{};
  // Kernel path.
  size_t kstage_stride_ = 0;
  PinnedBuffer kstage_, flags_;
  AsyncStatus status_;
  std::vector<DeviceBuffer> counters_;
  std::vector<HostKernelHandle> handles_;
  // Copy-engine path.
  bool copy_path_ = false;  // stream memory operations are available: the path's waits can be bounded
  PinnedBuffer gates_;      // CopyGateHandle::gates
  std::vector<DeviceBuffer> gate_counters_;
  std::vector<CopyGateHandle> gate_handles_;
  std::vector<void*> gate_words_;  // [rank] the gate word as rank's GPU addresses it
  std::vector<PinnedBuffer> cstage_;
  std::vector<DeviceBuffer> scratch_;     // per GPU: 2 halves x (n-1) peer regions of kRoundBytes
  std::vector<Stream> gate_, d2h_, h2d_;  // [rank] side streams: the gate and rendezvous, the copies
  std::vector<Event> gate_passed_;        // [rank] the side streams' start: after the gate (or the fork)
  std::vector<std::array<Event, 2>> h2d_done_, add_done_;  // [rank][half]
  std::vector<std::vector<Event>> d2h_chunk_;              // [rank][chunk in round]
};

tpsResult_t HostStagedBackend::init(const std::vector<int>& devices, const HostTuning& tuning) {
  devices_ = devices;
  tuning_ = tuning;
  const int nr = n();
  for (int d : devices_) {
    cudaDeviceProp p{};
    TPS_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    TPS_EXPECT(p.canMapHostMemory, tpsUnavailable, "GPU {} cannot map pinned host memory: host backend unavailable", d);
    TPS_EXPECT(p.major >= 7, tpsUnavailable, "GPU {} is sm_{}{}: the host backend needs 7.0+ (__nanosleep)", d, p.major,
               p.minor);
  }
  // Kernel path: staging sized to the threshold (bigger kernel-path messages loop in pieces).
  kstage_stride_ = roundUp(std::min(std::max(tuning_.copy_threshold, size_t{64} << 10), kKernelStageMax), kAlign);
  TPS_CHECK(PinnedBuffer::create(2 * nr * kstage_stride_, &kstage_));
  const size_t flag_bytes = size_t{2} * nr * tuning_.blocks * kFlagStride * sizeof(unsigned long long);
  TPS_CHECK(PinnedBuffer::create(flag_bytes, &flags_));
  std::memset(flags_.host(), 0, flag_bytes);
  TPS_CHECK(status_.create());
  counters_.resize(nr);
  handles_.resize(nr);
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CHECK(DeviceBuffer::create(devices_[r], tuning_.blocks * sizeof(unsigned long long), &counters_[r]));
    TPS_CUDA_CHECK(cudaMemset(counters_[r].get(), 0, counters_[r].bytes()));
    HostKernelHandle& h = handles_[r];
    void* p = nullptr;
    TPS_CHECK(kstage_.devicePointer(devices_[r], &p));
    h.stage = static_cast<char*>(p);
    h.stage_stride = kstage_stride_;
    TPS_CHECK(flags_.devicePointer(devices_[r], &p));
    h.flags = static_cast<unsigned long long*>(p);
    TPS_CHECK(status_.devicePointer(devices_[r], &h.status));
    h.counters = counters_[r].as<unsigned long long>();
    h.timeout_ns = static_cast<unsigned long long>(tuning_.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = nr;
  }
  // Load every kernel on every GPU now. With CUDA's lazy module loading the first launch would load
  // it, and loading waits for the device to go idle: a first call whose peer GPU is busy with a
  // kernel that waits on the host (or on this call) would deadlock inside the launch.
  for (int d : devices_) {
    DeviceGuard g(d);
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<float, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<float, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__half, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__half, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__nv_bfloat16, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, hostKernelAllReduce<__nv_bfloat16, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<float, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<float, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<__half, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<__half, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<__nv_bfloat16, true>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, addPeers<__nv_bfloat16, false>));
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, copyRendezvous));
  }
  copy_path_ = streamMemOpsAvailable();
  if (copy_path_) {
    TPS_CHECK(initCopyPath());
  } else {
    TPS_LOG_WARN(
        "host backend: the driver has no stream memory operations, which bound the copy-engine path's waits; "
        "every size takes the kernel path");
  }
  TPS_LOG_INFO("host backend: {} GPUs, copy threshold {} B, chunk {} B, {} blocks, timeout {} ms ({})", nr,
               tuning_.copy_threshold, tuning_.chunk_bytes, tuning_.blocks, tuning_.spin_timeout_ms, tuning_.source);
  return tpsSuccess;
}

tpsResult_t HostStagedBackend::initCopyPath() {
  const int nr = n();
  const size_t gate_bytes = size_t{2} * nr * kFlagStride * sizeof(unsigned long long);
  TPS_CHECK(PinnedBuffer::create(gate_bytes, &gates_));
  std::memset(gates_.host(), 0, gate_bytes);
  gate_counters_.resize(nr);
  gate_handles_.resize(nr);
  gate_words_.resize(nr);
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CHECK(DeviceBuffer::create(devices_[r], sizeof(unsigned long long), &gate_counters_[r]));
    TPS_CUDA_CHECK(cudaMemset(gate_counters_[r].get(), 0, sizeof(unsigned long long)));
    CopyGateHandle& h = gate_handles_[r];
    void* p = nullptr;
    TPS_CHECK(gates_.devicePointer(devices_[r], &p));
    h.gates = static_cast<unsigned long long*>(p);
    gate_words_[r] = h.gates + r * kFlagStride;
    h.counter = gate_counters_[r].as<unsigned long long>();
    TPS_CHECK(status_.devicePointer(devices_[r], &h.status));
    h.timeout_ns = static_cast<unsigned long long>(tuning_.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = nr;
  }
  const size_t chunks = (kRoundBytes + kMinChunk - 1) / kMinChunk;
  cstage_.resize(nr);
  scratch_.resize(nr);
  d2h_.resize(nr);
  h2d_.resize(nr);
  gate_.resize(nr);
  gate_passed_.resize(nr);
  h2d_done_.resize(nr);
  add_done_.resize(nr);
  d2h_chunk_.resize(nr);
  for (int r = 0; r < nr; ++r) {
    const int d = devices_[r];
    TPS_CHECK(PinnedBuffer::create(kStageBytes, &cstage_[r]));
    TPS_CHECK(DeviceBuffer::create(d, kStageBytes * (nr - 1), &scratch_[r]));
    TPS_CHECK(Stream::create(d, &d2h_[r]));
    TPS_CHECK(Stream::create(d, &h2d_[r]));
    TPS_CHECK(Stream::create(d, &gate_[r]));
    TPS_CHECK(Event::create(d, &gate_passed_[r], false));
    for (int half = 0; half < 2; ++half) {
      TPS_CHECK(Event::create(d, &h2d_done_[r][half], false));
      TPS_CHECK(Event::create(d, &add_done_[r][half], false));
    }
    d2h_chunk_[r].resize(chunks);
    for (Event& e : d2h_chunk_[r]) TPS_CHECK(Event::create(d, &e, false));
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t HostStagedBackend::run(const CallArgs& a) {
  return pathFor(a) == tpsPathHostCopyEngine ? copyPath<T>(a) : kernelPath<T>(a);
}

template <typename T>
tpsResult_t HostStagedBackend::kernelPath(const CallArgs& a) {
  // Vector ranges only when every buffer is 16-byte aligned: all ranks must split the work alike.
  bool aligned = true;
  for (int r = 0; r < n(); ++r) aligned = aligned && reinterpret_cast<uintptr_t>(a.bufs[r]) % kAlign == 0;
  const size_t piece = kstage_stride_ / sizeof(T);
  for (size_t off = 0; off < a.count; off += piece) {
    const size_t cnt = std::min(piece, a.count - off);
    for (int r = 0; r < n(); ++r) {
      DeviceGuard g(devices_[r]);
      T* buf = static_cast<T*>(a.bufs[r]) + off;
      if (aligned)
        hostKernelAllReduce<T, true><<<tuning_.blocks, kKernelThreads, 0, a.streams[r]>>>(handles_[r], buf, cnt);
      else
        hostKernelAllReduce<T, false><<<tuning_.blocks, kKernelThreads, 0, a.streams[r]>>>(handles_[r], buf, cnt);
      TPS_CUDA_CHECK_LAUNCH();
    }
  }
  return tpsSuccess;
}

template <typename T>
tpsResult_t HostStagedBackend::copyPath(const CallArgs& a) {
  const int nr = n();
  const size_t total = a.bytes();
  const size_t chunk = std::max(kMinChunk, std::min(tuning_.chunk_bytes, roundUp(total / 8, kMinChunk)));
  bool aligned = true;
  for (int r = 0; r < nr; ++r) aligned = aligned && reinterpret_cast<uintptr_t>(a.bufs[r]) % kAlign == 0;
  auto stage = [&](int q, int half) { return static_cast<char*>(cstage_[q].host()) + half * kRoundBytes; };
  auto peerRegion = [&](int r, int q, int half) {
    return scratch_[r].as<char>() + (size_t(half) * (nr - 1) + (q < r ? q : q - 1)) * kRoundBytes;
  };

  // Start the side streams from the caller's (above, "The copy-engine path's start").
  bool captured = false;
  for (int r = 0; r < nr; ++r) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    TPS_CUDA_CHECK(cudaStreamIsCapturing(a.streams[r], &cs));
    captured = captured || cs != cudaStreamCaptureStatusNone;
  }
  for (int r = 0; r < nr && !captured; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CHECK(streamWrite(a.streams[r], gate_words_[r], 1));
  }
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    if (captured) {
      TPS_CUDA_CHECK(cudaEventRecord(gate_passed_[r].get(), a.streams[r]));
    } else {
      TPS_CHECK(streamWaitEquals(gate_[r].get(), gate_words_[r], 1));
      TPS_CHECK(streamWrite(gate_[r].get(), gate_words_[r], 0));
      TPS_CUDA_CHECK(cudaEventRecord(gate_passed_[r].get(), gate_[r].get()));
    }
  }
  for (int r = 0; r < nr && !captured; ++r) {
    DeviceGuard g(devices_[r]);
    copyRendezvous<<<1, 32, 0, gate_[r].get()>>>(gate_handles_[r]);
    TPS_CUDA_CHECK_LAUNCH();
  }
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CUDA_CHECK(cudaStreamWaitEvent(d2h_[r].get(), gate_passed_[r].get(), 0));
    TPS_CUDA_CHECK(cudaStreamWaitEvent(h2d_[r].get(), gate_passed_[r].get(), 0));
  }
  const size_t rounds = (total + kRoundBytes - 1) / kRoundBytes;
  for (size_t round = 0; round < rounds; ++round) {
    const size_t off = round * kRoundBytes;
    const int half = static_cast<int>(round % 2);
    const size_t round_bytes = std::min(kRoundBytes, total - off);
    const size_t nchunks = (round_bytes + chunk - 1) / chunk;
    // D2H: this GPU's data into its host stage, chunk by chunk. A half is reused two rounds later,
    // once every peer has finished reading it (events recorded earlier in this call).
    for (int r = 0; r < nr; ++r) {
      DeviceGuard g(devices_[r]);
      if (round >= 2)
        for (int q = 0; q < nr; ++q)
          if (q != r) TPS_CUDA_CHECK(cudaStreamWaitEvent(d2h_[r].get(), h2d_done_[q][half].get(), 0));
      const char* src = static_cast<const char*>(a.bufs[r]) + off;
      for (size_t k = 0; k < nchunks; ++k) {
        const size_t kb = std::min(chunk, round_bytes - k * chunk);
        TPS_CUDA_CHECK(
            cudaMemcpyAsync(stage(r, half) + k * chunk, src + k * chunk, kb, cudaMemcpyDeviceToHost, d2h_[r].get()));
        TPS_CUDA_CHECK(cudaEventRecord(d2h_chunk_[r][k].get(), d2h_[r].get()));
      }
    }
    // H2D: each peer's chunk as soon as that peer's D2H of it is done, into this half of the scratch,
    // which the add kernel of two rounds before (earlier on this stream) has consumed.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard g(devices_[r]);
      for (size_t k = 0; k < nchunks; ++k) {
        const size_t kb = std::min(chunk, round_bytes - k * chunk);
        for (int q = 0; q < nr; ++q) {
          if (q == r) continue;
          TPS_CUDA_CHECK(cudaStreamWaitEvent(h2d_[r].get(), d2h_chunk_[q][k].get(), 0));
          TPS_CUDA_CHECK(cudaMemcpyAsync(peerRegion(r, q, half) + k * chunk, stage(q, half) + k * chunk, kb,
                                         cudaMemcpyHostToDevice, h2d_[r].get()));
        }
      }
      TPS_CUDA_CHECK(cudaEventRecord(h2d_done_[r][half].get(), h2d_[r].get()));
    }
    // Add on the H2D stream, after the round's H2D copies, once this GPU's own D2H of the round is done
    // (the data is overwritten in place). Not on the caller's stream: the H2D of two rounds later must
    // follow it, and the peers wait for that H2D, so nothing another GPU waits on may depend on a
    // caller's stream.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard g(devices_[r]);
      TPS_CUDA_CHECK(cudaStreamWaitEvent(h2d_[r].get(), d2h_chunk_[r][nchunks - 1].get(), 0));
      AddArgs args{};
      for (int q = 0; q < nr; ++q) args.tmp[q] = q == r ? nullptr : peerRegion(r, q, half);
      args.rank = r;
      args.nranks = nr;
      const size_t cnt = round_bytes / sizeof(T);
      const int blocks = static_cast<int>(std::min<size_t>(1024, (cnt / Vec<T>::kElems + 255) / 256 + 1));
      T* buf = reinterpret_cast<T*>(static_cast<char*>(a.bufs[r]) + off);
      if (aligned)
        addPeers<T, true><<<blocks, 256, 0, h2d_[r].get()>>>(args, buf, cnt);
      else
        addPeers<T, false><<<blocks, 256, 0, h2d_[r].get()>>>(args, buf, cnt);
      TPS_CUDA_CHECK_LAUNCH();
      TPS_CUDA_CHECK(cudaEventRecord(add_done_[r][half].get(), h2d_[r].get()));
    }
  }
  // Join: the caller's stream continues after this GPU's last add (which followed every earlier one on
  // the add stream), and, since the next call's D2H starts from the caller's stream, after every peer's
  // last reads of this GPU's host stage (the last one or two rounds, whose events this call recorded).
  const int last_half = static_cast<int>((rounds - 1) % 2);
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], add_done_[r][last_half].get(), 0));
    for (int q = 0; q < nr; ++q) {
      if (q == r) continue;
      for (size_t half = 0; half < std::min<size_t>(rounds, 2); ++half)
        TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], h2d_done_[q][half].get(), 0));
    }
  }
  return tpsSuccess;
}

}  // namespace

tpsResult_t createHostStagedBackend(const std::vector<int>& devices, const HostTuning& tuning,
                                    std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<HostStagedBackend>();
  TPS_CHECK(b->init(devices, tuning));
  *out = std::move(b);
  return tpsSuccess;
}

}  // namespace tpscope::detail
