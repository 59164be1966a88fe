// SPDX-License-Identifier: Apache-2.0
// algorithms/host_copy.cu - host-copy: the host backend's copy-engine path, for calls at or above the
// tuned threshold (HostTuning::copy_threshold), with every rank in this process.
//
// In rounds of up to kRoundBytes per GPU, each GPU copies its data into its host stage in chunks on a D2H
// side stream; each chunk, once every peer's D2H of it is done (cross-device events), is copied H2D into
// the GPU's scratch on a second side stream; an add kernel on a third then sums the round in rank order,
// and the caller's stream joins it. D2H and H2D run on separate copy engines and directions of the link,
// and a round's add overlaps the next round's copies.
//
// Bounded waits. Every wait of one GPU on another is an event of a side stream, never of a caller's stream,
// so each wait ends once every rank's side streams run. A rank's D2H stream is what could be held: its first
// copy must follow the caller's earlier work (the buffer is ready). So in an eager call it starts behind a
// gate kernel rather than an event: the caller's stream writes this call's number into the gate word (device
// memory, a stream memory operation after its earlier work), and the gate kernel, already waiting on the
// D2H stream, sees it and ends, and the copies follow. The gate kernel publishes this rank's arrival to
// host memory; while its own caller has not arrived it watches its peers' arrivals, and once one of them
// has waited spin_timeout_ms for it, it records tpsTimeout and ends anyway: the held rank's copies then run
// (meaningless, with the error reported), every event the other GPUs wait on completes, and each GPU's
// call ends within the timeout plus its own copy time. The adds run on their own stream, not the caller's,
// so a later round's H2D never waits behind a held caller either.
//
// A captured call starts the D2H stream from an event on the caller's stream instead: the gate's number
// would be a constant in the graph, and one graph's branches start together.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>

#include "allreduce/algorithm.h"
#include "allreduce/async_status.h"
#include "allreduce/host_kernels.cuh"
#include "allreduce/host_staging.h"
#include "allreduce/wire_kernels.cuh"
#include "common/checks.h"
#include "common/cuda_raii.h"
#include "common/stream_memops.h"

namespace tpscope::detail {

namespace {

// Staging per GPU: two halves, so round r+1's D2H fills one half while the peers still read round r's
// data from the other (one round's worth of copy time hides the hand-over).
constexpr size_t kStageBytes = 64u << 20;
constexpr size_t kRoundBytes = kStageBytes / 2;
// Chunks shrink with the message so that even a few-MiB call pipelines D2H against H2D (about 8 chunks in
// flight); HostTuning::chunk_bytes is the largest chunk, kMinChunk the smallest.
constexpr size_t kMinChunk = 256u << 10;
constexpr size_t kAlign = 16;
constexpr size_t kMaxChunks = (kRoundBytes + kMinChunk - 1) / kMinChunk;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// One rank's gate: its gate word (device memory, written by its caller's stream) and every rank's arrival
// (mapped host memory, one 64-byte line each, written by each rank's gate kernel).
struct GateHandle {
  const unsigned* gate;      // device: this call's number once the caller's earlier work is done
  unsigned long long* seen;  // mapped host: [nranks] x kFlagStride, the last call each rank's gate passed
  unsigned* status;          // mapped host: [nranks], nonzero after a timeout
  unsigned long long timeout_ns;
  int rank;
  int nranks;
};

// One warp. Lane 0 waits for this rank's caller (the gate word reaching `call`, compared cyclically);
// lanes q < nranks, q != rank, watch peer q's arrival, and a peer that arrived starts the clock. The gate
// opens when the caller arrives (lane 0 then publishes it), when a peer has waited timeout_ns (tpsTimeout
// recorded), or at once when another rank has recorded an error. While it waits it takes one warp of one
// SM; its caller's earlier kernels have the rest.
__global__ void copyGate(GateHandle h, unsigned call) {
  const int lane = threadIdx.x;
  const unsigned long long* peer = h.seen + static_cast<size_t>(lane < h.nranks ? lane : 0) * kFlagStride;
  const bool watch = lane < h.nranks && lane != h.rank;
  unsigned long long t0 = 0;  // when this lane first saw its peer arrive; 0: not yet
  for (unsigned polls = 1;; ++polls) {
    int open = 0;  // 3: the caller arrived (it wins); 2: an error is recorded; 1: a peer waited too long
    if (lane == 0 && static_cast<int>(*reinterpret_cast<const volatile unsigned*>(h.gate) - call) >= 0) open = 3;
    // The peers' lines and the status words are host memory: read once per 16 polls (a PCIe round trip each).
    if (polls % 16 == 0) {
      if (watch && t0 == 0 && static_cast<int>(static_cast<unsigned>(loadAcquire(peer)) - call) >= 0)
        t0 = globalTimerNs();
      if (watch && t0 != 0 && globalTimerNs() - t0 > h.timeout_ns) open = max(open, 1);
      if (lane == 0 && polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks)) open = max(open, 2);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) open = max(open, __shfl_xor_sync(0xffffffffu, open, o));
    if (open == 3) {
      if (lane == 0) storeRelease(h.seen + static_cast<size_t>(h.rank) * kFlagStride, call);
      return;
    }
    if (open != 0) {
      if (lane == 0 && open == 1) reportTimeout(h.status, h.rank);
      return;
    }
    __nanosleep(64);
  }
}

// The copy-engine path on every wire: the exact wire's instance owns the stages, scratch, streams, events
// and words, and each compressed wire's instance runs its calls on them (calls of one communicator never
// overlap), so a wire costs only its encoding buffer.
class HostCopy final : public Algorithm {
 public:
  tpsResult_t init(BackendContext& ctx);
  // The encoding buffers the compressed wires need, made once (at creation, like everything else).
  tpsResult_t enableWires();
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
  template <WireCode W>
  void loadKernels() const;

