// SPDX-License-Identifier: Apache-2.0
// bootstrap.h - how the processes of a rank-per-process communicator find each other on one host, and
// how each knows that the process at the other end of its connection is one of them.
//
// The id (tpsUniqueId, bootstrap_wire.h) holds a 128-bit secret and, each from its own getrandom()
// call, a tag that names a Unix socket in the abstract namespace ("@tpscope-bootstrap-<tag>") and a
// nonce that names the communicator's other resources (the host backend's shared memory). Every user
// can read socket names (/proc/net/unix); the secret appears in no name, and the names say nothing of
// it or of the nonce.
//
// Join. Rank 0 listens on the socket. Every other rank connects (retrying until rank 0 is there), reads
// the listener's credentials (SO_PEERCRED, which the kernel records at listen() and no process can
// forge) and goes on only when the listener's uid is its own or one it was told of
// (tpsConfig_t.peer_uids); otherwise it fails at once with tpsInvalidUsage and has sent nothing. Then
// it sends its hello (magic, version, nranks, rank, pid, the secret) and waits for rank 0's verdict.
// Rank 0 serves the listening socket and every connection that has not yet proven itself in one poll
// loop, so no connection can hold up another:
//  - at accept, the peer's SO_PEERCRED uid must be rank 0's own or one of its peer_uids;
//  - its whole hello must arrive within kHelloTimeoutMs (or the join's time left, if less), parse, and
//    carry the secret, compared in constant time;
//  - at most kMaxPending connections wait for their hello. One more first has rank 0 read every hello
//    that has arrived (a rank whose hello is in is never pushed out); if they still fill the set, the
//    oldest connection of the process holding the most of them is refused with tpsUnavailable, and a
//    rank refused so connects again until the join's deadline. A flood of connections from a few
//    processes therefore never costs a rank its place (a rank's process holds one), and a flood from
//    many costs a rank at most a retry.
// A peer that fails any of these is refused: logged with the pid and uid the kernel gives (not what its
// hello claims), sent a refusal verdict where its socket takes it at once, and closed. The verdict says
// what kind of refusal it is and nothing more: no pid of rank 0 and no list of accepted uids goes to a
// process that has proven nothing (the log has them). It never counts as a rank and the join goes on.
// A hello that proves the secret is a rank: ranks that disagree (another nranks, a rank number taken
// twice or out of range) fail the join on every rank alike with tpsInvalidArgument. Once all nranks ranks
// have joined, rank 0 sends each the success verdict, or the error all of them report (a rank that never
// came: tpsTimeout), and closes the listening socket.
//
// Why the hello carries the secret and not an answer to a challenge. A rank sends the secret only to a
// listener whose uid it accepts: its own user's (whose other processes it cannot be protected from:
// they may ptrace it, where ptrace is allowed, or replace its program) or one the caller named as a rank
// (and so gave the id). A challenge-response would hide the secret from such a listener too, but needs
// a keyed hash in the library: a crypto library (libtpscope.so needs only the CUDA runtime and NCCL) or
// a hand-written one, to guard against no one the uid check lets through. The secret stops what the uid
// check cannot: a process of an accepted uid that was never given the id (another job of the same user,
// a stray connection).
//
// Exchanges. The connections then carry the all-gathers with which the backends exchange their handles.
// Each rank sends a header with its blob's size; rank 0 checks every size against its own and against
// kMaxGatherBytes and sends every rank a verdict; only after a success verdict do blobs travel (each to
// rank 0, then all of them back). A wrong or huge size costs one header, never a read of the blob. The
// connections are closed when the communicator is made: a communicator needs no socket afterwards. Every
// wait has a deadline; the ranks other than 0 wait a quarter longer (at most a second) for rank 0's
// verdicts, so that a rank 0 that gives up at the timeout is still heard and every rank reports the
// same cause.
//
// An id serves one communicator: a second join with an id as a rank this process already joined as is
// tpsInvalidUsage (each communicator takes a fresh id from tpsGetUniqueId, as NCCL's do). Threads of
// one process may join as different ranks (the unit tests do).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/bootstrap_wire.h"
#include "tpscope/tpscope.h"

