// SPDX-License-Identifier: Apache-2.0
// algorithms/host_copy.cu - host-copy: the host backend's copy-engine path, for calls at or above the
// tuned threshold (HostTuning::copy_threshold), with every rank in this process. Where the driver has no
// stream memory operations (which bound its waits) it is not created, and the kernel path takes every size.
//
// In rounds of up to kRoundBytes per GPU, each GPU copies its data into its host stage in chunks on a D2H
// side stream; each chunk, once every peer's D2H of it is done, is copied H2D into the GPU's scratch on a
// second side stream; an add kernel on the caller's stream then sums the round in rank order. D2H and H2D
// run on separate copy engines and directions of the link, and a round's add overlaps the next round's
// copies.
//
// Bounded waits. A GPU's own D2H copies depend on no peer: they start from the caller's stream through
// an event, as soon as its earlier work is done. Only what crosses GPUs waits on peers, and in an eager
// call those waits are on host words that the copy streams write with stream memory operations, never on
// another GPU's events (a wait on an event cannot be bounded):
//   - `ready` (one per rank) counts the chunks the rank has staged: a GPU's H2D copy of a peer's chunk
//     waits until the peer's word counts it;
//   - `consumed` (one per rank) counts the rounds the rank has read from its peers' stages: a D2H into a
//     stage half waits until every peer has read the round that last used it, and the call's end waits
//     until every peer has read its last round, so the next call may overwrite the stage.
// Beside the first copies, on a gate stream of its own, a rendezvous kernel publishes the call's sequence
// number and waits, bounded, for every peer's; the same stream then relays the D2H copies' events to the
// `ready` word. A rank that gives up (or finds an error recorded) records
// tpsTimeout and opens every rank's words for this call, so each GPU's call ends within the timeout plus
// its own copy time, with the error reported. The words count across calls (32 bits, compared
// cyclically); host counters give each eager call its targets, the same on every rank since all ranks make
// the same calls. Every write is enqueued, in host order, before any wait for it (a round's D2H operations
// and relays of all ranks before its H2D operations), so streams that share a hardware queue never hold a
// write behind a wait for it.
//
// A captured call cannot use host counters (a graph replays the same values): it orders the copies across
// GPUs with events instead, which in one graph are edges between branches that start together.
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

// The host words: [kind][rank] lines of kFlagStride u64 (one 64-byte line each, so writers never share
// one); the 32-bit counters sit in a line's first word, the rendezvous sequence numbers fill theirs.
enum Line { kReady = 0, kConsumed = 1, kSeq = 2, kNumLines = 3 };

struct RendezvousHandle {
  unsigned long long* lines;    // mapped host: [kNumLines][nranks] x kFlagStride
  unsigned long long* counter;  // device: this rank's eager call count
  unsigned* status;             // mapped host: [nranks], nonzero after a timeout
  unsigned long long timeout_ns;
  int rank;
  int nranks;
};

__device__ inline unsigned long long* line(const RendezvousHandle& h, int kind, int q) {
  return h.lines + (static_cast<size_t>(kind) * h.nranks + q) * kFlagStride;
}