 private:
  template <typename T, WireCode W>
  tpsResult_t run(const CallArgs& a);
  int n() const { return static_cast<int>(devices_.size()); }

  std::vector<int> devices_;
  size_t chunk_max_ = 0;
  SharedHost stage_;                 // [rank] kStageBytes each
  std::vector<GateHandle> handles_;  // [rank]
  std::vector<DeviceBuffer> gates_, scratch_;
  std::vector<DeviceBuffer> encoded_;  // [rank] a round's payload on a compressed wire, the D2H's source
  std::vector<Stream> d2h_, h2d_, add_;
  std::vector<Event> fork_, d2h_done_;
  std::vector<std::array<Event, 2>> h2d_done_, add_done_;  // [rank][half]
  std::vector<std::vector<Event>> d2h_chunk_;              // [rank][chunk in round]
  uint32_t calls_ = 0;  // eager calls so far: the gate's number (the same on every rank)
};

// Loads a wire's kernels on every GPU now: lazy loading waits for an idle device, which a peer's kernel may
// never allow.
template <WireCode W>
void HostCopy::loadKernels() const {
  cudaFuncAttributes fa;
  auto load = [&](auto dtype_tag) {
    using T = decltype(dtype_tag);
    if constexpr (W == WireCode::kExact) {
      (void)cudaFuncGetAttributes(&fa, addPeers<T, true>);
      (void)cudaFuncGetAttributes(&fa, addPeers<T, false>);
    } else {
      (void)cudaFuncGetAttributes(&fa, wireEncodeKernel<T, W>);
      (void)cudaFuncGetAttributes(&fa, wireAddPeers<T, W>);
    }
  };
  for (int d : devices_) {
    DeviceGuard g(d);
    load(float{});
    load(__half{});
    load(__nv_bfloat16{});
  }
}

tpsResult_t HostCopy::enableWires() {
  if (!encoded_.empty()) return tpsSuccess;
  encoded_.resize(devices_.size());
  for (size_t r = 0; r < devices_.size(); ++r) TPS_CHECK(DeviceBuffer::create(devices_[r], kRoundBytes, &encoded_[r]));
  return tpsSuccess;
}

tpsResult_t HostCopy::init(BackendContext& ctx) {
  devices_ = ctx.devices;
  chunk_max_ = ctx.tuning.chunk_bytes;
  const int nr = n();
  SharedHost seen;
  TPS_CHECK(ctx.staging->allocate(size_t{1} * nr * kFlagStride * sizeof(unsigned long long), &seen));
  TPS_CHECK(ctx.staging->allocate(kStageBytes * nr, &stage_));
  handles_.resize(nr);
  gates_.resize(nr);
  scratch_.resize(nr);
  d2h_.resize(nr);
  h2d_.resize(nr);
  add_.resize(nr);
  fork_.resize(nr);
  d2h_done_.resize(nr);
  h2d_done_.resize(nr);
  add_done_.resize(nr);
  d2h_chunk_.resize(nr);
  for (int r = 0; r < nr; ++r) {
    const int d = devices_[r];
    TPS_CHECK(DeviceBuffer::create(d, sizeof(unsigned), &gates_[r]));
    TPS_CHECK(DeviceBuffer::create(d, kStageBytes * (nr - 1), &scratch_[r]));
    DeviceGuard g(d);
    TPS_CUDA_CHECK(cudaMemset(gates_[r].get(), 0, sizeof(unsigned)));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    GateHandle& h = handles_[r];
    h.gate = gates_[r].as<unsigned>();
    h.seen = reinterpret_cast<unsigned long long*>(seen.device[r]);
    TPS_CHECK(ctx.status->devicePointer(d, &h.status));
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = nr;
    TPS_CHECK(Stream::create(d, &d2h_[r]));
    TPS_CHECK(Stream::create(d, &h2d_[r]));
    TPS_CHECK(Stream::create(d, &add_[r]));
    for (Event* e : {&fork_[r], &d2h_done_[r], &h2d_done_[r][0], &h2d_done_[r][1], &add_done_[r][0], &add_done_[r][1]})
      TPS_CHECK(Event::create(d, e, false));
    d2h_chunk_[r].resize(kMaxChunks);
    for (Event& e : d2h_chunk_[r]) TPS_CHECK(Event::create(d, &e, false));
    // Load the kernels now (lazy loading waits for an idle device, which a peer's kernel may never allow).
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, copyGate));
  }
  loadKernels<WireCode::kExact>();
  TPS_CUDA_CHECK(cudaGetLastError());
  return tpsSuccess;
}

