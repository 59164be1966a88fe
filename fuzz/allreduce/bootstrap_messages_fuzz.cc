// SPDX-License-Identifier: Apache-2.0
// bootstrap_messages_fuzz - the join's wire messages through the pure checks rank 0 and the ranks make
// of them (bootstrap_wire.h): a hello judged against an id and the ranks joined so far, a verdict, an
// all-gather header. The first byte picks the message; the rest is its bytes. Invariants: nothing is
// accepted without the id's secret, an accepted hello names a free rank in range, a parsed verdict has
// a status that is a tpsResult_t and a message that fits its field, and an accepted header has the
// expected size within kMaxGatherBytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce/bootstrap_wire.h"

using namespace tpscope::detail;

namespace {

// A fixed id: its secret is what a hello must prove (the fuzzer can find it only by comparing).
BootstrapId fixedId() {
  BootstrapId id{};
  id.magic = kBootstrapMagic;
  id.version = kBootstrapVersion;
  std::memcpy(id.secret, "tpscope-fuzz-key", kSecretBytes);
  id.socket_tag = 0x1122334455667788ull;
  id.nonce = 42;
  return id;
}

void hello(const uint8_t* data, size_t size) {
  // [nranks 1..8][joined ranks as bits][hello bytes]
  if (size < 2) return;
  const size_t nranks = 1 + data[0] % TPS_MAX_DEVICES;
  std::vector<bool> taken(nranks, false);
  taken[0] = true;
  for (size_t q = 1; q < nranks; ++q) taken[q] = (data[1] >> q) & 1;
  data += 2;
  size -= 2;
  Hello h{};
  std::string why;
  if (!parseHello(data, size, &h, &why)) {
    if (why.empty()) std::abort();
    return;
  }
  if (size != sizeof(Hello) || h.magic != kBootstrapMagic || h.version != kBootstrapVersion || h.reserved != 0)
    std::abort();
  const BootstrapId id = fixedId();
  why.clear();
  const HelloDecision d = judgeHello(h, id, taken, &why);
  const bool proven = std::memcmp(h.secret, id.secret, kSecretBytes) == 0;
  if (d != HelloDecision::kRefuse && !proven) std::abort();  // nothing counts without the secret
  if (d == HelloDecision::kRefuse && proven) std::abort();
  if (d == HelloDecision::kAccept && (h.nranks != nranks || h.rank == 0 || h.rank >= nranks || taken[h.rank]))
    std::abort();
  if (d != HelloDecision::kAccept && why.empty()) std::abort();
}

void verdict(const uint8_t* data, size_t size) {
  tpsResult_t status = tpsInternalError;
  std::string message, why;
  if (!parseVerdict(data, size, &status, &message, &why)) {
    if (why.empty()) std::abort();
    return;
  }
  if (status < 0 || status >= tpsNumResults || message.size() > sizeof(Verdict::message)) std::abort();
  if (message.find('\0') != std::string::npos) std::abort();
  // What makeVerdict writes parses back to itself.
  const Verdict v = makeVerdict(status, message);
  tpsResult_t s2 = tpsInternalError;
  std::string m2;
  if (!parseVerdict(&v, sizeof(v), &s2, &m2, &why) || s2 != status || m2 != message.substr(0, sizeof(v.message) - 1))
    std::abort();
}

void gatherHeader(const uint8_t* data, size_t size) {
  // [expected size, 8 bytes][rank, 1 byte][header bytes]
  if (size < 9) return;
  uint64_t expected = 0;
  std::memcpy(&expected, data, sizeof(expected));
  const int rank = data[8] % TPS_MAX_DEVICES;
  std::string why;
  const tpsResult_t r = checkGatherHeader(data + 9, size - 9, expected, rank, &why);
  if (r != tpsSuccess) {
    if (r != tpsInvalidArgument || why.empty()) std::abort();
    return;
  }
  GatherHeader h{};
  if (size - 9 != sizeof(h)) std::abort();
  std::memcpy(&h, data + 9, sizeof(h));
  if (h.magic != kBootstrapMagic || h.bytes != expected || h.bytes > kMaxGatherBytes) std::abort();
}

void uids(const uint8_t* data, size_t size) {
  // [uid][own][peers...], 4 bytes each
  if (size < 8) return;
  uint32_t uid = 0, own = 0;
  std::memcpy(&uid, data, 4);
  std::memcpy(&own, data + 4, 4);
  std::vector<uint32_t> peers((size - 8) / 4);
  if (!peers.empty()) std::memcpy(peers.data(), data + 8, peers.size() * 4);
  bool listed = uid == own;
  for (uint32_t p : peers) listed = listed || p == uid;
  if (uidAllowed(uid, own, peers) != listed) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 4) {
    case 0: hello(data + 1, size - 1); break;
    case 1: verdict(data + 1, size - 1); break;
    case 2: gatherHeader(data + 1, size - 1); break;
    default: uids(data + 1, size - 1); break;
  }
  return 0;
}
