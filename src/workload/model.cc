// SPDX-License-Identifier: Apache-2.0
// model.cc - sequencing the shards for the three split modes; graph capture of a forward pass.
#include "workload/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/checks.h"
#include "common/cuda_raii.h"
#include "workload/attention_cudnn.h"
#include "workload/shard.h"

namespace tpscope::workload {

namespace {

// The layer ranges, heads and FFN columns of GPU position `rank`.
ShardDims dimsFor(const ModelConfig& c, SplitMode mode, int ngpu, int rank) {
  ShardDims d;
  d.first_layer = 0, d.last_layer = c.layers;
  d.q_heads = c.q_heads, d.kv_heads = c.kv_heads, d.ffn = c.ffn;
  if (mode == SplitMode::kLayer) {
    const LayerRange r = layerRange(c.layers, ngpu, rank);
    d.first_layer = r.first, d.last_layer = r.last;
  } else if (mode == SplitMode::kTensor) {
    d.q_heads /= ngpu, d.kv_heads /= ngpu, d.ffn /= ngpu;
    d.q_head_off = rank * d.q_heads, d.kv_head_off = rank * d.kv_heads, d.ffn_off = rank * d.ffn;
  }
  return d;
}

// The per-GPU arguments of a reduction fused with the residual add and the norm after layer `layer`'s
// `after` (tpsAllReduceAddRmsNorm, allReducePushedAddRmsNorm).
struct NormCall {
  void* partial[TPS_MAX_DEVICES];
  void* x[TPS_MAX_DEVICES];  // the residual (read, or updated in place)
  const void* weight[TPS_MAX_DEVICES];
  void* normed[TPS_MAX_DEVICES];
  tpsStream_t streams[TPS_MAX_DEVICES];
  bool with_norm = true;
  NormCall(const std::vector<std::unique_ptr<Shard>>& shards, int layer, Shard::After after) {
    for (size_t i = 0; i < shards.size(); ++i) {
      const Shard& s = *shards[i];
      partial[i] = s.partial(), x[i] = s.x();
      weight[i] = s.nextNorm(layer, after), normed[i] = s.xn(), streams[i] = s.stream();
      with_norm = with_norm && weight[i] != nullptr;
    }
  }
  const void* const* weights() const { return with_norm ? weight : nullptr; }  // null: the add alone
};

}  // namespace

Model::~Model() {
  (void)synchronize();
  (void)tpsCommDestroy(comm_);
  for (auto* list : {&ready_, &consumed_, &join_})
    for (cudaEvent_t e : *list) (void)cudaEventDestroy(e);
}

tpsResult_t Model::create(const ModelOptions& o, std::unique_ptr<Model>* out, std::string* reason) {
  const int n = static_cast<int>(o.devices.size());
  if (std::string bad = validateConfig(o.config, o.split, n); !bad.empty()) {
    *reason = bad;
    return tpsInvalidArgument;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    *reason = "no CUDA GPU is visible (no driver or no device)";
    return tpsUnavailable;
  }
  for (int d : o.devices)
    if (d < 0 || d >= count) {
      *reason = fmt::format("GPU {} does not exist: this machine has {} GPU{}", d, count, count == 1 ? "" : "s");
      return tpsInvalidArgument;
    }
  for (int i = 0; i < n && !o.shared_devices; ++i)
    for (int j = 0; j < i; ++j)
      if (o.devices[i] == o.devices[j]) {
        *reason = fmt::format("GPU {} is given twice: each GPU position of split {} needs its own GPU", o.devices[i],
                              splitModeName(o.split));
        return tpsInvalidArgument;
      }
  std::vector<uint64_t> free_bytes;
  for (int d : o.devices) {
    DeviceGuard on(d);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      *reason = fmt::format("cannot read the free memory of GPU {}", d);
      return tpsCudaError;
    }
    free_bytes.push_back(free);
  }
  // Positions that share a GPU need their sum on it.
  const std::vector<GpuMemory> need = estimateMemory(o.config, o.split, n, o.shape);
  std::vector<GpuMemory> need_on_gpu(need.size());
  for (size_t i = 0; i < need.size(); ++i)
    for (size_t j = 0; j < need.size(); ++j)
      if (o.devices[i] == o.devices[j]) need_on_gpu[i] += need[j];
  if (std::string no = checkFit(o.config, o.split, need_on_gpu, free_bytes, o.devices); !no.empty()) {
    *reason = no;
    return tpsUnavailable;
  }
  std::unique_ptr<Model> m(new Model());
  m->options_ = o;
  // What prefill attention runs, decided once and kept in options() (never kAuto after this).
  std::string no_cudnn;
  const bool cudnn = CudnnAttention::available(&no_cudnn);
  if (o.prefill_attention == PrefillAttention::kCudnn && !cudnn) {
    *reason = "prefill attention cudnn was asked for: " + no_cudnn;
    return tpsUnavailable;
  }
  if (o.prefill_attention == PrefillAttention::kAuto)
    m->options_.prefill_attention = cudnn ? PrefillAttention::kCudnn : PrefillAttention::kKernel;
  const bool use_cudnn = m->options_.prefill_attention == PrefillAttention::kCudnn;
  DecodeKernels& k = m->options_.kernels;
  k.attention_pdl = resolveAttentionPdl(k.attention_pdl, o.config, o.split, n);
  for (int r = 0; r < n; ++r) {
    std::unique_ptr<Shard> s;
    TPS_CHECK(Shard::create(o.config, dimsFor(o.config, o.split, n, r), o.shape, o.devices[r], o.seed, use_cudnn, k, &s,
                            reason));
    m->shards_.push_back(std::move(s));
    // An event is recorded on a stream of the device it was made on: ready_[r] by the previous stage
    // (its hand-off copy), consumed_[r] and join_[r] by stage r itself.
    for (auto* list : {&m->ready_, &m->consumed_, &m->join_}) {
      DeviceGuard on(o.devices[list == &m->ready_ ? std::max(r - 1, 0) : r]);
      cudaEvent_t e = nullptr;
      TPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      list->push_back(e);
    }
  }
  if (o.split == SplitMode::kLayer) {
    // The hand-off goes straight over NVLink / PCIe P2P when peer access is on; without it the driver
    // stages the copy through host memory, which still works.
    for (int r = 0; r + 1 < n; ++r) {
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, o.devices[r], o.devices[r + 1]) != cudaSuccess || !can) continue;
      DeviceGuard on(o.devices[r]);
      const cudaError_t e = cudaDeviceEnablePeerAccess(o.devices[r + 1], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        TPS_LOG_INFO("peer access {} -> {}: {}", o.devices[r], o.devices[r + 1], cudaGetErrorName(e));
      (void)cudaGetLastError();
    }
  }
  if (o.split == SplitMode::kTensor) {
    tpsConfig_t cfg;
    tpsConfigInit(&cfg);
    cfg.backend = o.backend;
    cfg.shared_devices = o.shared_devices ? 1 : 0;
    cfg.wire = o.wire;
    cfg.wire_error_budget = o.wire_error_budget;
    if (tpsResult_t r = tpsCommCreate(&m->comm_, n, o.devices.data(), &cfg); r != tpsSuccess) {
      *reason = fmt::format("cannot create the {} AllReduce communicator: {}", tpsBackendName(o.backend),
                            tpsGetErrorString(r));
      return r;
    }
    // Pushes go through the p2p backend's lines: only when the calls would be p2p's anyway.
    if (k.reduction == Reduction::kPushed && (o.backend == tpsBackendP2p || o.backend == tpsBackendAuto)) {
      m->push_.resize(n);
      for (int r = 0; r < n && !m->push_.empty(); ++r)
        if (detail::commPushChannel(m->comm_, r, &m->push_[r]) != tpsSuccess) m->push_.clear();
    }
  }
  *out = std::move(m);
  return tpsSuccess;
}