template <typename T, WireCode W>
tpsResult_t HostCopy::run(const CallArgs& a) {
  const int nr = n();
  const size_t total = a.bytes();
  // Rounds of kRoundBytes of the message; what a round moves is its payload on the wire.
  const size_t round_elems = kRoundBytes / sizeof(T);
  auto moved = [&](size_t elems) { return W == WireCode::kExact ? elems * sizeof(T) : wirePayloadBytes(W, elems); };
  size_t total_moved = 0;
  for (size_t off = 0; off < a.count; off += round_elems) total_moved += moved(std::min(round_elems, a.count - off));
  const size_t chunk = std::max(kMinChunk, std::min(chunk_max_, roundUp(total_moved / 8, kMinChunk)));
  const bool aligned = buffersAligned(a, nr, kAlign);
  auto stage = [&](int q, int half) { return stage_.host + q * kStageBytes + half * kRoundBytes; };
  auto peerRegion = [&](int r, int q, int half) {
    return scratch_[r].as<char>() + (size_t(half) * (nr - 1) + (q < r ? q : q - 1)) * kRoundBytes;
  };
  bool captured = false;
  for (int r = 0; r < nr; ++r) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    TPS_CUDA_CHECK(cudaStreamIsCapturing(a.streams[r], &cs));
    captured = captured || cs != cudaStreamCaptureStatusNone;
  }
  const size_t rounds = (total + kRoundBytes - 1) / kRoundBytes;
  auto elemsIn = [&](size_t round) { return std::min(round_elems, a.count - round * round_elems); };
  auto chunksIn = [&](size_t round) { return (moved(elemsIn(round)) + chunk - 1) / chunk; };
  const uint32_t call = calls_ + 1;  // this eager call's gate number

  // Start ("Bounded waits" above): the D2H stream behind the gate (eager) or an event (captured); the
  // H2D and add streams need nothing of the caller (they write the scratch, and the adds follow the D2H).
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    if (captured) {
      TPS_CUDA_CHECK(cudaEventRecord(fork_[r].get(), a.streams[r]));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(d2h_[r].get(), fork_[r].get(), 0));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(h2d_[r].get(), fork_[r].get(), 0));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(add_[r].get(), fork_[r].get(), 0));
    } else {
      copyGate<<<1, 32, 0, d2h_[r].get()>>>(handles_[r], call);
      TPS_CUDA_CHECK_LAUNCH();
      TPS_CHECK(streamWrite(a.streams[r], gates_[r].get(), call));
    }
  }
  for (size_t round = 0; round < rounds; ++round) {
    const size_t off = round * kRoundBytes;
    const int half = static_cast<int>(round % 2);
    const size_t elems = elemsIn(round);
    const size_t round_bytes = moved(elems);
    const size_t nchunks = chunksIn(round);
    // D2H: this GPU's data (or its payload on a compressed wire) into its host stage, chunk by chunk. A half
    // is reused two rounds later, once every peer has read it, and the first two rounds' halves once the
    // peers have read the last call's (events recorded then).
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      const cudaStream_t s = d2h_[r].get();
      for (int q = 0; q < nr; ++q)
        if (q != r) TPS_CUDA_CHECK(cudaStreamWaitEvent(s, h2d_done_[q][half].get(), 0));
      const char* src = static_cast<const char*>(a.bufs[r]) + off;
      if (W != WireCode::kExact) {  // the round's payload, encoded from the message (after its earlier D2H)
        const int blocks = static_cast<int>(std::min<size_t>(1024, (wireBlocks(elems) + 31) / 32));  // 4 blocks a warp
        wireEncodeKernel<T, W><<<blocks, 256, 0, s>>>(reinterpret_cast<const T*>(src), elems, encoded_[r].get());
        TPS_CUDA_CHECK_LAUNCH();
        src = encoded_[r].as<char>();
      }
      for (size_t k = 0; k < nchunks; ++k) {
        const size_t kb = std::min(chunk, round_bytes - k * chunk);
        TPS_CUDA_CHECK(cudaMemcpyAsync(stage(r, half) + k * chunk, src + k * chunk, kb, cudaMemcpyDeviceToHost, s));
        TPS_CUDA_CHECK(cudaEventRecord(d2h_chunk_[r][k].get(), s));
      }
      TPS_CUDA_CHECK(cudaEventRecord(d2h_done_[r].get(), s));
    }
    // H2D: each peer's chunk as soon as that peer's D2H of it is done, into this half of the scratch, once
    // the add of two rounds before (or of the last call) has consumed it.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      const cudaStream_t s = h2d_[r].get();
      TPS_CUDA_CHECK(cudaStreamWaitEvent(s, add_done_[r][half].get(), 0));
      for (size_t k = 0; k < nchunks; ++k) {
        const size_t kb = std::min(chunk, round_bytes - k * chunk);
        for (int q = 0; q < nr; ++q) {
          if (q == r) continue;
          TPS_CUDA_CHECK(cudaStreamWaitEvent(s, d2h_chunk_[q][k].get(), 0));
          TPS_CUDA_CHECK(cudaMemcpyAsync(peerRegion(r, q, half) + k * chunk, stage(q, half) + k * chunk, kb,
                                         cudaMemcpyHostToDevice, s));
        }
      }
      TPS_CUDA_CHECK(cudaEventRecord(h2d_done_[r][half].get(), s));
    }
    // Add on the add stream once this GPU's own D2H of the round (the data is overwritten in place) and its
    // H2D copies are done; the next round's copies go on meanwhile.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      const cudaStream_t s = add_[r].get();
      TPS_CUDA_CHECK(cudaStreamWaitEvent(s, d2h_done_[r].get(), 0));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(s, h2d_done_[r][half].get(), 0));
      T* buf = reinterpret_cast<T*>(static_cast<char*>(a.bufs[r]) + off);
      if constexpr (W == WireCode::kExact) {
        AddArgs args{};
        for (int q = 0; q < nr; ++q) args.tmp[q] = q == r ? nullptr : peerRegion(r, q, half);
        args.rank = r;
        args.nranks = nr;
        const int blocks = static_cast<int>(std::min<size_t>(1024, (elems / Vec<T>::kElems + 255) / 256 + 1));
        if (aligned)
          addPeers<T, true><<<blocks, 256, 0, s>>>(args, buf, elems);
        else
          addPeers<T, false><<<blocks, 256, 0, s>>>(args, buf, elems);
      } else {
        WireAddArgs args{};
        for (int q = 0; q < nr; ++q) args.payload[q] = q == r ? nullptr : peerRegion(r, q, half);
        args.rank = r;
        args.nranks = nr;
        const int blocks = static_cast<int>(std::min<size_t>(1024, (wireBlocks(elems) + 31) / 32));  // 4 blocks a warp
        wireAddPeers<T, W><<<blocks, 256, 0, s>>>(args, buf, elems);
      }
      TPS_CUDA_CHECK_LAUNCH();
      TPS_CUDA_CHECK(cudaEventRecord(add_done_[r][half].get(), s));
    }
  }
  // Join: the caller's stream continues after this GPU's last add, and, since the next call's D2H may
  // start at once, after every peer's last reads of this GPU's host stage (the last one or two rounds).
  const int last_half = static_cast<int>((rounds - 1) % 2);
  for (int r = 0; r < nr; ++r) {
    DeviceGuard dg(devices_[r]);
    TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], add_done_[r][last_half].get(), 0));
    for (int q = 0; q < nr; ++q) {
      if (q == r) continue;
      for (size_t half = 0; half < std::min<size_t>(rounds, 2); ++half)
        TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], h2d_done_[q][half].get(), 0));
    }
  }
  if (!captured) calls_ = call;
  return tpsSuccess;
}

