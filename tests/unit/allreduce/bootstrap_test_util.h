// SPDX-License-Identifier: Apache-2.0
// bootstrap_test_util.h - what the bootstrap tests share: ranks that join and all-gather (on threads or
// in forked processes), and a raw peer that speaks the wire protocol by hand (a stray, an attacker, or
// a proven rank that misbehaves afterwards).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allreduce/bootstrap.h"
#include "tpscope/tpscope.h"

namespace bootstrap_test {

using tpscope::detail::Bootstrap;
using tpscope::detail::BootstrapId;
using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Outcome {
  tpsResult_t result = tpsInternalError;
  std::string error;
  std::vector<int> gathered;  // every rank's blob (its rank x 10 + 1) after one all-gather
  double seconds = 0;
};

// Joins as `rank` of `nranks` and, once joined, all-gathers one int per rank.
inline Outcome joinAndGather(const tpsUniqueId& id, int nranks, int rank, unsigned timeout_ms,
                             const std::vector<uint32_t>& peer_uids = {}) {
  Outcome o;
  const auto t0 = Clock::now();
  std::unique_ptr<Bootstrap> b;
  o.result = Bootstrap::join(id, nranks, rank, timeout_ms, peer_uids, &b, &o.error);
  if (o.result == tpsSuccess) {
    o.gathered.assign(nranks, 0);
    o.gathered[rank] = rank * 10 + 1;
    o.result = b->allGather(o.gathered.data(), sizeof(int), &o.error);
  }
  o.seconds = secondsSince(t0);
  return o;
}

inline std::vector<int> expectedGather(int nranks) {
  std::vector<int> v;
  for (int q = 0; q < nranks; ++q) v.push_back(q * 10 + 1);
  return v;
}

// Runs the given (nranks, rank) joins on threads, all with one id.
inline std::vector<Outcome> runThreads(const tpsUniqueId& id, const std::vector<std::pair<int, int>>& joins,
                                       unsigned timeout_ms) {
  std::vector<Outcome> out(joins.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < joins.size(); ++i)
    threads.emplace_back([&, i] { out[i] = joinAndGather(id, joins[i].first, joins[i].second, timeout_ms); });
  for (auto& t : threads) t.join();
  return out;
}

inline tpsUniqueId freshId() {
  tpsUniqueId id;
  if (tpsGetUniqueId(&id) != tpsSuccess) std::memset(&id, 0, sizeof(id));
  return id;
}

inline BootstrapId contents(const tpsUniqueId& id) {
  BootstrapId b{};
  std::memcpy(&b, &id, sizeof(b));
  return b;
}

// The id's socket name, as rank 0 binds it.
inline std::string nameOf(const tpsUniqueId& id) { return tpscope::detail::socketName(contents(id).socket_tag); }

// A connected socket to an abstract name ("@..."), retrying until the name listens or timeout_ms
// passes; -1 then.
inline int connectTo(const std::string& name, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), std::min(name.size(), sizeof(addr.sun_path)));
  addr.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  const auto t0 = Clock::now();
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
    close(fd);
    if (secondsSince(t0) * 1000 > timeout_ms) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// A hello as a rank sends it; with_secret false leaves the secret zero (what a process without the id has).
inline tpscope::detail::Hello helloFor(const tpsUniqueId& id, uint32_t nranks, uint32_t rank, bool with_secret) {
  tpscope::detail::Hello h{tpscope::detail::kBootstrapMagic,
                           tpscope::detail::kBootstrapVersion,
                           nranks,
                           rank,
                           static_cast<uint32_t>(getpid()),
                           0,
                           {}};
  if (with_secret) std::memcpy(h.secret, contents(id).secret, sizeof(h.secret));
  return h;
}

inline bool sendAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// What a peer saw of rank 0 within a time: nothing yet, a verdict, or the connection closed.
struct Answer {
  enum Kind { kNothing, kVerdict, kClosed } kind = kNothing;
  tpsResult_t status = tpsInternalError;
  std::string message;
  double seconds = 0;  // until it came
};

inline Answer awaitAnswer(int fd, int timeout_ms) {
  Answer a;
  const auto t0 = Clock::now();
  char buf[sizeof(tpscope::detail::Verdict)];
  size_t got = 0;
  while (got < sizeof(buf)) {
    const int left = timeout_ms - static_cast<int>(secondsSince(t0) * 1000);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return a;
    const ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
    if (n <= 0) {
      a.kind = Answer::kClosed;
      a.seconds = secondsSince(t0);
      return a;
    }
    got += static_cast<size_t>(n);
  }
  std::string why;
  a.kind =
      tpscope::detail::parseVerdict(buf, sizeof(buf), &a.status, &a.message, &why) ? Answer::kVerdict : Answer::kClosed;
  a.seconds = secondsSince(t0);
  return a;
}

}  // namespace bootstrap_test
