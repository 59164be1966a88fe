// SPDX-License-Identifier: Apache-2.0
// bootstrap.h - how the processes of a rank-per-process communicator find each other on one host.
//
// The id (tpsUniqueId) names a Unix socket in the abstract namespace, unique per id. Rank 0 listens on
// it; every other rank connects (retrying until rank 0 is there), says who it is (nranks, rank, the
// id's nonce), and waits for rank 0's verdict: success once all nranks ranks have joined, or an error
// every joined rank reports alike (a rank that never came: tpsTimeout; a rank with another nranks or a
// rank number taken twice: tpsInvalidArgument). The connections then carry the all-gathers with which
// the backends exchange their handles, and are closed when the communicator is made: a communicator
// needs no socket afterwards. Every wait has a deadline.
//
// An id serves one communicator: a second join with an id as a rank this process already joined as is
// tpsInvalidUsage (each communicator takes a fresh id from tpsGetUniqueId, as NCCL's do). Threads of
// one process may join as different ranks (the unit tests do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

// The id's contents behind tpsUniqueId's opaque bytes.
struct BootstrapId {
  uint32_t magic;    // kBootstrapMagic: the bytes came from tpsGetUniqueId
  uint32_t version;  // of this layout and the wire protocol
  uint64_t nonce;    // random; names the socket and tells communicators apart
  char socket[96];   // "@name": a socket in the abstract namespace (the '@' stands for the leading NUL)
};
static_assert(sizeof(BootstrapId) <= sizeof(tpsUniqueId), "the id's contents must fit tpsUniqueId");

constexpr uint32_t kBootstrapMagic = 0x31535054;  // "TPS1"
constexpr uint32_t kBootstrapVersion = 1;

// A fresh id: a random nonce and the socket name made from it.
tpsResult_t makeBootstrapId(tpsUniqueId* id);
// The id's contents; tpsInvalidArgument (with *error saying why) for bytes that are no id of this build.
tpsResult_t parseBootstrapId(const tpsUniqueId& id, BootstrapId* out, std::string* error);

class Bootstrap {
 public:
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  // Joins the communicator of `id` as `rank` of `nranks`, waiting at most timeout_ms for all ranks.
  // Errors (*error says which rank did what): tpsInvalidArgument (bad id, rank outside 0..nranks-1,
  // ranks disagreeing on nranks, a rank number taken twice), tpsInvalidUsage (this process already
  // joined with this id, or another rank 0 listens on it), tpsTimeout (a rank that did not join in
  // time), tpsSystemError (a socket call failed, or a rank closed its connection during the join).
  static tpsResult_t join(const tpsUniqueId& id, int nranks, int rank, unsigned timeout_ms,
                          std::unique_ptr<Bootstrap>* out, std::string* error);

  // All ranks' `bytes`-byte blobs, in rank order: all[rank] must hold this rank's on entry, and all
  // holds every rank's on return. Every rank calls it with the same `bytes` (else tpsInvalidArgument
  // on every rank). tpsTimeout when a rank does not call it within the timeout.
  tpsResult_t allGather(void* all, size_t bytes, std::string* error);
  // Waits until every rank has called it.
  tpsResult_t barrier(std::string* error);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t nonce() const { return nonce_; }

 private:
  Bootstrap() = default;
  int rank_ = 0, nranks_ = 0;
  uint64_t nonce_ = 0;
  unsigned timeout_ms_ = 0;
  std::vector<int> peers_;  // rank 0: the connection of each rank (index = rank, [0] unused); others: [0]
};

}  // namespace tpscope::detail
