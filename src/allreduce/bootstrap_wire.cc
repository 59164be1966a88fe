// SPDX-License-Identifier: Apache-2.0
// bootstrap_wire.cc - parsing and judging the join's bytes (bootstrap_wire.h); no sockets here.
#include "allreduce/bootstrap_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace tpscope::detail {

namespace {

bool fail(std::string* why, std::string message) {
  if (why) *why = std::move(message);
  return false;
}

bool allZero(const uint8_t* p, size_t n) {
  uint8_t any = 0;
  for (size_t i = 0; i < n; ++i) any |= p[i];
  return any == 0;
}

}  // namespace

std::string socketName(uint64_t socket_tag) { return fmt::format("@tpscope-bootstrap-{:016x}", socket_tag); }

bool parseBootstrapId(const void* data, size_t len, BootstrapId* out, std::string* why) {
  if (len != sizeof(BootstrapId))
    return fail(why, fmt::format("{} bytes are no id (an id has {})", len, sizeof(BootstrapId)));
  std::memcpy(out, data, sizeof(*out));
  if (out->magic != kBootstrapMagic)
    return fail(why, "the id was not made by tpsGetUniqueId (or was not copied whole)");
  if (out->version != kBootstrapVersion)
    return fail(why, fmt::format("the id is of version {}, this library speaks {}", out->version, kBootstrapVersion));
  if (!allZero(out->reserved, sizeof(out->reserved)))
    return fail(why, "the id's reserved bytes are not zero (it was not copied whole, or was altered)");
  return true;
}

bool parseHello(const void* data, size_t len, Hello* out, std::string* why) {
  if (len != sizeof(Hello)) return fail(why, fmt::format("a hello of {} bytes, not {}", len, sizeof(Hello)));
  std::memcpy(out, data, sizeof(*out));
  if (out->magic != kBootstrapMagic) return fail(why, "no tpscope hello (wrong magic)");
  if (out->version != kBootstrapVersion)
    return fail(why, fmt::format("a hello of protocol version {}, not {}", out->version, kBootstrapVersion));
  if (out->reserved != 0) return fail(why, "a hello whose reserved field is not zero");
  return true;
}

bool secretsEqual(const uint8_t* a, const uint8_t* b) {
  // Every byte is read whatever the others hold; volatile keeps the compiler from stopping early.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff = diff | static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

HelloDecision judgeHello(const Hello& hello, const BootstrapId& id, const std::vector<bool>& taken, std::string* why) {
  if (!secretsEqual(hello.secret, id.secret)) {
    fail(why, "its hello does not prove the id's secret");
    return HelloDecision::kRefuse;
  }
  const size_t nranks = taken.size();
  if (hello.nranks != nranks) {
    fail(why, fmt::format("ranks disagree on the communicator's size: rank {} (pid {}) was given nranks {}, rank 0 "
                          "nranks {}",
                          hello.rank, hello.pid, hello.nranks, nranks));
    return HelloDecision::kDisagree;
  }
  if (hello.rank == 0 || hello.rank >= nranks) {
    fail(why, fmt::format("a rank (pid {}) says it is rank {}, outside 1..{}", hello.pid, hello.rank, nranks - 1));
    return HelloDecision::kDisagree;
  }
  if (taken[hello.rank]) {
    fail(why, fmt::format("rank {} joined twice (the second from pid {}); every process needs its own rank", hello.rank,
                          hello.pid));
    return HelloDecision::kDisagree;
  }
  return HelloDecision::kAccept;
}

bool parseVerdict(const void* data, size_t len, tpsResult_t* status, std::string* message, std::string* why) {
  if (len != sizeof(Verdict)) return fail(why, fmt::format("a verdict of {} bytes, not {}", len, sizeof(Verdict)));
  Verdict v;
  std::memcpy(&v, data, sizeof(v));
  if (v.status < 0 || v.status >= tpsNumResults)
    return fail(why, fmt::format("rank 0 answered with status {}, which is no tpsResult_t", v.status));
  *status = static_cast<tpsResult_t>(v.status);
  message->assign(v.message, strnlen(v.message, sizeof(v.message)));
  return true;
}

Verdict makeVerdict(tpsResult_t status, const std::string& message) {
  Verdict v{};
  v.status = status;
  const size_t n = std::min(message.size(), sizeof(v.message) - 1);
  std::memcpy(v.message, message.data(), n);
  return v;
}

tpsResult_t checkGatherHeader(const void* data, size_t len, uint64_t expected_bytes, int rank, std::string* why) {
  GatherHeader h;
  if (len != sizeof(h)) {
    fail(why, fmt::format("rank {} sent an exchange header of {} bytes, not {}", rank, len, sizeof(h)));
    return tpsInvalidArgument;
  }
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != kBootstrapMagic || h.reserved != 0) {
    fail(why, fmt::format("rank {} sent bytes that are no exchange header", rank));
    return tpsInvalidArgument;
  }
  if (h.bytes > kMaxGatherBytes) {
    fail(why, fmt::format("rank {} passed a blob of {} bytes to an exchange, more than its limit of {}", rank, h.bytes,
                          kMaxGatherBytes));
    return tpsInvalidArgument;
  }
  if (h.bytes != expected_bytes) {
    fail(why, fmt::format("the ranks passed blobs of different sizes: rank {} {} bytes, rank 0 {}", rank, h.bytes,
                          expected_bytes));
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

bool uidAllowed(uint32_t uid, uint32_t own, const std::vector<uint32_t>& peers) {
  return uid == own || std::find(peers.begin(), peers.end(), uid) != peers.end();
}

}  // namespace tpscope::detail