int Model::allReducesPerForward() const {
  return options_.split == SplitMode::kTensor ? 2 * options_.config.layers : 0;
}

uint64_t Model::weightBytes() const {
  uint64_t b = 0;
  for (const auto& s : shards_) b += s->weightBytes();
  return b;
}

tpsResult_t Model::allReduce(int tokens) {
  if (skip_allreduce_) return tpsSuccess;
  void* bufs[TPS_MAX_DEVICES];
  tpsStream_t streams[TPS_MAX_DEVICES];
  for (size_t i = 0; i < shards_.size(); ++i) {
    bufs[i] = shards_[i]->partial();
    streams[i] = shards_[i]->stream();
  }
  const size_t count = static_cast<size_t>(tokens) * options_.config.hidden;
  TPS_CHECK(tpsAllReduceWith(comm_, options_.backend, bufs, count, tpsBfloat16, streams));
  for (auto& s : shards_) TPS_CHECK(s->mark("allreduce"));
  return tpsSuccess;
}

bool Model::preparePush(int tokens) {
  // Not while skipping the reductions: lines pushed with no reduction to take them would carry a
  // sequence number the next real call uses too.
  bool push = !push_.empty() && !skip_allreduce_;
  for (size_t i = 0; i < shards_.size() && push; ++i) push = shards_[i]->canPush(tokens, push_[i]);
  for (size_t i = 0; i < shards_.size(); ++i) shards_[i]->setPush(push ? &push_[i] : nullptr);
  return push;
}

