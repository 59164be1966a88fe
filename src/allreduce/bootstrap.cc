// SPDX-License-Identifier: Apache-2.0
// bootstrap.cc - the rank-per-process join over a Unix socket (bootstrap.h has the protocol).
#include "allreduce/bootstrap.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "common/checks.h"
#include "common/log.h"

namespace tpscope::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Messages on the wire (one host, so native byte order and layout).
struct Hello {
  uint32_t magic;
  uint32_t nranks;
  uint32_t rank;
  uint32_t pid;
  uint64_t nonce;
};
struct Verdict {
  int32_t status;  // tpsResult_t
  char message[236];
};
struct GatherHeader {
  uint64_t bytes;
  int32_t status;  // from rank 0: tpsSuccess, or the error every rank reports
  uint32_t pad;
};

// The (id, rank) pairs this process has joined as (bootstrap.h: an id is used once).
std::mutex& usedMutex() {
  static std::mutex m;
  return m;
}
std::set<std::pair<uint64_t, int>>& usedIds() {
  static std::set<std::pair<uint64_t, int>> s;
  return s;
}

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

// Moves exactly len bytes by the deadline: tpsTimeout when it passes, tpsSystemError on a socket error
// or when the other end has closed.
tpsResult_t transfer(int fd, void* buf, size_t len, bool send_it, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    pollfd pfd{fd, static_cast<short>(send_it ? POLLOUT : POLLIN), 0};
    const int ready = poll(&pfd, 1, msLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return tpsSystemError;
    if (ready == 0) return tpsTimeout;
    // Non-blocking either way: poll() alone does not keep a large send from blocking past the deadline.
    const ssize_t n = send_it ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return tpsSystemError;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return tpsSuccess;
}

// The abstract address of an id's socket ('@' in the name stands for the leading NUL).
socklen_t socketAddress(const BootstrapId& id, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t len = strnlen(id.socket, sizeof(id.socket));
  std::memcpy(addr->sun_path, id.socket, len);
  addr->sun_path[0] = '\0';
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
}

tpsResult_t fail(std::string* error, tpsResult_t code, std::string message) {
  if (error) *error = std::move(message);
  return code;
}

void sendVerdict(int fd, tpsResult_t status, const std::string& message, Clock::time_point deadline) {
  Verdict v{};
  v.status = status;
  std::snprintf(v.message, sizeof(v.message), "%s", message.c_str());
  (void)transfer(fd, &v, sizeof(v), true, deadline);
}

}  // namespace

tpsResult_t makeBootstrapId(tpsUniqueId* id) {
  BootstrapId b{};
  b.magic = kBootstrapMagic;
  b.version = kBootstrapVersion;
  if (getrandom(&b.nonce, sizeof(b.nonce), 0) != static_cast<ssize_t>(sizeof(b.nonce))) {
    // No entropy source: time and pid still make a collision between live ids improbable.
    b.nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull ^ getpid();
  }
  std::snprintf(b.socket, sizeof(b.socket), "@tpscope-bootstrap-%016llx", static_cast<unsigned long long>(b.nonce));
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id, &b, sizeof(b));
  return tpsSuccess;
}

tpsResult_t parseBootstrapId(const tpsUniqueId& id, BootstrapId* out, std::string* error) {
  std::memcpy(out, &id, sizeof(*out));
  if (out->magic != kBootstrapMagic)
    return fail(error, tpsInvalidArgument, "the id was not made by tpsGetUniqueId (or was not copied whole)");
  if (out->version != kBootstrapVersion)
    return fail(error, tpsInvalidArgument,
                fmt::format("the id is of version {}, this library speaks {}", out->version, kBootstrapVersion));
  if (out->socket[0] != '@' || strnlen(out->socket, sizeof(out->socket)) == sizeof(out->socket))
    return fail(error, tpsInvalidArgument, "the id's socket name is malformed");
  return tpsSuccess;
}

Bootstrap::~Bootstrap() {
  for (int fd : peers_)
    if (fd >= 0) close(fd);
}