__device__ inline void storeRelease32(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One warp: lane q (q != rank) waits for peer q's sequence number. When a peer did not come in time, or
// another rank has recorded an error, every rank's words are opened up to this call's targets (`ready`,
// `consumed`): every copy stream of every GPU then runs through (its copies now meaningless), and no
// event or word another GPU waits on stays unwritten.
__global__ void copyRendezvous(RendezvousHandle h, unsigned ready, unsigned consumed) {
  const int lane = threadIdx.x;
  unsigned long long s = 0;
  if (lane == 0) {
    s = *h.counter + 1;
    *h.counter = s;
    storeRelease(line(h, kSeq, h.rank), s);
  }
  s = __shfl_sync(0xffffffffu, s, 0);
  bool gave_up = false, error = false;
  if (lane < h.nranks && lane != h.rank) {
    const unsigned long long* f = line(h, kSeq, lane);
    const unsigned long long t0 = globalTimerNs();
    for (unsigned polls = 1; loadAcquire(f) < s; ++polls) {
      if (polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks)) {
        error = true;
        break;
      }
      if (globalTimerNs() - t0 > h.timeout_ns) {
        gave_up = true;
        break;
      }
      __nanosleep(64);
    }
  }
  const bool timed_out = __any_sync(0xffffffffu, gave_up);
  if (__any_sync(0xffffffffu, gave_up || error) && lane == 0) {
    if (timed_out) reportTimeout(h.status, h.rank);
    for (int q = 0; q < h.nranks; ++q) {
      storeRelease32(reinterpret_cast<unsigned*>(line(h, kReady, q)), ready);
      storeRelease32(reinterpret_cast<unsigned*>(line(h, kConsumed, q)), consumed);
    }
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
  // Rank q's word of `kind` as rank r's GPU addresses it.
  unsigned long long* word(int r, Line kind, int q) const {
    return handles_[r].lines + (static_cast<size_t>(kind) * n() + q) * kFlagStride;
  }

  std::vector<int> devices_;
  size_t chunk_max_ = 0;
  SharedHost stage_;                       // [rank] kStageBytes each
  std::vector<RendezvousHandle> handles_;  // [rank]
  std::vector<DeviceBuffer> counters_, scratch_;
  std::vector<DeviceBuffer> encoded_;  // [rank] a round's payload on a compressed wire, the D2H's source
  std::vector<Stream> gate_, d2h_, h2d_;
  std::vector<Event> fork_, d2h_done_, gate_done_;
  std::vector<std::array<Event, 2>> h2d_done_, add_done_;  // [rank][half]
  std::vector<std::vector<Event>> d2h_chunk_;              // [rank][chunk in round]: captured calls
  uint32_t chunks_ = 0, rounds_ = 0;  // eager calls' chunks staged and rounds read, so far, by every rank
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
  SharedHost lines;
  TPS_CHECK(ctx.staging->allocate(size_t{kNumLines} * nr * kFlagStride * sizeof(unsigned long long), &lines));
  TPS_CHECK(ctx.staging->allocate(kStageBytes * nr, &stage_));
  handles_.resize(nr);
  counters_.resize(nr);
  scratch_.resize(nr);
  gate_.resize(nr);
  d2h_.resize(nr);
  h2d_.resize(nr);
  fork_.resize(nr);
  d2h_done_.resize(nr);
  gate_done_.resize(nr);
  h2d_done_.resize(nr);
  add_done_.resize(nr);
  d2h_chunk_.resize(nr);
  for (int r = 0; r < nr; ++r) {
    const int d = devices_[r];
    TPS_CHECK(DeviceBuffer::create(d, sizeof(unsigned long long), &counters_[r]));
    TPS_CHECK(DeviceBuffer::create(d, kStageBytes * (nr - 1), &scratch_[r]));
    DeviceGuard g(d);
    TPS_CUDA_CHECK(cudaMemset(counters_[r].get(), 0, sizeof(unsigned long long)));
    TPS_CUDA_CHECK(cudaDeviceSynchronize());
    RendezvousHandle& h = handles_[r];
    h.lines = reinterpret_cast<unsigned long long*>(lines.device[r]);
    h.counter = counters_[r].as<unsigned long long>();
    TPS_CHECK(ctx.status->devicePointer(d, &h.status));
    h.timeout_ns = static_cast<unsigned long long>(ctx.tuning.spin_timeout_ms) * 1000000ull;
    h.rank = r;
    h.nranks = nr;
    TPS_CHECK(Stream::create(d, &gate_[r]));
    TPS_CHECK(Stream::create(d, &d2h_[r]));
    TPS_CHECK(Stream::create(d, &h2d_[r]));
    for (Event* e : {&fork_[r], &d2h_done_[r], &gate_done_[r], &h2d_done_[r][0], &h2d_done_[r][1], &add_done_[r][0],
                     &add_done_[r][1]})
      TPS_CHECK(Event::create(d, e, false));
    d2h_chunk_[r].resize(kMaxChunks);
    for (Event& e : d2h_chunk_[r]) TPS_CHECK(Event::create(d, &e, false));
    // Load the kernels now (lazy loading waits for an idle device, which a peer's kernel may never allow).
    cudaFuncAttributes fa;
    TPS_CUDA_CHECK(cudaFuncGetAttributes(&fa, copyRendezvous));
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
  const bool eager = !captured;
  const size_t rounds = (total + kRoundBytes - 1) / kRoundBytes;
  auto elemsIn = [&](size_t round) { return std::min(round_elems, a.count - round * round_elems); };
  auto chunksIn = [&](size_t round) { return (moved(elemsIn(round)) + chunk - 1) / chunk; };
  size_t all_chunks = 0;
  for (size_t j = 0; j < rounds; ++j) all_chunks += chunksIn(j);
  // This eager call's word values: chunks c0 + 1 .. c0 + all_chunks, rounds g0 + 1 .. g0 + rounds.
  const uint32_t c0 = chunks_, g0 = rounds_;
  const uint32_t c_end = c0 + static_cast<uint32_t>(all_chunks), g_end = g0 + static_cast<uint32_t>(rounds);

  // Start: the side streams after the caller's earlier work; in an eager call, the rendezvous beside them.
  for (int r = 0; r < nr; ++r) {
    DeviceGuard g(devices_[r]);
    TPS_CUDA_CHECK(cudaEventRecord(fork_[r].get(), a.streams[r]));
    TPS_CUDA_CHECK(cudaStreamWaitEvent(d2h_[r].get(), fork_[r].get(), 0));
    TPS_CUDA_CHECK(cudaStreamWaitEvent(h2d_[r].get(), fork_[r].get(), 0));
    if (eager) {
      TPS_CUDA_CHECK(cudaStreamWaitEvent(gate_[r].get(), fork_[r].get(), 0));
      copyRendezvous<<<1, 32, 0, gate_[r].get()>>>(handles_[r], c_end, g_end);
      TPS_CUDA_CHECK_LAUNCH();
    }
  }
  uint32_t c = c0;  // chunks staged before this round
  for (size_t round = 0; round < rounds; ++round) {
    const size_t off = round * kRoundBytes;
    const int half = static_cast<int>(round % 2);
    const size_t elems = elemsIn(round);
    const size_t round_bytes = moved(elems);
    const size_t nchunks = chunksIn(round);
    const uint32_t g = g0 + static_cast<uint32_t>(round);  // rounds read before this one
    // D2H: this GPU's data into its host stage, chunk by chunk. A half is reused two rounds later, once
    // every peer has read it.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      const cudaStream_t s = d2h_[r].get();
      if (round >= 2)
        for (int q = 0; q < nr; ++q) {
          if (q == r) continue;
          if (eager)
            TPS_CHECK(streamWaitAtLeast(s, word(r, kConsumed, q), g - 1));
          else
            TPS_CUDA_CHECK(cudaStreamWaitEvent(s, h2d_done_[q][half].get(), 0));
        }
      const char* src = static_cast<const char*>(a.bufs[r]) + off;
      if (W != WireCode::kExact) {  // the round's payload, encoded from the message (after its earlier D2H)
        const int blocks = static_cast<int>(std::min<size_t>(1024, (wireBlocks(elems) + 7) / 8));
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
    // Eager: the gate stream relays each staged chunk to the peers as this rank's `ready` word. The write's
    // fence runs there, off the copy stream, whose copies then follow each other as closely as events
    // let them (a write on the copy stream itself drains it at every chunk).
    for (int r = 0; r < nr && eager; ++r) {
      DeviceGuard dg(devices_[r]);
      for (size_t k = 0; k < nchunks; ++k) {
        TPS_CUDA_CHECK(cudaStreamWaitEvent(gate_[r].get(), d2h_chunk_[r][k].get(), 0));
        TPS_CHECK(streamWrite(gate_[r].get(), word(r, kReady, r), c + static_cast<uint32_t>(k) + 1));
      }
    }
    // H2D: each peer's chunk as soon as that peer has staged it, into this half of the scratch, which the
    // add of two rounds before has consumed.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      const cudaStream_t s = h2d_[r].get();
      if (round >= 2) TPS_CUDA_CHECK(cudaStreamWaitEvent(s, add_done_[r][half].get(), 0));
      for (size_t k = 0; k < nchunks; ++k) {
        const size_t kb = std::min(chunk, round_bytes - k * chunk);
        for (int q = 0; q < nr; ++q) {
          if (q == r) continue;
          if (eager)
            TPS_CHECK(streamWaitAtLeast(s, word(r, kReady, q), c + static_cast<uint32_t>(k) + 1));
          else
            TPS_CUDA_CHECK(cudaStreamWaitEvent(s, d2h_chunk_[q][k].get(), 0));
          TPS_CUDA_CHECK(cudaMemcpyAsync(peerRegion(r, q, half) + k * chunk, stage(q, half) + k * chunk, kb,
                                         cudaMemcpyHostToDevice, s));
        }
      }
      if (eager) TPS_CHECK(streamWrite(s, word(r, kConsumed, r), g + 1));
      TPS_CUDA_CHECK(cudaEventRecord(h2d_done_[r][half].get(), s));
    }
    // Add on the caller's stream once this GPU's own D2H of the round (the data is overwritten in place)
    // and its H2D copies are done; the next round's copies go on meanwhile.
    for (int r = 0; r < nr; ++r) {
      DeviceGuard dg(devices_[r]);
      TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], d2h_done_[r].get(), 0));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], h2d_done_[r][half].get(), 0));
      T* buf = reinterpret_cast<T*>(static_cast<char*>(a.bufs[r]) + off);
      if constexpr (W == WireCode::kExact) {
        AddArgs args{};
        for (int q = 0; q < nr; ++q) args.tmp[q] = q == r ? nullptr : peerRegion(r, q, half);
        args.rank = r;
        args.nranks = nr;
        const int blocks = static_cast<int>(std::min<size_t>(1024, (elems / Vec<T>::kElems + 255) / 256 + 1));
        if (aligned)
          addPeers<T, true><<<blocks, 256, 0, a.streams[r]>>>(args, buf, elems);
        else
          addPeers<T, false><<<blocks, 256, 0, a.streams[r]>>>(args, buf, elems);
      } else {
        WireAddArgs args{};
        for (int q = 0; q < nr; ++q) args.payload[q] = q == r ? nullptr : peerRegion(r, q, half);
        args.rank = r;
        args.nranks = nr;
        const int blocks = static_cast<int>(std::min<size_t>(1024, (wireBlocks(elems) + 7) / 8));
        wireAddPeers<T, W><<<blocks, 256, 0, a.streams[r]>>>(args, buf, elems);
      }
      TPS_CUDA_CHECK_LAUNCH();
      TPS_CUDA_CHECK(cudaEventRecord(add_done_[r][half].get(), a.streams[r]));
    }
    c += static_cast<uint32_t>(nchunks);
  }
  // Join: the next call's D2H starts from the caller's stream, so the caller's stream goes on only once
  // every peer has read this GPU's stage (eager: the peers' `consumed` words, waited on the gate stream
  // after the rendezvous; captured: the peers' last H2D events).
  for (int r = 0; r < nr; ++r) {
    DeviceGuard dg(devices_[r]);
    if (eager) {
      for (int q = 0; q < nr; ++q)
        if (q != r) TPS_CHECK(streamWaitAtLeast(gate_[r].get(), word(r, kConsumed, q), g_end));
      TPS_CUDA_CHECK(cudaEventRecord(gate_done_[r].get(), gate_[r].get()));
      TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], gate_done_[r].get(), 0));
    } else {
      for (int q = 0; q < nr; ++q) {
        if (q == r) continue;
        for (size_t half = 0; half < std::min<size_t>(rounds, 2); ++half)
          TPS_CUDA_CHECK(cudaStreamWaitEvent(a.streams[r], h2d_done_[q][half].get(), 0));
      }
    }
  }
  if (eager) chunks_ = c_end, rounds_ = g_end;
  return tpsSuccess;
}

// A compressed wire's calls, on the exact wire's instance.
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
          "host backend: the driver has no stream memory operations, which bound the copy-engine path's waits; "
          "every size takes the kernel path");
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