tpsResult_t Model::forwardTensor(int tokens, int pos0, int token) {
  const bool pushed = preparePush(tokens);
  for (auto& s : shards_) TPS_CHECK(s->fillInput(tokens, pos0, token));
  for (int l = 0; l < options_.config.layers; ++l) {
    for (auto& s : shards_) TPS_CHECK(s->attentionBlock(l, tokens, pos0));
    TPS_CHECK(reduceThenResidual(l, tokens, Shard::kAfterAttention, pushed));
    for (auto& s : shards_) TPS_CHECK(s->ffnBlock(l, tokens));
    TPS_CHECK(reduceThenResidual(l, tokens, Shard::kAfterFfn, pushed));
  }
  return tpsSuccess;
}

tpsResult_t Model::reduceThenResidual(int layer, int tokens, Shard::After after, bool pushed) {
  const NormCall c(shards_, layer, after);
  if (tap_ && !capturing_) {
    // The partials are complete in every position's buffer (a pushed projection writes it too) once
    // the streams have run up to here.
    TPS_CHECK(synchronize());
    std::vector<const bf16_t*> partials;
    std::vector<int> devices;
    for (auto& s : shards_) partials.push_back(s->partial()), devices.push_back(s->device());
    TPS_CHECK(tap_->onAllReduce(layer, after == Shard::kAfterAttention, tokens, partials, devices));
  }
  const size_t rows = static_cast<size_t>(tokens), width = options_.config.hidden;
  if (pushed) {
    // In place: the by-row kernel reads each residual word before the same thread writes it.
    TPS_CHECK(detail::allReducePushedAddRmsNorm(comm_, c.partial, c.x, c.x, c.weights(), c.normed, rows, width,
                                                options_.config.rms_eps, tpsBfloat16, c.streams));
    for (auto& s : shards_) TPS_CHECK(s->mark("allreduce (pushed) + residual + rmsnorm"));
    return tpsSuccess;
  }
  if (!skip_allreduce_ && options_.kernels.reduction == Reduction::kFused) {
    // The new residual goes into the partial buffer (the kernel reads x whole while it writes), and
    // the two buffers then trade roles.
    const tpsResult_t r =
        tpsAllReduceAddRmsNorm(comm_, options_.backend, c.partial, c.x, c.partial, c.weights(), c.normed, rows, width,
                               options_.config.rms_eps, tpsBfloat16, c.streams);
    if (r == tpsSuccess) {
      for (auto& s : shards_) {
        s->swapResidualAndPartial();
        TPS_CHECK(s->mark("allreduce + residual + rmsnorm"));
      }
      return tpsSuccess;
    }
    if (r != tpsUnavailable) return r;
  }
  TPS_CHECK(allReduce(tokens));
  for (auto& s : shards_) TPS_CHECK(s->residual(layer, tokens, after));
  return tpsSuccess;
}