namespace tpscope::detail {

// How long rank 0 waits for one connection's whole hello (less when the join has less time left). A real
// rank sends it right after connect(), so a second is generous even on a loaded box.
constexpr unsigned kHelloTimeoutMs = 1000;
// The most connections that wait for their hello at once: twice the most ranks one communicator has, so
// real ranks that connect together all fit even beside a few strays.
constexpr size_t kMaxPending = 2 * TPS_MAX_DEVICES;

// A fresh id: the secret, the socket tag and the nonce from getrandom(). tpsSystemError when the system
// gives no random bytes (there is no weaker fallback: an id with a guessable secret protects nothing).
tpsResult_t makeBootstrapId(tpsUniqueId* id);
// The id's contents; tpsInvalidArgument (with *error saying why) for bytes that are no id of this build.
tpsResult_t parseBootstrapId(const tpsUniqueId& id, BootstrapId* out, std::string* error);

class Bootstrap {
 public:
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  // Joins the communicator of `id` as `rank` of `nranks`, waiting at most timeout_ms for all ranks.
  // Peers (rank 0's listener, for the other ranks; every connection, for rank 0) must run as this
  // process's effective uid or one of peer_uids. Errors (*error says which rank did what):
  // tpsInvalidArgument (bad id, rank outside 0..nranks-1, ranks disagreeing on nranks, a rank number
  // taken twice), tpsInvalidUsage (this process already joined with this id; another process listens
  // on its socket: another rank 0, or for a rank other than 0 one whose uid it does not accept; rank 0
  // refused this rank's uid), tpsTimeout (a rank that did not join in time), tpsSystemError (a socket
  // call failed, or rank 0 closed its connection during the join).
  static tpsResult_t join(const tpsUniqueId& id, int nranks, int rank, unsigned timeout_ms,
                          const std::vector<uint32_t>& peer_uids, std::unique_ptr<Bootstrap>* out, std::string* error);

  // All ranks' `bytes`-byte blobs, in rank order: all[rank] must hold this rank's on entry, and all
  // holds every rank's on return. Every rank calls it with the same `bytes`, at most kMaxGatherBytes
  // (else tpsInvalidArgument on every rank, and no blob travels). tpsTimeout when a rank does not call
  // it within the timeout; tpsSystemError when a rank's connection closed.
  tpsResult_t allGather(void* all, size_t bytes, std::string* error);
  // Waits until every rank has called it.
  tpsResult_t barrier(std::string* error);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // The id's nonce: names resources of this communicator that must not collide with another's.
  uint64_t nonce() const { return nonce_; }

 private:
  Bootstrap() = default;
  using TimePoint = std::chrono::steady_clock::time_point;
  tpsResult_t joinAsRankZero(const BootstrapId& id, const std::vector<uint32_t>& peer_uids, TimePoint deadline,
                             std::string* error);
  tpsResult_t joinAsPeer(const BootstrapId& id, const std::vector<uint32_t>& peer_uids, TimePoint deadline,
                         std::string* error);
  // One connection to rank 0, its hello and rank 0's verdict; tpsUnavailable when rank 0 refused it for
  // load (joinAsPeer then connects again).
  tpsResult_t helloToRankZero(const BootstrapId& id, const std::vector<uint32_t>& peer_uids, TimePoint deadline,
                              std::string* error);
  tpsResult_t gatherAtRankZero(char* data, size_t bytes, TimePoint deadline, std::string* error);

  int rank_ = 0, nranks_ = 0;
  uint64_t nonce_ = 0;
  unsigned timeout_ms_ = 0;
  std::vector<int> peers_;  // rank 0: the connection of each rank (index = rank, [0] unused); others: [0]
};

}  // namespace tpscope::detail
