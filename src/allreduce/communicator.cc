// SPDX-License-Identifier: Apache-2.0
// communicator.cc - the C API: communicator lifetime, argument validation, dispatch, statistics.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "allreduce/auto_table.h"
#include "allreduce/backend.h"
#include "allreduce/push.h"
#include "allreduce/rank_setup.h"
#include "allreduce/registry.h"
#include "allreduce/selector.h"
#include "allreduce/selfcheck.h"
#include "allreduce/tuning.h"
#include "allreduce/wire.h"
#include "common/checks.h"
#include "common/param.h"
#include "tpscope/tpscope.h"

using namespace tpscope;
using namespace tpscope::detail;

struct tpsComm {
  std::vector<int> devices;  // this process's ranks' GPUs: all of them, or one rank's (tpsCommInitRank)
  int nranks = 0;            // ranks in the communicator, in every process together
  int first_rank = 0;        // the rank of devices[0]
  tpsBackend_t requested = tpsBackendAuto;
  tpsConfig_t config{};  // as resolved at creation (tpsCommGetConfig)
  Availability avail;
  std::optional<AutoTable> auto_table;  // the tune file's measured choice for this box, when there is one
  WirePolicy wire;                      // the wire the calls ask for (wire.h)
  std::optional<WireTable> wire_table;  // auto's measured wires for this box, when the tune file has them
  std::array<std::unique_ptr<Backend>, tpsNumBackends> backends;
  std::mutex stats_mutex;  // stats may be read from another thread than the one calling tpsAllReduce
  // [path][size class], a row per registered algorithm (registry.h), so a new algorithm is a new row.
  std::vector<std::array<tpsStatsCell_t, TPS_NUM_SIZE_CLASSES>> stats =
      std::vector<std::array<tpsStatsCell_t, TPS_NUM_SIZE_CLASSES>>(algorithms().size());
  // The first asynchronous error; read by tpsCommGetAsyncError from any thread, so atomic.
  std::atomic<tpsResult_t> async_error{tpsSuccess};
  // The buffer and stream each rank passed last time they were validated: a decode loop passes the same
  // ones every call, and the driver queries behind the checks cost about a microsecond per rank.
  std::array<void*, TPS_MAX_DEVICES> checked_buf{};
  std::array<tpsStream_t, TPS_MAX_DEVICES> checked_stream{};
};