tpsResult_t Bootstrap::join(const tpsUniqueId& raw_id, int nranks, int rank, unsigned timeout_ms,
                            std::unique_ptr<Bootstrap>* out, std::string* error) {
  BootstrapId id{};
  if (parseBootstrapId(raw_id, &id, error) != tpsSuccess) return tpsInvalidArgument;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(error, tpsInvalidArgument, fmt::format("rank {} is outside 0..{}", rank, nranks - 1));
  {
    std::lock_guard<std::mutex> lock(usedMutex());
    if (!usedIds().insert({id.nonce, rank}).second)
      return fail(error, tpsInvalidUsage,
                  fmt::format("this process already joined a communicator with this id as rank {}; every "
                              "communicator needs a new id from tpsGetUniqueId",
                              rank));
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_ptr<Bootstrap> b(new Bootstrap);
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->nonce_ = id.nonce;
  b->timeout_ms_ = timeout_ms;
  sockaddr_un addr;
  const socklen_t addr_len = socketAddress(id, &addr);

  if (rank != 0) {
    b->peers_.assign(1, -1);
    // Rank 0 may not listen yet: retry until it does or the deadline passes.
    for (;;) {
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return fail(error, tpsSystemError, fmt::format("socket(): {}", std::strerror(errno)));
      if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len) == 0) {
        b->peers_[0] = fd;
        break;
      }
      const int err = errno;
      close(fd);
      if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EINTR)
        return fail(error, tpsSystemError, fmt::format("connect() to rank 0: {}", std::strerror(err)));
      if (msLeft(deadline) == 0)
        return fail(error, tpsTimeout, fmt::format("rank 0 did not open the communicator within {} ms", timeout_ms));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Hello h{kBootstrapMagic, static_cast<uint32_t>(nranks), static_cast<uint32_t>(rank),
            static_cast<uint32_t>(getpid()), id.nonce};
    tpsResult_t r = transfer(b->peers_[0], &h, sizeof(h), true, deadline);
    Verdict v{};
    if (r == tpsSuccess) r = transfer(b->peers_[0], &v, sizeof(v), false, deadline);
    if (r == tpsTimeout)
      return fail(error, tpsTimeout, fmt::format("the other ranks did not all join within {} ms", timeout_ms));
    if (r != tpsSuccess) return fail(error, r, "rank 0 closed the connection during the join (did it exit?)");
    if (v.status != tpsSuccess) {
      v.message[sizeof(v.message) - 1] = '\0';
      return fail(error, static_cast<tpsResult_t>(v.status), v.message);
    }
    *out = std::move(b);
    return tpsSuccess;
  }

  // Rank 0: listen, accept until every rank has said hello, then tell everyone the outcome.
  const int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) return fail(error, tpsSystemError, fmt::format("socket(): {}", std::strerror(errno)));
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
    const int err = errno;
    close(lfd);
    if (err == EADDRINUSE)
      return fail(error, tpsInvalidUsage,
                  "another rank 0 already opened a communicator with this id; every communicator needs a new id");
    return fail(error, tpsSystemError, fmt::format("bind(): {}", std::strerror(err)));
  }
  if (listen(lfd, 64) != 0) {
    const int err = errno;
    close(lfd);
    return fail(error, tpsSystemError, fmt::format("listen(): {}", std::strerror(err)));
  }
  b->peers_.assign(nranks, -1);
  std::vector<int> strays;  // connections that said no valid hello (closed at the end)
  tpsResult_t status = tpsSuccess;
  std::string message;
  int joined = 1;
  while (joined < nranks && status == tpsSuccess) {
    pollfd pfd{lfd, POLLIN, 0};
    const int ready = poll(&pfd, 1, msLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      std::string missing;
      for (int q = 1; q < nranks; ++q)
        if (b->peers_[q] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      status = tpsTimeout;
      message = fmt::format("rank(s) {} of {} did not join within {} ms", missing, nranks, timeout_ms);
      break;
    }
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) continue;
      status = tpsSystemError;
      message = fmt::format("accept(): {}", std::strerror(errno));
      break;
    }
    Hello h{};
    if (transfer(fd, &h, sizeof(h), false, deadline) != tpsSuccess || h.magic != kBootstrapMagic ||
        h.nonce != id.nonce) {
      strays.push_back(fd);
      continue;
    }
    const int q = static_cast<int>(h.rank);
    if (static_cast<int>(h.nranks) != nranks) {
      status = tpsInvalidArgument;
      message = fmt::format(
          "ranks disagree on the communicator's size: rank {} (pid {}) was given nranks {}, rank 0 "
          "nranks {}",
          q, h.pid, h.nranks, nranks);
      strays.push_back(fd);
      sendVerdict(fd, status, message, deadline);
      break;
    }
    if (q <= 0 || q >= nranks || b->peers_[q] >= 0) {
      status = tpsInvalidArgument;
      message =
          fmt::format("rank {} joined twice (the second from pid {}); every process needs its own rank", q, h.pid);
      strays.push_back(fd);
      sendVerdict(fd, status, message, deadline);
      break;
    }
    b->peers_[q] = fd;
    ++joined;
  }
  close(lfd);  // the name disappears with the socket: later joiners of this id find no rank 0
  for (int q = 1; q < nranks; ++q)
    if (b->peers_[q] >= 0) sendVerdict(b->peers_[q], status, message, deadline);
  for (int fd : strays) close(fd);
  if (status != tpsSuccess) return fail(error, status, message);
  *out = std::move(b);
  return tpsSuccess;
}