// Stage `st` of a layer split. Events: ready_[st] says the input of stage st has landed; consumed_[st]
// says stage st is done with its x (its hand-off copy has been read), so the previous stage may
// overwrite it with the next micro-batch. A wait on an event not yet recorded is a no-op.
tpsResult_t Model::forwardStage(size_t st, int tokens, int pos0) {
  Shard& s = *shards_[st];
  DeviceGuard on(s.device());
  if (st > 0) {
    TPS_CUDA_CHECK(cudaStreamWaitEvent(s.stream(), ready_[st], 0));
    TPS_CHECK(s.mark("wait for previous stage"));
  }
  for (int l = s.dims().first_layer; l < s.dims().last_layer; ++l) {
    TPS_CHECK(s.attentionBlock(l, tokens, pos0));
    TPS_CHECK(s.residual(l, tokens, Shard::kAfterAttention));
    TPS_CHECK(s.ffnBlock(l, tokens));
    TPS_CHECK(s.residual(l, tokens, Shard::kAfterFfn));  // the last stage's last layer: the final norm
  }
  if (st + 1 < shards_.size()) {
    Shard& next = *shards_[st + 1];
    // Inside a capture the fork event orders the graph after everything before it, and a wait on an
    // event recorded outside the capture is not allowed.
    if (!capturing_) TPS_CUDA_CHECK(cudaStreamWaitEvent(s.stream(), consumed_[st + 1], 0));
    // cudaMemcpyAsync with unified addressing, not cudaMemcpyPeerAsync: a stream capture accepts it
    // (as a memcpy node), so layer-split decode runs as a graph too.
    TPS_CUDA_CHECK(cudaMemcpyAsync(next.x(), s.x(), static_cast<size_t>(tokens) * options_.config.hidden * 2,
                                   cudaMemcpyDefault, s.stream()));
    TPS_CHECK(s.mark("hand-off copy"));
    TPS_CUDA_CHECK(cudaEventRecord(ready_[st + 1], s.stream()));
  }
  // Not inside a capture: an event last recorded in a graph must not be waited on by eager work later.
  if (!capturing_) TPS_CUDA_CHECK(cudaEventRecord(consumed_[st], s.stream()));
  return tpsSuccess;
}

tpsResult_t Model::forward(int tokens, int pos0) { return forwardFrom(tokens, pos0, -1); }

tpsResult_t Model::forwardToken(int token, int pos) {
  TPS_EXPECT(token >= 0, tpsInvalidArgument, "token id {} is negative", token);
  return forwardFrom(1, pos, token);
}

const Shard& Model::output() const { return options_.split == SplitMode::kLayer ? *shards_.back() : *shards_.front(); }

tpsResult_t Model::forwardFrom(int tokens, int pos0, int token) {
  TPS_EXPECT(tokens >= 1 && tokens <= options_.shape.max_tokens, tpsInvalidArgument,
             "forward of {} tokens: the buffers hold 1..{}", tokens, options_.shape.max_tokens);
  switch (options_.split) {
    case SplitMode::kNone: {
      Shard& s = *shards_[0];
      TPS_CHECK(s.fillInput(tokens, pos0, token));
      return forwardStage(0, tokens, pos0);
    }
    case SplitMode::kTensor: return forwardTensor(tokens, pos0, token);
    case SplitMode::kLayer:
      TPS_CHECK(shards_[0]->fillInput(tokens, pos0, token));
      for (size_t st = 0; st < shards_.size(); ++st) TPS_CHECK(forwardStage(st, tokens, pos0));
      return tpsSuccess;
  }
  return tpsInternalError;
}

tpsResult_t Model::prefill(int prompt, int ubatch) {
  TPS_EXPECT(prompt >= 1 && ubatch >= 1, tpsInvalidArgument, "prefill needs prompt and ubatch >= 1");
  // Enqueuing micro-batch after micro-batch is the pipeline: in `layer` each stage waits only for
  // its own input (ready_) and for its successor to release x (consumed_), so stages overlap.
  for (int pos = 0; pos < prompt; pos += ubatch) TPS_CHECK(forward(std::min(ubatch, prompt - pos), pos));
  return tpsSuccess;
}

tpsResult_t Model::fillContext(int positions) {
  for (auto& s : shards_) TPS_CHECK(s->fillContext(positions));
  return tpsSuccess;
}

tpsResult_t Model::synchronize() {
  for (auto& s : shards_) {
    DeviceGuard on(s->device());
    TPS_CUDA_CHECK(cudaStreamSynchronize(s->stream()));
  }
  if (comm_) {
    tpsResult_t async = tpsSuccess;
    TPS_CHECK(tpsCommGetAsyncError(comm_, &async));
    TPS_CHECK(async);
  }
  return tpsSuccess;
}