namespace {

bool validDtype(tpsDataType_t t) { return t >= tpsFloat32 && t < tpsNumDataTypes; }

// The communicator's first asynchronous error, kept once a backend reports one (the backends are fixed
// at creation, so any thread may ask them).
tpsResult_t checkAsync(tpsComm* c) {
  tpsResult_t seen = c->async_error.load(std::memory_order_acquire);
  if (seen != tpsSuccess) return seen;
  for (const auto& b : c->backends) {
    const tpsResult_t e = b ? b->asyncError() : tpsSuccess;
    if (e == tpsSuccess) continue;
    c->async_error.compare_exchange_strong(seen, e, std::memory_order_acq_rel);  // the first one stays
    return c->async_error.load(std::memory_order_acquire);
  }
  return tpsSuccess;
}

tpsResult_t validateCall(tpsComm* c, void* const* bufs, size_t count, tpsDataType_t dtype, const tpsStream_t* streams) {
  TPS_EXPECT(bufs != nullptr && streams != nullptr, tpsInvalidArgument,
             "tpsAllReduce: bufs and streams must not be NULL");
  TPS_EXPECT(count > 0, tpsInvalidArgument, "tpsAllReduce: count is 0");
  TPS_EXPECT(validDtype(dtype), tpsInvalidArgument, "tpsAllReduce: unsupported dtype {}", static_cast<int>(dtype));
  TPS_EXPECT(count <= SIZE_MAX / tpsDataTypeSize(dtype), tpsInvalidArgument, "tpsAllReduce: count {} overflows", count);
  for (size_t r = 0; r < c->devices.size(); ++r) {
    const int dev = c->devices[r];
    TPS_EXPECT(bufs[r] != nullptr, tpsInvalidArgument, "tpsAllReduce: bufs[{}] is NULL", r);
    TPS_EXPECT(streams[r] != nullptr, tpsInvalidArgument,
               "tpsAllReduce: streams[{}] is the legacy default stream; pass a stream created on GPU {}", r, dev);
    if (bufs[r] == c->checked_buf[r] && streams[r] == c->checked_stream[r]) continue;
    // The stream's device is checked on eager calls only: CUDA forbids querying it while the stream
    // is being captured (cuStreamGetDevice would invalidate the capture), and a captured call on the
    // wrong device fails at instantiation anyway.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(streams[r]), &capturing) != cudaSuccess) {
      (void)cudaGetLastError();
      TPS_LOG_WARN("tpsAllReduce: streams[{}] is not a valid stream", r);
      return tpsInvalidArgument;
    }
    if (capturing == cudaStreamCaptureStatusNone) {
      int sdev = -1;
      if (cudaStreamGetDevice(reinterpret_cast<cudaStream_t>(streams[r]), &sdev) != cudaSuccess) {
        (void)cudaGetLastError();
        TPS_LOG_WARN("tpsAllReduce: streams[{}] is not a valid stream", r);
        return tpsInvalidArgument;
      }
      TPS_EXPECT(sdev == dev, tpsInvalidArgument, "tpsAllReduce: streams[{}] is on GPU {}, not GPU {}", r, sdev, dev);
    }
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, bufs[r]) != cudaSuccess) {
      (void)cudaGetLastError();
      attr.type = cudaMemoryTypeUnregistered;
    }
    TPS_EXPECT(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, tpsInvalidArgument,
               "tpsAllReduce: bufs[{}] is not device memory", r);
    TPS_EXPECT(attr.type == cudaMemoryTypeManaged || attr.device == dev, tpsInvalidArgument,
               "tpsAllReduce: bufs[{}] is on GPU {}, not GPU {}", r, attr.device, dev);
  }
  for (size_t r = 0; r < c->devices.size(); ++r) {
    c->checked_buf[r] = bufs[r];
    c->checked_stream[r] = streams[r];
  }
  return tpsSuccess;
}

// Counts an enqueued call on the path that carried it.
void record(tpsComm* c, const Backend& b, int path, const CallArgs& args) {
  const size_t bytes = args.bytes();
  const Traffic t = b.trafficFor(path, args);
  std::lock_guard<std::mutex> lock(c->stats_mutex);
  tpsStatsCell_t& cell = c->stats[path][tpsSizeClassOf(bytes)];
  cell.calls += 1;
  cell.payload_bytes += bytes;
  for (size_t r = 0; r < c->devices.size(); ++r) {
    cell.tx_bytes[r] += t.tx;
    cell.rx_bytes[r] += t.rx;
  }
}

bool allPeerAccess(const std::vector<int>& devs) {
  for (int a : devs)
    for (int b : devs) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok)) {
        (void)cudaGetLastError();
        return false;
      }
    }
  return true;
}

// The tune file's "auto" table, when it was measured on a box like this one (the fingerprint needs the
// topology, so it is queried only when the file has a table). Logs once what auto will do.
void loadAutoChoice(tpsComm* c) {
  AutoTableLoad load = loadAutoTable(tuneFilePath(), [&] {
    Topology topo;
    std::string reason;
    return queryTopology(c->devices, &topo, &reason) == tpsSuccess ? boxFingerprint(topo) : "unknown (" + reason + ")";
  });
  if (!load.table) return;
  c->auto_table = std::move(load.table);
  std::array<bool, tpsNumBackends> said{};
  for (const AutoRange& r : c->auto_table->ranges)
    if (!isAvailable(c->avail, r.backend) && !std::exchange(said[r.backend], true))
      TPS_LOG_INFO(
          "auto: the tune file names {} for some sizes, which is not available in this communicator; the "
          "built-in default takes those sizes",
          tpsBackendName(r.backend));
  TPS_LOG_INFO("auto: {} (tune file {}, measured {})", describeRanges(c->auto_table->ranges), c->auto_table->path,
               c->auto_table->measured);
}

