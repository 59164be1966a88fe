// SPDX-License-Identifier: Apache-2.0
// tpscope.hpp - a thin C++ wrapper over the C API in tpscope.h: an owning communicator handle.
//
//   tpscope::Communicator comm;
//   if (tpsResult_t r = tpscope::Communicator::create({0, 1}, &comm); r != tpsSuccess) { ... }
//   comm.allReduce(bufs, count, tpsBfloat16, streams);   // same contract as tpsAllReduce
//
// No exceptions: every call returns the C status, so the wrapper can sit in code built without them.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope {

// One path's statistics: its name (tpsGetPathName) and a cell per size class.
struct PathStats {
  std::string name;
  std::array<tpsStatsCell_t, TPS_NUM_SIZE_CLASSES> cells{};
};

// Every path's statistics on `comm`, indexed by path number (tpsCommGetPathStats), into *out.
[[nodiscard]] inline tpsResult_t allPathStats(tpsComm_t comm, std::vector<PathStats>* out) {
  std::vector<PathStats> v(static_cast<size_t>(tpsGetPathCount()));
  for (size_t p = 0; p < v.size(); ++p) {
    v[p].name = tpsGetPathName(static_cast<int>(p));
    if (tpsResult_t r = tpsCommGetPathStats(comm, static_cast<int>(p), v[p].cells.data()); r != tpsSuccess) return r;
  }
  *out = std::move(v);
  return tpsSuccess;
}

class Communicator {
 public:
  Communicator() = default;
  ~Communicator() { (void)tpsCommDestroy(comm_); }
  Communicator(Communicator&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      (void)tpsCommDestroy(comm_);
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // tpsCommCreate over `devices`; `config` may be null. *out is replaced only on success.
  [[nodiscard]] static tpsResult_t create(const std::vector<int>& devices, Communicator* out,
                                          const tpsConfig_t* config = nullptr) {
    tpsComm_t c = nullptr;
    tpsResult_t r = tpsCommCreate(&c, static_cast<int>(devices.size()), devices.data(), config);
    if (r == tpsSuccess) *out = Communicator(c);
    return r;
  }

  // tpsCommInitRank: this process's rank of a rank-per-process communicator. *out replaced only on success.
  [[nodiscard]] static tpsResult_t initRank(int nranks, const tpsUniqueId& id, int rank, int device, Communicator* out,
                                            const tpsConfig_t* config = nullptr) {
    tpsComm_t c = nullptr;
    tpsResult_t r = tpsCommInitRank(&c, nranks, id, rank, device, config);
    if (r == tpsSuccess) *out = Communicator(c);
    return r;
  }

  // tpsAllReduceWire: the backend and the wire default to the communicator's (tpsAllReduce).
  [[nodiscard]] tpsResult_t allReduce(void* const* bufs, size_t count, tpsDataType_t dtype, const tpsStream_t* streams,
                                      tpsBackend_t backend = tpsBackendAuto, tpsWire_t wire = tpsWireAuto) {
    return tpsAllReduceWire(comm_, backend, wire, bufs, count, dtype, streams);
  }
  [[nodiscard]] tpsResult_t asyncError() const {
    tpsResult_t e = tpsSuccess;
    tpsResult_t r = tpsCommGetAsyncError(comm_, &e);
    return r != tpsSuccess ? r : e;
  }
  [[nodiscard]] tpsResult_t stats(tpsStats_t* out) const { return tpsCommGetStats(comm_, out); }
  [[nodiscard]] tpsResult_t pathStats(std::vector<PathStats>* out) const { return allPathStats(comm_, out); }
  tpsComm_t get() const { return comm_; }
  explicit operator bool() const { return comm_ != nullptr; }

 private:
  explicit Communicator(tpsComm_t c) : comm_(c) {}
  tpsComm_t comm_ = nullptr;
};

}  // namespace tpscope