tpsResult_t Model::readOutput(int tokens, std::vector<float>* out) {
  TPS_CHECK(synchronize());
  const Shard& s = output();
  std::vector<uint16_t> raw(static_cast<size_t>(tokens) * options_.config.hidden);
  DeviceGuard on(s.device());
  TPS_CUDA_CHECK(cudaMemcpy(raw.data(), s.out(), raw.size() * 2, cudaMemcpyDeviceToHost));
  out->resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(raw[i]) << 16;
    std::memcpy(&(*out)[i], &bits, 4);
  }
  return tpsSuccess;
}

tpsResult_t Model::captureForward(int tokens, int pos0, cudaGraphExec_t* exec, std::string* why) {
  *exec = nullptr;
  if (options_.shared_devices && options_.split == SplitMode::kTensor) {
    // One graph holds every position's branch, and the driver may run the branches on one GPU one after
    // the other: the AllReduce of the first would wait for a peer that cannot start (until the timeout).
    *why =
        "positions that share a GPU cannot be captured in one graph in split tensor (the driver may run "
        "their branches one after the other, and each AllReduce waits for every position)";
    return tpsUnavailable;
  }
  TPS_CHECK(synchronize());
  const cudaStream_t s0 = shards_[0]->stream();
  DeviceGuard on(shards_[0]->device());
  // Thread-local mode, as nccl-tests: NCCL's own threads may carry on during the capture.
  TPS_CUDA_CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  cudaError_t e = cudaEventRecord(join_[0], s0);
  for (size_t i = 1; i < shards_.size() && e == cudaSuccess; ++i) {
    DeviceGuard d(shards_[i]->device());
    e = cudaStreamWaitEvent(shards_[i]->stream(), join_[0], 0);
  }
  tpsResult_t r = e == cudaSuccess ? forward(tokens, pos0) : tpsCudaError;
  for (size_t i = 1; i < shards_.size() && e == cudaSuccess && r == tpsSuccess; ++i) {
    DeviceGuard d(shards_[i]->device());
    e = cudaEventRecord(join_[i], shards_[i]->stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s0, join_[i], 0);
  }
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s0, &graph);  // always end, so s0 is usable after a failure
  if (r != tpsSuccess || e != cudaSuccess || end != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    *why = r != tpsSuccess ? fmt::format("a forward step could not be captured ({})", tpsGetErrorString(r))
                           : fmt::format("capture failed: {}", cudaGetErrorName(e != cudaSuccess ? e : end));
    return r != tpsSuccess ? r : tpsCudaError;
  }
  e = cudaGraphInstantiate(exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    *exec = nullptr;
    (void)cudaGetLastError();
    *why = fmt::format("cudaGraphInstantiate: {}", cudaGetErrorName(e));
    return tpsCudaError;
  }
  return tpsSuccess;
}

tpsResult_t Model::profileForward(int tokens, int pos0, std::vector<std::vector<OpTime>>* ops) {
  TPS_CHECK(synchronize());
  std::vector<std::unique_ptr<StepProfile>> profiles;
  tpsResult_t r = tpsSuccess;
  for (auto& s : shards_) {
    DeviceGuard on(s->device());
    profiles.push_back(std::make_unique<StepProfile>(s->device()));
    s->setProfile(profiles.back().get());
    // 20 ms hold: far longer than enqueuing a forward takes, so no op waits for its launch.
    if (launchSpin(20'000'000, s->stream()) != cudaSuccess) r = tpsCudaError;
    if (r == tpsSuccess) r = s->mark("start");
  }
  if (r == tpsSuccess) r = forward(tokens, pos0);
  for (auto& s : shards_) s->setProfile(nullptr);
  TPS_CHECK(r);
  TPS_CHECK(synchronize());
  ops->assign(shards_.size(), {});
  for (size_t i = 0; i < shards_.size(); ++i) TPS_CHECK(profiles[i]->collect(&(*ops)[i]));
  return tpsSuccess;
}

tpsResult_t Model::launch(cudaGraphExec_t exec) {
  DeviceGuard on(shards_[0]->device());
  TPS_CUDA_CHECK(cudaGraphLaunch(exec, shards_[0]->stream()));
  return tpsSuccess;
}

}  // namespace tpscope::workload