tpsResult_t Bootstrap::allGather(void* all, size_t bytes, std::string* error) {
  char* data = static_cast<char*>(all);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  auto io = [&](tpsResult_t r, int q) {
    if (r == tpsTimeout)
      return fail(error, r, fmt::format("rank {} did not take part in an exchange within {} ms", q, timeout_ms_));
    if (r != tpsSuccess) return fail(error, r, fmt::format("rank {} closed its connection (did it exit?)", q));
    return tpsSuccess;
  };
  if (nranks_ == 1) return tpsSuccess;
  if (rank_ != 0) {
    GatherHeader hd{bytes, tpsSuccess, 0};
    TPS_CHECK(io(transfer(peers_[0], &hd, sizeof(hd), true, deadline), 0));
    TPS_CHECK(io(transfer(peers_[0], data + rank_ * bytes, bytes, true, deadline), 0));
    GatherHeader reply{};
    TPS_CHECK(io(transfer(peers_[0], &reply, sizeof(reply), false, deadline), 0));
    if (reply.status != tpsSuccess)
      return fail(error, static_cast<tpsResult_t>(reply.status), "the ranks passed blobs of different sizes");
    return io(transfer(peers_[0], data, bytes * nranks_, false, deadline), 0);
  }
  tpsResult_t status = tpsSuccess;
  for (int q = 1; q < nranks_; ++q) {
    GatherHeader hd{};
    TPS_CHECK(io(transfer(peers_[q], &hd, sizeof(hd), false, deadline), q));
    if (hd.bytes != bytes) {
      // Read the blob anyway and drop it: a socket closed with unread data resets the connection,
      // and the peer would see "closed" instead of the verdict sent below.
      status = tpsInvalidArgument;
      std::vector<char> scratch(std::min<uint64_t>(hd.bytes, 1 << 16));
      for (uint64_t left = hd.bytes; left > 0 && !scratch.empty();) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, scratch.size()));
        TPS_CHECK(io(transfer(peers_[q], scratch.data(), n, false, deadline), q));
        left -= n;
      }
      continue;
    }
    TPS_CHECK(io(transfer(peers_[q], data + q * bytes, bytes, false, deadline), q));
  }
  GatherHeader reply{bytes, status, 0};
  for (int q = 1; q < nranks_; ++q) {
    TPS_CHECK(io(transfer(peers_[q], &reply, sizeof(reply), true, deadline), q));
    if (status == tpsSuccess) TPS_CHECK(io(transfer(peers_[q], data, bytes * nranks_, true, deadline), q));
  }
  if (status != tpsSuccess) return fail(error, status, "the ranks passed blobs of different sizes");
  return tpsSuccess;
}

tpsResult_t Bootstrap::barrier(std::string* error) {
  std::vector<char> none(nranks_, 0);
  return allGather(none.data(), 1, error);
}

}  // namespace tpscope::detail