// The p2p backend's self-check (selfcheck.h) for this process's ranks; across processes the ranks then
// agree on the verdict through `group`, so p2p is kept or refused on all of them. A refused backend is
// destroyed here. tpsUnavailable when the peers' writes did not arrive intact: forced (`forced`), the
// creation fails with it; under auto the communicator goes on without p2p and says so.
tpsResult_t checkP2p(tpsComm* c, const char* what, bool forced, const std::vector<int>& devices, int first_rank,
                     int nranks, RankGroup* group) {
  std::string why;
  double ms = 0;
  tpsResult_t r = selfCheckP2p(*c->backends[tpsBackendP2p], devices, first_rank, nranks, &why, &ms);
  if (r != tpsSuccess) TPS_LOG_WARN("{}: {}", what, why);
  if (group) r = agree(*group, "the p2p self-check", r);
  if (r == tpsSuccess) {
    TPS_LOG_INFO("{}: p2p self-check passed in {:.2f} ms", what, ms);
    return tpsSuccess;
  }
  c->backends[tpsBackendP2p].reset();
  TPS_LOG_WARN("{}: the p2p backend is refused for this communicator{}", what,
               forced ? "" : "; auto continues with the other backends");
  return r == tpsTimeout || r == tpsSystemError ? r : tpsUnavailable;
}

// The configuration as resolved at creation, for tpsCommGetConfig and the records.
tpsConfig_t resolvedConfig(const tpsConfig_t& given, tpsBackend_t requested, const HostTuning& tuning,
                           const WirePolicy& wire) {
  tpsConfig_t c = given;
  c.backend = requested;
  c.wire = wire.automatic ? tpsWireAuto : static_cast<tpsWire_t>(wire.wire);
  c.wire_error_budget = static_cast<float>(wire.budget);
  c.host_copy_threshold = tuning.copy_threshold;
  c.host_chunk_bytes = tuning.chunk_bytes;
  c.host_blocks = tuning.blocks;
  c.spin_timeout_ms = tuning.spin_timeout_ms;
  return c;
}

