// SPDX-License-Identifier: Apache-2.0
// bootstrap_wire.h - the bytes of the rank-per-process join: the id's contents and the messages on the
// socket (bootstrap.h has the protocol), each with a pure function that parses or judges it, so that
// the fuzzers (fuzz/allreduce/) and the unit tests reach every check without a socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

constexpr uint32_t kBootstrapMagic = 0x31535054;  // "TPS1"
constexpr uint32_t kBootstrapVersion = 2;         // of the id's layout and the wire protocol
constexpr size_t kSecretBytes = 16;               // 128 bits
// The most bytes one rank's blob may have in an all-gather: the backends exchange handles of a few
// hundred bytes; a larger size is a bug or a hostile peer, refused before any blob travels.
constexpr uint64_t kMaxGatherBytes = uint64_t{1} << 20;

// The id's contents behind tpsUniqueId's opaque bytes. Every field comes from its own getrandom()
// call, so no field says anything about another.
struct BootstrapId {
  uint32_t magic;                // kBootstrapMagic: the bytes came from tpsGetUniqueId
  uint32_t version;              // kBootstrapVersion
  uint8_t secret[kSecretBytes];  // proves a hello comes from a holder of the id; appears in no name
  uint64_t socket_tag;           // names the socket (socketName), which every user can see
  uint64_t nonce;                // names the communicator's other resources and tells ids apart
  uint8_t reserved[88];          // zero
};
static_assert(sizeof(BootstrapId) == sizeof(tpsUniqueId), "the id's contents fill tpsUniqueId");

// A rank's first message to rank 0.
struct Hello {
  uint32_t magic;    // kBootstrapMagic
  uint32_t version;  // kBootstrapVersion
  uint32_t nranks;
  uint32_t rank;
  uint32_t pid;  // for rank 0's messages only: rank 0 logs the kernel's pid (SO_PEERCRED), not this
  uint32_t reserved;
  uint8_t secret[kSecretBytes];
};
static_assert(sizeof(Hello) == 40, "the hello's layout is the wire format");

// Rank 0's answer to a hello (the join's outcome, or why a connection is refused) and to the headers
// of an all-gather (whether the blobs may travel).
struct Verdict {
  int32_t status;  // tpsResult_t
  char message[236];
};
static_assert(sizeof(Verdict) == 240, "the verdict's layout is the wire format");

// What each rank sends rank 0 before an all-gather's blob.
struct GatherHeader {
  uint32_t magic;  // kBootstrapMagic
  uint32_t reserved;
  uint64_t bytes;  // this rank's blob size
};
static_assert(sizeof(GatherHeader) == 16, "the header's layout is the wire format");

// The name of the id's socket: "@tpscope-bootstrap-<tag as 16 hex digits>" ('@' stands for the leading
// NUL of an abstract address).
std::string socketName(uint64_t socket_tag);

// The id's contents; false (with *why) for bytes that are no id of this build: another magic, another
// version, or reserved bytes that are not zero.
bool parseBootstrapId(const void* data, size_t len, BootstrapId* out, std::string* why);

// A hello from len bytes; false (with *why) when len is not sizeof(Hello) or the magic, version or
// reserved field is wrong.
bool parseHello(const void* data, size_t len, Hello* out, std::string* why);

// Equal secrets, compared in time that does not depend on where they differ.
bool secretsEqual(const uint8_t* a, const uint8_t* b);

// What rank 0 does with a parsed hello.
enum class HelloDecision {
  kRefuse,    // not proven: the connection is closed, the join goes on
  kAccept,    // a rank: its connection becomes peers[rank]
  kDisagree,  // a proven rank whose nranks or rank number conflicts: the join fails on every rank
};
// Judges a hello against the id and the ranks joined so far (taken[q]: rank q has joined; taken.size()
// is rank 0's nranks). The secret is checked first, so a peer that does not hold the id learns nothing
// of the communicator's shape. *why says what was wrong for kRefuse and kDisagree.
HelloDecision judgeHello(const Hello& hello, const BootstrapId& id, const std::vector<bool>& taken, std::string* why);

// A verdict from len bytes: false (with *why) when len is not sizeof(Verdict) or the status is no
// tpsResult_t. *status and *message (NUL-terminated within the message field, or cut there) on success.
bool parseVerdict(const void* data, size_t len, tpsResult_t* status, std::string* message, std::string* why);
// The verdict's bytes for a status and a message (cut to fit).
Verdict makeVerdict(tpsResult_t status, const std::string& message);

// Checks rank `rank`'s all-gather header (len bytes) against rank 0's own blob size: tpsSuccess, or
// tpsInvalidArgument with *why naming the rank and the sizes (a size over kMaxGatherBytes, another
// size than rank 0's, or bytes that are no header).
tpsResult_t checkGatherHeader(const void* data, size_t len, uint64_t expected_bytes, int rank, std::string* why);

// Whether a peer of `uid` may be a rank: it is `own` (this process's effective uid) or one of `peers`.
bool uidAllowed(uint32_t uid, uint32_t own, const std::vector<uint32_t>& peers);

}  // namespace tpscope::detail