template <WireCode W>
class HostCopyWire final : public Algorithm {
 public:
  explicit HostCopyWire(HostCopy* copy) : copy_(copy) {}
  tpsResult_t launch(const CallArgs& a) override { return copy_->launchOn<W>(a); }

 private:
  HostCopy* copy_;
};

template <WireCode W>
tpsResult_t create(BackendContext& ctx, std::unique_ptr<Algorithm>* out) {
  if constexpr (W == WireCode::kExact) {
    if (!streamMemOpsAvailable()) {
      TPS_LOG_WARN(
          "host backend: the driver has no stream memory operations, which open the copy-engine path's gate "
          "(its bounded start); every size takes the kernel path");
      return tpsUnavailable;
    }
    auto a = std::make_unique<HostCopy>();
    TPS_CHECK(a->init(ctx));
    *out = std::move(a);
  } else {
    auto* copy = dynamic_cast<HostCopy*>(ctx.created("host-copy"));
    if (copy == nullptr) return tpsUnavailable;  // no copy path here: the exact wire's creation said why
    TPS_CHECK(copy->enableWires());
    copy->loadKernels<W>();
    TPS_CUDA_CHECK(cudaGetLastError());
    *out = std::make_unique<HostCopyWire<W>>(copy);
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
  a.shapes = kOneProcess;  // its events and streams are one process's
  if (W == WireCode::kBf16) a.dtypes = dtypeBit(tpsFloat32);
  a.min_bytes = [](const HostTuning& t) { return t.copy_threshold; };
  // Each GPU writes its payload to host memory once and reads every peer's once.
  a.traffic = [](size_t bytes, size_t count, int n) {
    size_t p = bytes;
    if (W != WireCode::kExact) {  // each round's payload
      const size_t round = kRoundBytes / (bytes / count);
      p = 0;
      for (size_t off = 0; off < count; off += round) p += wirePayloadBytes(W, std::min(round, count - off));
    }
    return Traffic{p, p * static_cast<size_t>(n - 1)};
  };
  a.create = create<W>;
  return a;
}

}  // namespace

// The exact wire, and one algorithm per compressed wire (wire_codec.h).
const AlgorithmInfo& hostCopyAlgorithm() {
  static const AlgorithmInfo a = info<WireCode::kExact>("host-copy", "copy engines");
  return a;
}
const AlgorithmInfo& hostCopyBf16Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kBf16>("host-copy+bf16", "copy engines, bf16");
  return a;
}
const AlgorithmInfo& hostCopyInt8Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kInt8>("host-copy+int8", "copy engines, int8");
  return a;
}
const AlgorithmInfo& hostCopyFp8Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kFp8>("host-copy+fp8", "copy engines, fp8");
  return a;
}
const AlgorithmInfo& hostCopyInt4Algorithm() {
  static const AlgorithmInfo a = info<WireCode::kInt4>("host-copy+int4", "copy engines, int4");
  return a;
}

}  // namespace tpscope::detail