// The wire the communicator's config and TPSCOPE_WIRE ask for; for auto, the tune file's wire table when it
// was measured on this box (else every call is exact, and the log says why once).
tpsResult_t resolveWire(const tpsConfig_t& cfg, const char* what, WirePolicy* out) {
  int v = 0;
  static_assert(sizeof(cfg.wire) == sizeof(int), "a C enum is an int");
  std::memcpy(&v, &cfg.wire, sizeof(v));  // a C caller's value outside the enum must not load as a tpsWire_t
  std::string error;
  if (requestedWire(v, cfg.wire_error_budget, std::getenv("TPSCOPE_WIRE"), out, &error) != tpsSuccess) {
    TPS_LOG_WARN("{}: {}", what, error);
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

void loadWireTable(tpsComm* c) {
  if (!c->wire.automatic) return;
  const std::string path = tuneFilePath();
  std::ifstream f(path);
  const nlohmann::json doc = f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
  WireTableLoad load = selectWireTable(doc, path, [&] {
    Topology topo;
    std::string reason;
    return queryTopology(c->devices, &topo, &reason) == tpsSuccess ? boxFingerprint(topo) : "unknown (" + reason + ")";
  });
  if (load.table) {
    c->wire_table = std::move(load.table);
    TPS_LOG_INFO("wire auto:{}: the wires measured in {} ({})", c->wire.budget, path, c->wire_table->measured);
    return;
  }
  TPS_LOG_INFO("wire auto:{}: {}; every call is exact", c->wire.budget, load.why);
}

// The wire a call of `bytes` on `backend` runs on: the one it names (tpsAllReduceWire), else the
// communicator's (policyWire).
WireCode callWire(const tpsComm* c, std::optional<WireCode> named, size_t bytes, tpsBackend_t backend) {
  if (named) return *named;
  return policyWire(c->wire, c->wire_table ? &*c->wire_table : nullptr, bytes, backend);
}

}  // namespace

extern "C" tpsResult_t tpsConfigInit(tpsConfig_t* config) {
  if (config == nullptr) return tpsInvalidArgument;
  std::memset(config, 0, sizeof(*config));
  config->backend = tpsBackendAuto;
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommCreate(tpsComm_t* comm, int ndev, const int* devices, const tpsConfig_t* config) {
  TPS_EXPECT(comm != nullptr && devices != nullptr, tpsInvalidArgument,
             "tpsCommCreate: comm and devices must not be NULL");
  *comm = nullptr;
  TPS_EXPECT(ndev >= 2 && ndev <= TPS_MAX_DEVICES, tpsInvalidArgument,
             "tpsCommCreate: ndev is {}; a communicator spans 2 to {} GPUs", ndev, TPS_MAX_DEVICES);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    TPS_LOG_WARN("tpsCommCreate: no CUDA device is usable on this machine");
    return tpsUnavailable;
  }
  std::vector<int> devs(devices, devices + ndev);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  if (config) cfg = *config;
  const bool may_share = cfg.shared_devices != 0;
  for (int i = 0; i < ndev; ++i) {
    TPS_EXPECT(devs[i] >= 0 && devs[i] < count, tpsInvalidArgument, "tpsCommCreate: GPU {} does not exist ({} GPUs)",
               devs[i], count);
    TPS_EXPECT(may_share || std::count(devs.begin(), devs.end(), devs[i]) == 1, tpsInvalidArgument,
               "tpsCommCreate: GPU {} appears twice (config.shared_devices lets ranks share a GPU)", devs[i]);
  }
  std::string error;
  tpsBackend_t requested = tpsBackendAuto;
  if (requestedBackend(configBackendValue(cfg), std::getenv("TPSCOPE_ALLREDUCE"), &requested, &error) != tpsSuccess) {
    TPS_LOG_WARN("tpsCommCreate: {}", error);
    return tpsInvalidArgument;
  }
  HostTuning tuning;
  TPS_CHECK(resolveHostTuning(cfg, &tuning));
  tuning.blocks = sharedGpuGrid(tuning.blocks, ranksPerGpu(devs));  // ranks sharing a GPU fit on it together
  WirePolicy wire;
  TPS_CHECK(resolveWire(cfg, "tpsCommCreate", &wire));

  auto c = std::make_unique<tpsComm>();
  c->devices = devs;
  c->nranks = ndev;
  c->requested = requested;
  c->wire = wire;
  c->config = resolvedConfig(cfg, requested, tuning, wire);
  c->avail.all_peer_access = allPeerAccess(devs);
  const bool want_all = requested == tpsBackendAuto;
  if (requested == tpsBackendP2p || (want_all && c->avail.all_peer_access)) {
    tpsResult_t r = createBackend(tpsBackendP2p, devs, nullptr, tuning, &c->backends[tpsBackendP2p]);
    if (r != tpsSuccess && !want_all) return r;
    if (r != tpsSuccess) TPS_LOG_WARN("tpsCommCreate: the p2p backend could not start; auto continues without it");
    if (r == tpsSuccess) r = checkP2p(c.get(), "tpsCommCreate", !want_all, devs, 0, ndev, nullptr);
    if (r != tpsSuccess && !want_all) return r;
    c->avail.p2p = r == tpsSuccess;
  }
  if (want_all || requested == tpsBackendHost) {
    tpsResult_t r = createBackend(tpsBackendHost, devs, nullptr, tuning, &c->backends[tpsBackendHost]);
    if (r != tpsSuccess && !want_all) return r;
    c->avail.host = r == tpsSuccess;
  }
  // NCCL takes one rank per GPU: with ranks sharing a GPU it is not started (forced, it is unavailable).
  const bool shared = ranksPerGpu(devs) > 1;
  TPS_EXPECT(!shared || requested != tpsBackendNccl, tpsUnavailable,
             "tpsCommCreate: the nccl backend takes one rank per GPU, and ranks share a GPU here");
  if ((want_all && !shared) || requested == tpsBackendNccl) {
    tpsResult_t r = createBackend(tpsBackendNccl, devs, nullptr, tuning, &c->backends[tpsBackendNccl]);
    if (r != tpsSuccess && !want_all) return r;
    if (r != tpsSuccess) TPS_LOG_WARN("tpsCommCreate: NCCL could not start; auto continues without it");
    c->avail.nccl = r == tpsSuccess;
  }
  TPS_EXPECT(c->avail.host || c->avail.nccl || c->avail.p2p, tpsUnavailable,
             "tpsCommCreate: no backend can run on these GPUs");
  if (want_all) loadAutoChoice(c.get());
  loadWireTable(c.get());
  *comm = c.release();
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommDestroy(tpsComm_t comm) {
  delete comm;
  return tpsSuccess;
}

// The backend that carries a call of `bytes` asked for `backend`: the call's own choice, else the
// communicator's, else auto's pick by size. Null when that backend is not set up here; *which (if
// given) then names it for the message.
static Backend* resolveBackend(tpsComm_t comm, tpsBackend_t backend, size_t bytes, tpsBackend_t* which) {
  tpsBackend_t w = backend != tpsBackendAuto ? backend : comm->requested;
  if (w == tpsBackendAuto) w = chooseAuto(comm->avail, bytes, comm->auto_table ? &*comm->auto_table : nullptr);
  if (which) *which = w;
  return w == tpsBackendAuto ? nullptr : comm->backends[w].get();
}

extern "C" tpsResult_t tpsAllReduceWire(tpsComm_t comm, tpsBackend_t backend, tpsWire_t wire, void* const* bufs,
                                        size_t count, tpsDataType_t dtype, const tpsStream_t* streams) {
  TPS_EXPECT(comm != nullptr, tpsInvalidArgument, "tpsAllReduce: comm is NULL");
  TPS_EXPECT(backend >= tpsBackendAuto && backend < tpsNumBackends, tpsInvalidArgument,
             "tpsAllReduceWith: backend {} is not a backend", static_cast<int>(backend));
  int wire_value = 0;
  std::memcpy(&wire_value, &wire, sizeof(wire_value));  // a C caller's value outside the enum, read as the int
  std::optional<WireCode> named;
  std::string error;
  if (callWireOverride(wire_value, &named, &error) != tpsSuccess) {
    TPS_LOG_WARN("tpsAllReduceWire: {}", error);
    return tpsInvalidArgument;
  }
  if (checkAsync(comm) != tpsSuccess) {
    TPS_LOG_WARN("tpsAllReduce: the communicator had an asynchronous error ({}); destroy it",
                 tpsGetErrorString(comm->async_error.load()));
    return tpsInvalidUsage;
  }
  TPS_CHECK(validateCall(comm, bufs, count, dtype, streams));
  const size_t bytes = count * tpsDataTypeSize(dtype);
  tpsBackend_t which = tpsBackendAuto;
  Backend* b = resolveBackend(comm, backend, bytes, &which);
  TPS_EXPECT(b != nullptr, tpsUnavailable, "tpsAllReduce: backend {} is not available in this communicator",
             tpsBackendName(which));
  CallArgs args{bufs, count, dtype, reinterpret_cast<const cudaStream_t*>(streams),
                callWire(comm, named, bytes, which)};
  const int path = b->pathFor(args);
  TPS_EXPECT(path >= 0, tpsUnavailable, "tpsAllReduce: no algorithm of backend {} takes {} B of {} on {} ranks",
             tpsBackendName(which), bytes, tpsDataTypeName(dtype), comm->nranks);
  TPS_CHECK(b->launchPath(path, args));
  record(comm, *b, path, args);
  return tpsSuccess;
}

extern "C" tpsResult_t tpsAllReduceWith(tpsComm_t comm, tpsBackend_t backend, void* const* bufs, size_t count,
                                        tpsDataType_t dtype, const tpsStream_t* streams) {
  return tpsAllReduceWire(comm, backend, tpsWireAuto, bufs, count, dtype, streams);
}

// The checks tpsAllReduceAddRmsNorm and allReducePushedAddRmsNorm share (`what` names the call in
// the log); tpsInvalidUsage, quietly, after an asynchronous error.
static tpsResult_t validateNormCall(tpsComm_t comm, const char* what, void* const* partial,
                                    const void* const* residual_in, void* const* residual_out,
                                    const void* const* weight, void* const* normed, size_t rows, size_t width,
                                    float eps, tpsDataType_t dtype, const tpsStream_t* streams) {
  TPS_EXPECT(rows > 0 && width > 0 && rows <= SIZE_MAX / width, tpsInvalidArgument,
             "{}: rows {} x width {} is not a shape", what, rows, width);
  TPS_EXPECT(residual_in != nullptr && residual_out != nullptr && (weight == nullptr || normed != nullptr),
             tpsInvalidArgument, "{}: residual_in, residual_out (and normed, with a weight) must not be NULL", what);
  TPS_EXPECT(eps > 0 || weight == nullptr, tpsInvalidArgument, "{}: eps must be positive", what);
  for (size_t r = 0; r < comm->devices.size(); ++r)
    TPS_EXPECT(residual_in[r] != nullptr && residual_out[r] != nullptr &&
                   (weight == nullptr || (weight[r] != nullptr && normed[r] != nullptr)),
               tpsInvalidArgument, "{}: a residual, weight or normed pointer of GPU {} is NULL", what, r);
  if (checkAsync(comm) != tpsSuccess) return tpsInvalidUsage;
  return validateCall(comm, partial, rows * width, dtype, streams);
}

extern "C" tpsResult_t tpsAllReduceAddRmsNorm(tpsComm_t comm, tpsBackend_t backend, void* const* partial,
                                              const void* const* residual_in, void* const* residual_out,
                                              const void* const* weight, void* const* normed, size_t rows, size_t width,
                                              float eps, tpsDataType_t dtype, const tpsStream_t* streams) {
  TPS_EXPECT(comm != nullptr, tpsInvalidArgument, "tpsAllReduceAddRmsNorm: comm is NULL");
  TPS_EXPECT(backend >= tpsBackendAuto && backend < tpsNumBackends, tpsInvalidArgument,
             "tpsAllReduceAddRmsNorm: backend {} is not a backend", static_cast<int>(backend));
  TPS_CHECK(validateNormCall(comm, "tpsAllReduceAddRmsNorm", partial, residual_in, residual_out, weight, normed, rows,
                             width, eps, dtype, streams));
  const size_t count = rows * width;
  const size_t bytes = count * tpsDataTypeSize(dtype);
  Backend* b = resolveBackend(comm, backend, bytes, nullptr);
  if (b == nullptr) return tpsUnavailable;  // quiet: the caller runs the steps apart
  CallArgs args{partial, count, dtype, reinterpret_cast<const cudaStream_t*>(streams)};
  NormArgs norm{residual_in, residual_out, weight, weight ? normed : nullptr, rows, width, eps};
  int path = -1;
  const tpsResult_t r = b->allReduceAddRmsNorm(args, norm, &path);
  if (r == tpsSuccess) record(comm, *b, path, args);
  return r;
}

tpsResult_t tpscope::detail::commPushChannel(tpsComm_t comm, int rank, PushChannel* channel) {
  TPS_EXPECT(comm != nullptr && channel != nullptr, tpsInvalidArgument, "commPushChannel: NULL argument");
  TPS_EXPECT(rank >= 0 && rank < static_cast<int>(comm->devices.size()), tpsInvalidArgument,
             "commPushChannel: rank {} is outside 0..{}", rank, comm->devices.size() - 1);
  const Backend* b = comm->backends[tpsBackendP2p].get();
  if (b == nullptr) return tpsUnavailable;  // quiet: the caller reduces the ordinary way
  return b->pushChannel(rank, channel);
}

tpsResult_t tpscope::detail::allReducePushedAddRmsNorm(tpsComm_t comm, void* const* partial,
                                                       const void* const* residual_in, void* const* residual_out,
                                                       const void* const* weight, void* const* normed, size_t rows,
                                                       size_t width, float eps, tpsDataType_t dtype,
                                                       const tpsStream_t* streams) {
  TPS_EXPECT(comm != nullptr, tpsInvalidArgument, "allReducePushedAddRmsNorm: comm is NULL");
  TPS_CHECK(validateNormCall(comm, "allReducePushedAddRmsNorm", partial, residual_in, residual_out, weight, normed,
                             rows, width, eps, dtype, streams));
  Backend* b = comm->backends[tpsBackendP2p].get();
  TPS_EXPECT(b != nullptr, tpsUnavailable, "allReducePushedAddRmsNorm: the communicator has no p2p backend");
  const size_t count = rows * width;
  CallArgs args{partial, count, dtype, reinterpret_cast<const cudaStream_t*>(streams)};
  NormArgs norm{residual_in, residual_out, weight, weight ? normed : nullptr, rows, width, eps, true};
  int path = -1;
  TPS_CHECK(b->allReduceAddRmsNorm(args, norm, &path));
  record(comm, *b, path, args);
  return tpsSuccess;
}

extern "C" tpsResult_t tpsAllReduce(tpsComm_t comm, void* const* bufs, size_t count, tpsDataType_t dtype,
                                    const tpsStream_t* streams) {
  return tpsAllReduceWith(comm, tpsBackendAuto, bufs, count, dtype, streams);
}

extern "C" tpsResult_t tpsCommGetAsyncError(tpsComm_t comm, tpsResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return tpsInvalidArgument;
  *async_error = checkAsync(comm);
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommGetConfig(tpsComm_t comm, tpsConfig_t* config) {
  if (comm == nullptr || config == nullptr) return tpsInvalidArgument;
  *config = comm->config;  // written once at creation, read-only after: no lock
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommGetStats(tpsComm_t comm, tpsStats_t* stats) {
  if (comm == nullptr || stats == nullptr) return tpsInvalidArgument;
  std::memset(stats, 0, sizeof(*stats));
  stats->ndev = static_cast<int>(comm->devices.size());
  std::copy(comm->devices.begin(), comm->devices.end(), stats->devices);
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  for (int p = 0; p < tpsNumPaths; ++p) std::copy(comm->stats[p].begin(), comm->stats[p].end(), stats->cells[p]);
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommGetPathStats(tpsComm_t comm, int path, tpsStatsCell_t* cells) {
  if (comm == nullptr || cells == nullptr || path < 0 || path >= tpsGetPathCount()) return tpsInvalidArgument;
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  std::copy(comm->stats[path].begin(), comm->stats[path].end(), cells);
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommResetStats(tpsComm_t comm) {
  if (comm == nullptr) return tpsInvalidArgument;
  std::lock_guard<std::mutex> lock(comm->stats_mutex);
  for (auto& row : comm->stats) row.fill(tpsStatsCell_t{});
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommCount(tpsComm_t comm, int* nranks) {
  if (comm == nullptr || nranks == nullptr) return tpsInvalidArgument;
  *nranks = comm->nranks;
  return tpsSuccess;
}

extern "C" tpsResult_t tpsCommUserRank(tpsComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return tpsInvalidArgument;
  *rank = comm->first_rank;
  return tpsSuccess;
}

// ---- one rank per process ----------------------------------------------------------------------
// The same communicator with this process's one rank in devices[0] and backends made collectively
// (rank_setup.h): each factory ends with the ranks' statuses exchanged, so every rank has the same
// backends and auto chooses alike on all of them.

TPS_PARAM_INT(BootstrapTimeoutMs, "TPSCOPE_BOOTSTRAP_TIMEOUT_MS", 30000)

extern "C" tpsResult_t tpsGetUniqueId(tpsUniqueId* id) {
  TPS_EXPECT(id != nullptr, tpsInvalidArgument, "tpsGetUniqueId: id is NULL");
  return makeBootstrapId(id);
}

extern "C" tpsResult_t tpsCommInitRank(tpsComm_t* comm, int nranks, tpsUniqueId id, int rank, int device,
                                       const tpsConfig_t* config) {
  TPS_EXPECT(comm != nullptr, tpsInvalidArgument, "tpsCommInitRank: comm is NULL");
  *comm = nullptr;
  TPS_EXPECT(nranks >= 2 && nranks <= TPS_MAX_DEVICES, tpsInvalidArgument,
             "tpsCommInitRank: nranks is {}; a communicator spans 2 to {} ranks", nranks, TPS_MAX_DEVICES);
  TPS_EXPECT(rank >= 0 && rank < nranks, tpsInvalidArgument, "tpsCommInitRank: rank {} is outside 0..{}", rank,
             nranks - 1);
  TPS_EXPECT(device >= 0, tpsInvalidArgument, "tpsCommInitRank: device {} is not a CUDA ordinal", device);
  const int64_t timeout_ms = tpsParamBootstrapTimeoutMs();
  TPS_EXPECT(timeout_ms > 0 && timeout_ms <= 24 * 3600 * 1000, tpsInvalidArgument,
             "TPSCOPE_BOOTSTRAP_TIMEOUT_MS={} is outside 1..86400000", timeout_ms);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  if (config) cfg = *config;
  std::string error;
  tpsBackend_t requested = tpsBackendAuto;
  if (requestedBackend(configBackendValue(cfg), std::getenv("TPSCOPE_ALLREDUCE"), &requested, &error) != tpsSuccess) {
    TPS_LOG_WARN("tpsCommInitRank: {}", error);
    return tpsInvalidArgument;
  }
  TPS_EXPECT(cfg.num_peer_uids >= 0 && cfg.num_peer_uids <= TPS_MAX_PEER_UIDS, tpsInvalidArgument,
             "tpsCommInitRank: config.num_peer_uids is {}; it names 0 to {} uids", cfg.num_peer_uids,
             TPS_MAX_PEER_UIDS);
  const std::vector<uint32_t> peer_uids(cfg.peer_uids, cfg.peer_uids + cfg.num_peer_uids);
  HostTuning tuning;
  TPS_CHECK(resolveHostTuning(cfg, &tuning));
  WirePolicy wire;
  TPS_CHECK(resolveWire(cfg, "tpsCommInitRank", &wire));

  RankGroup g;
  TPS_CHECK(joinRankGroup(id, nranks, rank, device, cfg.shared_devices != 0, static_cast<unsigned>(timeout_ms),
                          peer_uids, &g));
  tuning.blocks = sharedGpuGrid(tuning.blocks, g.ranks_per_gpu);  // ranks sharing a GPU fit on it together
  auto c = std::make_unique<tpsComm>();
  c->devices = {device};
  c->nranks = nranks;
  c->first_rank = rank;
  c->requested = requested;
  c->wire = wire;
  c->config = resolvedConfig(cfg, requested, tuning, wire);
  c->avail.all_peer_access = g.all_peer_access;
  const bool want_all = requested == tpsBackendAuto;
  // A rank that stopped answering (timeout) or left (system error) ends the init even for auto: the
  // next backend's exchanges would only fail the same way.
  auto fatal = [&](tpsResult_t r) { return r != tpsSuccess && (!want_all || r == tpsTimeout || r == tpsSystemError); };
  if (requested == tpsBackendP2p || (want_all && g.all_peer_access)) {
    tpsResult_t r = createBackend(tpsBackendP2p, {device}, &g, tuning, &c->backends[tpsBackendP2p]);
    if (fatal(r)) return r;
    if (r != tpsSuccess) TPS_LOG_WARN("tpsCommInitRank: the p2p backend could not start; auto continues without it");
    if (r == tpsSuccess) r = checkP2p(c.get(), "tpsCommInitRank", !want_all, {device}, rank, nranks, &g);
    if (fatal(r)) return r;
    c->avail.p2p = r == tpsSuccess;
  }
  if (want_all || requested == tpsBackendHost) {
    tpsResult_t r = createBackend(tpsBackendHost, {device}, &g, tuning, &c->backends[tpsBackendHost]);
    if (fatal(r)) return r;
    c->avail.host = r == tpsSuccess;
  }
  // NCCL refuses ranks that share a GPU; auto does not ask it then.
  if (requested == tpsBackendNccl || (want_all && !g.shared_device)) {
    tpsResult_t r = createBackend(tpsBackendNccl, {device}, &g, tuning, &c->backends[tpsBackendNccl]);
    if (fatal(r)) return r;
    if (r != tpsSuccess) TPS_LOG_WARN("tpsCommInitRank: NCCL could not start; auto continues without it");
    c->avail.nccl = r == tpsSuccess;
  }
  TPS_EXPECT(c->avail.host || c->avail.nccl || c->avail.p2p, tpsUnavailable,
             "tpsCommInitRank: no backend can run on these GPUs");
  if (want_all) loadAutoChoice(c.get());
  loadWireTable(c.get());
  *comm = c.release();
  return tpsSuccess;
}
