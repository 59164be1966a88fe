// SPDX-License-Identifier: Apache-2.0
// algorithm.h - an AllReduce algorithm as a registered unit: what it declares, what its backend gives it,
// and the instance a communicator runs.
//
// An algorithm is one file of src/allreduce/algorithms/ (as MSCCL++'s allreduce_<algo>.cu): an
// AlgorithmInfo that says what it is and what it serves (name, medium, process shapes, ranks, dtypes,
// alignment, sizes, bytes per GPU, self-check call) and a factory that makes its instance from the
// resources of its backend (BackendContext: the ranks, the tuning, the memory every rank maps). registry.cc
// lists every algorithm once; the backends, the selector (chooseAlgorithm), `tpscope topo`, the bench,
// the statistics and the records read that list, so adding an algorithm touches its own file and one line
// of registry.cc. A path (tpscope.h) is an algorithm's number in the registry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "allreduce/backend_call.h"
#include "allreduce/tuning.h"
#include "allreduce/wire_codec.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

class Algorithm;
class AsyncStatus;
class HostStaging;
class PeerMemory;
struct RankGroup;

// The route an algorithm's bytes take (tpscope.h calls it the path's medium).
enum class Medium { kHostMemory, kPeerLinks, kNccl };

// The process shapes of a communicator: every rank in this process (tpsCommCreate), or one rank per
// process (tpsCommInitRank).
enum Shape : unsigned { kOneProcess = 1u, kRankPerProcess = 2u, kAnyShape = 3u };

constexpr unsigned dtypeBit(tpsDataType_t t) { return 1u << static_cast<unsigned>(t); }
constexpr unsigned kAllDtypes = dtypeBit(tpsFloat32) | dtypeBit(tpsFloat16) | dtypeBit(tpsBfloat16);

// What a backend gives the algorithms it creates. Collective in the rank-per-process shape: every rank's
// algorithms are created in registry order and make the same allocations in the same order.
struct BackendContext {
  tpsBackend_t backend = tpsBackendAuto;
  Shape shape = kOneProcess;
  std::vector<int> devices;  // this process's ranks' GPUs: every rank's (one process) or this rank's
  int first_rank = 0;        // the rank of devices[0]
  int nranks = 0;            // ranks in the communicator, in every process together
  int ranks_per_gpu = 1;     // the most ranks any one GPU carries (backend_call.h, sharedGpuGrid)
  HostTuning tuning{};
  AsyncStatus* status = nullptr;   // the backend's status words: kernels report timeouts there
  HostStaging* staging = nullptr;  // host backend: pinned host memory every rank maps
  PeerMemory* peers = nullptr;     // p2p backend: device memory every rank maps
  RankGroup* group = nullptr;      // rank per process: the ranks' bootstrap (null in one process)
  // The instance of the algorithm named `name` that this backend created before the one being created
  // (they are created in registry order), or null: two-shot hands its tail to one-shot.
  std::function<Algorithm*(const char* name)> created;
  int localRanks() const { return static_cast<int>(devices.size()); }
};

struct AlgorithmInfo {
  const char* name = "";   // the path's name in statistics, tables and records ("p2p-ll")
  const char* label = "";  // what `tpscope topo` calls it ("LL one-shot")
  tpsBackend_t backend = tpsBackendAuto;
  Medium medium = Medium::kHostMemory;
  unsigned shapes = kAnyShape;
  int min_ranks = 2, max_ranks = TPS_MAX_DEVICES;
  unsigned dtypes = kAllDtypes;
  size_t align = 1;             // bytes of alignment its kernels need; the algorithm stages a buffer short of it
  size_t granule = 1;           // a call's bytes per GPU are a multiple of this
  size_t max_bytes = SIZE_MAX;  // the largest call it takes, bytes per GPU
  size_t (*min_bytes)(const HostTuning&) = nullptr;  // the smallest call it takes on a box so tuned (null: any)
  WireCode wire = WireCode::kExact;                  // what its bytes travel as (wire.h); exact: the dtype's own bytes
  bool sum_on_wire = false;  // the sum travels the wire too (a two-shot's all-gather): every rank ends with its codes
  // Payload one GPU sends and receives for one call of `count` elements, `bytes` in all, on `nranks` ranks.
  Traffic (*traffic)(size_t bytes, size_t count, int nranks) = nullptr;
  size_t selfcheck_count = 0;  // float32 elements of its call in the p2p self-check (selfcheck.h); 0: none
  tpsResult_t (*create)(BackendContext& ctx, std::unique_ptr<Algorithm>* out) = nullptr;
};

// One algorithm on one communicator: it owns what it allocated and enqueues calls.
class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // Enqueues the call on every local rank's stream. The arguments are validated and the call is one the
  // algorithm takes (chooseAlgorithm).
  virtual tpsResult_t launch(const CallArgs& a) = 0;
  // The reduction fused with NormArgs' add and norm, where this algorithm has such a kernel for the call;
  // tpsUnavailable, nothing enqueued, where it has not.
  virtual tpsResult_t addRmsNorm(const CallArgs&, const NormArgs&) { return tpsUnavailable; }
  // The device-side address book for pushes from local rank `rank`, where the algorithm takes pushed calls.
  virtual tpsResult_t pushChannel(int /*rank*/, PushChannel*) const { return tpsUnavailable; }
  // An error found after a call returned that the backend's status words do not hold (NCCL's own).
  virtual tpsResult_t asyncError() const { return tpsSuccess; }
};

// Whether `a` takes a call of `bytes` per GPU of `dtype` on `nranks` ranks in `shape`, on a box tuned so.
bool algorithmTakes(const AlgorithmInfo& a, size_t bytes, tpsDataType_t dtype, int nranks, Shape shape,
                    const HostTuning& tuning);

}  // namespace tpscope::detail
