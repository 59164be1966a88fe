// SPDX-License-Identifier: Apache-2.0
// backend.cc - a backend's algorithms and the choice among them per call.
#include "allreduce/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "allreduce/host_staging.h"
#include "allreduce/peer_memory.h"
#include "allreduce/rank_setup.h"
#include "allreduce/registry.h"
#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

Backend::~Backend() {
  algos_.clear();  // before the staging and peer memory they use
}

tpsResult_t Backend::create(Parts parts, std::unique_ptr<Backend>* out) {
  std::unique_ptr<Backend> b(new Backend());
  b->parts_ = std::move(parts);
  BackendContext& ctx = b->parts_.ctx;
  ctx.status = b->parts_.status.get();
  ctx.staging = b->parts_.staging.get();
  ctx.peers = b->parts_.peers.get();
  Backend* self = b.get();
  ctx.created = [self](const char* name) { return self->instance(pathByName(name)); };
  for (int p : pathsOf(ctx.backend, ctx.nranks, ctx.shape)) {
    std::unique_ptr<Algorithm> a;
    const tpsResult_t r = algorithmOf(p)->create(ctx, &a);
    if (r == tpsUnavailable) continue;
    TPS_CHECK(r);
    b->paths_.push_back(p);
    b->algos_.push_back(std::move(a));
  }
  TPS_EXPECT(!b->paths_.empty(), tpsUnavailable, "{} backend: none of its algorithms can run here",
             tpsBackendName(ctx.backend));
  *out = std::move(b);
  return tpsSuccess;
}

Algorithm* Backend::instance(int path) const {
  const auto it = std::find(paths_.begin(), paths_.end(), path);
  return it == paths_.end() ? nullptr : algos_[it - paths_.begin()].get();
}

int Backend::pathFor(const CallArgs& a) const {
  const BackendContext& c = parts_.ctx;
  return chooseAlgorithm(paths_, a.bytes(), a.dtype, c.nranks, c.shape, c.tuning, a.wire);
}

Traffic Backend::trafficFor(int path, const CallArgs& a) const {
  const AlgorithmInfo* info = algorithmOf(path);
  return info && info->traffic ? info->traffic(a.bytes(), a.count, parts_.ctx.nranks) : Traffic{};
}

tpsResult_t Backend::allReduce(const CallArgs& a) {
  const int path = pathFor(a);
  TPS_EXPECT(path >= 0, tpsUnavailable, "{} backend: no algorithm of it takes a call of {} B of {} on {} ranks",
             tpsBackendName(kind()), a.bytes(), tpsDataTypeName(a.dtype), parts_.ctx.nranks);
  return instance(path)->launch(a);
}

tpsResult_t Backend::launchPath(int path, const CallArgs& a) {
  Algorithm* algo = instance(path);
  TPS_EXPECT(algo != nullptr, tpsInvalidArgument, "{} backend: path {} is not one of its algorithms",
             tpsBackendName(kind()), path);
  return algo->launch(a);
}

tpsResult_t Backend::allReduceAddRmsNorm(const CallArgs& a, const NormArgs& m, int* path) {
  *path = -1;
  if (m.pushed) {
    for (size_t i = 0; i < algos_.size() && *path < 0; ++i) {
      PushChannel ch;
      if (algos_[i]->pushChannel(0, &ch) == tpsSuccess) *path = paths_[i];
    }
  } else {
    *path = pathFor(a);
  }
  return *path < 0 ? tpsUnavailable : instance(*path)->addRmsNorm(a, m);
}

tpsResult_t Backend::pushChannel(int rank, PushChannel* out) const {
  for (const auto& algo : algos_)
    if (algo->pushChannel(rank, out) == tpsSuccess) return tpsSuccess;
  return tpsUnavailable;
}

tpsResult_t Backend::asyncError() const {
  if (const tpsResult_t e = parts_.status->error(parts_.ctx.nranks); e != tpsSuccess) return e;
  for (const auto& algo : algos_)
    if (const tpsResult_t e = algo->asyncError(); e != tpsSuccess) return e;
  return tpsSuccess;
}

tpsResult_t createBackend(tpsBackend_t kind, const std::vector<int>& devices, RankGroup* group,
                          const HostTuning& tuning, std::unique_ptr<Backend>* out) {
  Backend::Parts p;
  BackendContext& c = p.ctx;
  c.backend = kind;
  c.shape = group ? kRankPerProcess : kOneProcess;
  c.devices = devices;
  c.first_rank = group ? group->rank : 0;
  c.nranks = group ? group->nranks : static_cast<int>(devices.size());
  c.ranks_per_gpu = group ? group->ranks_per_gpu : ranksPerGpu(devices);
  c.tuning = tuning;
  c.group = group;
  p.status = std::make_unique<AsyncStatus>();
  TPS_CHECK(p.status->create());
  switch (kind) {
    case tpsBackendHost:
      for (int d : devices) {
        cudaDeviceProp prop{};
        TPS_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
        TPS_EXPECT(prop.canMapHostMemory, tpsUnavailable,
                   "GPU {} cannot map pinned host memory: host backend unavailable", d);
        TPS_EXPECT(prop.major >= 7, tpsUnavailable, "GPU {} is sm_{}{}: the host backend needs 7.0+ (__nanosleep)", d,
                   prop.major, prop.minor);
      }
      p.staging = group ? makeSharedMemoryStaging(*group) : makeProcessStaging(devices);
      break;
    case tpsBackendP2p:
      if (group)
        p.peers = makeIpcPeerMemory(*group);
      else
        TPS_CHECK(makeProcessPeerMemory(devices, &p.peers));
      break;
    case tpsBackendNccl: break;
    default: return tpsInvalidArgument;
  }
  TPS_CHECK(Backend::create(std::move(p), out));
  const Backend& b = **out;
  std::string algos;
  for (int path : b.paths()) algos += (algos.empty() ? "" : ", ") + std::string(algorithmOf(path)->name);
  if (kind == tpsBackendHost)
    algos += fmt::format(" (copy threshold {} B, chunk {} B, {} blocks, timeout {} ms, {})", tuning.copy_threshold,
                         tuning.chunk_bytes, tuning.blocks, tuning.spin_timeout_ms, tuning.source);
  if (group)
    TPS_LOG_INFO("{} backend: rank {} of {} on GPU {}: {}", tpsBackendName(kind), c.first_rank, c.nranks, devices[0],
                 algos);
  else
    TPS_LOG_INFO("{} backend: {} GPUs: {}", tpsBackendName(kind), devices.size(), algos);
  return tpsSuccess;
}

}  // namespace tpscope::detail
