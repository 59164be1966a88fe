// SPDX-License-Identifier: Apache-2.0
// bootstrap.cc - the rank-per-process join over a Unix socket (bootstrap.h has the protocol,
// bootstrap_wire.cc the checks of every message).
#include "allreduce/bootstrap.h"

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
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/checks.h"
#include "common/log.h"

namespace tpscope::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Refusals logged one by one per join; past that, one line at the end gives the count (a flood of
// strays must not flood the log).
constexpr int kMaxRefusalLogs = 16;
// Connections accepted per turn of rank 0's loop: a flood of them cannot keep it from its deadline and
// its pending hellos, and half the cap means a connection accepted in one turn is still waiting when the
// next turn reads the hellos that have come (a real rank's comes right after its connect).
constexpr int kMaxAcceptsPerTurn = static_cast<int>(kMaxPending / 2);

// How much longer than the timeout the ranks other than 0 wait for rank 0's verdict: rank 0 gives up
// at the timeout and then tells them why, so that every rank reports the same cause.
std::chrono::milliseconds verdictGrace(unsigned timeout_ms) {
  return std::chrono::milliseconds(std::min(timeout_ms / 4, 1000u));
}

// The (id, rank) pairs this process has joined as (bootstrap.h: an id is used once).
std::mutex& usedMutex() {
  static std::mutex m;
  return m;
}
std::set<std::pair<uint64_t, int>>& usedIds() {
  static std::set<std::pair<uint64_t, int>> s;
  return s;
}

// Milliseconds to the deadline, rounded up so that a poll() with it does not return just before.
int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, (left + 999) / 1000));
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

// n bytes from getrandom(); false when the system gives none.
bool randomBytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// The abstract address of a socket name ('@' in the name stands for the leading NUL).
socklen_t socketAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t len = std::min(name.size(), sizeof(addr->sun_path));
  std::memcpy(addr->sun_path, name.data(), len);
  addr->sun_path[0] = '\0';
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
}

tpsResult_t fail(std::string* error, tpsResult_t code, std::string message) {
  if (error) *error = std::move(message);
  return code;
}

// Who is at the other end of a connected Unix socket, as the kernel recorded it (at connect() for the
// accepted end, at listen() for the connecting end).
struct PeerCred {
  uint32_t pid = 0, uid = 0;
};
bool peerCred(int fd, PeerCred* out) {
  ucred c{};
  socklen_t len = sizeof(c);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0 || len != sizeof(c)) return false;
  out->pid = static_cast<uint32_t>(c.pid);
  out->uid = static_cast<uint32_t>(c.uid);
  return true;
}

std::string acceptedUids(uint32_t own, const std::vector<uint32_t>& peers) {
  std::string s = std::to_string(own);
  for (uint32_t u : peers) s += ", " + std::to_string(u);
  return s;
}

void sendVerdict(int fd, tpsResult_t status, const std::string& message, Clock::time_point deadline) {
  Verdict v = makeVerdict(status, message);
  (void)transfer(fd, &v, sizeof(v), true, deadline);
}

// A connection that has not yet proven itself, in rank 0's loop.
struct Pending {
  int fd = -1;
  Clock::time_point deadline;  // for its whole hello
  PeerCred cred;
  size_t got = 0;
  unsigned char hello[sizeof(Hello)] = {};
};

}  // namespace

tpsResult_t makeBootstrapId(tpsUniqueId* id) {
  BootstrapId b{};
  b.magic = kBootstrapMagic;
  b.version = kBootstrapVersion;
  // Three draws: the socket's name (public) and the nonce tell nothing of the secret, nor of each other.
  const bool ok = randomBytes(b.secret, sizeof(b.secret)) && randomBytes(&b.socket_tag, sizeof(b.socket_tag)) &&
                  randomBytes(&b.nonce, sizeof(b.nonce));
  if (!ok) {
    const int err = errno;
    explicit_bzero(&b, sizeof(b));
    TPS_LOG_WARN("tpsGetUniqueId: getrandom() gives no random bytes ({}); an id needs a secret no one can guess",
                 std::strerror(err));
    return tpsSystemError;
  }
  std::memcpy(id, &b, sizeof(b));
  explicit_bzero(&b, sizeof(b));
  return tpsSuccess;
}

tpsResult_t parseBootstrapId(const tpsUniqueId& id, BootstrapId* out, std::string* error) {
  return parseBootstrapId(&id, sizeof(id), out, error) ? tpsSuccess : tpsInvalidArgument;
}

Bootstrap::~Bootstrap() {
  for (int fd : peers_)
    if (fd >= 0) close(fd);
}

tpsResult_t Bootstrap::join(const tpsUniqueId& raw_id, int nranks, int rank, unsigned timeout_ms,
                            const std::vector<uint32_t>& peer_uids, std::unique_ptr<Bootstrap>* out,
                            std::string* error) {
  BootstrapId id{};
  struct Wipe {  // the secret stays in this process no longer than the join
    BootstrapId& id;
    ~Wipe() { explicit_bzero(&id, sizeof(id)); }
  } wipe{id};
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
  TPS_CHECK(rank == 0 ? b->joinAsRankZero(id, peer_uids, deadline, error)
                      : b->joinAsPeer(id, peer_uids, deadline, error));
  *out = std::move(b);
  return tpsSuccess;
}

tpsResult_t Bootstrap::joinAsPeer(const BootstrapId& id, const std::vector<uint32_t>& peer_uids,
                                  Clock::time_point deadline, std::string* error) {
  peers_.assign(1, -1);
  // Rank 0 refuses a connection with tpsUnavailable when more wait for their hello than it keeps: this
  // rank then connects again, until the deadline.
  for (;;) {
    const tpsResult_t r = helloToRankZero(id, peer_uids, deadline, error);
    if (r != tpsUnavailable) return r;
    close(peers_[0]);
    peers_[0] = -1;
    if (msLeft(deadline) == 0)
      return fail(
          error, tpsTimeout,
          fmt::format("rank 0 was busy with other connections until the timeout of {} ms ({})", timeout_ms_, *error));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2, msLeft(deadline))));
  }
}

tpsResult_t Bootstrap::helloToRankZero(const BootstrapId& id, const std::vector<uint32_t>& peer_uids,
                                       Clock::time_point deadline, std::string* error) {
  sockaddr_un addr;
  const socklen_t addr_len = socketAddress(socketName(id.socket_tag), &addr);
  // Rank 0 may not listen yet: retry until it does or the deadline passes. Non-blocking, so a full
  // backlog is a retry (EAGAIN), not a wait without a bound.
  for (;;) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return fail(error, tpsSystemError, fmt::format("socket(): {}", std::strerror(errno)));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), addr_len) == 0) {
      peers_[0] = fd;
      break;
    }
    const int err = errno;
    close(fd);
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EINTR)
      return fail(error, tpsSystemError, fmt::format("connect() to rank 0: {}", std::strerror(err)));
    if (msLeft(deadline) == 0)
      return fail(error, tpsTimeout, fmt::format("rank 0 did not open the communicator within {} ms", timeout_ms_));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5, msLeft(deadline))));
  }
  const int fd = peers_[0];
  // The secret goes only to a listener of an accepted user (bootstrap.h says why that suffices).
  PeerCred cred;
  if (!peerCred(fd, &cred))
    return fail(error, tpsSystemError,
                fmt::format("cannot read the credentials of the process listening on the id's socket: {}",
                            std::strerror(errno)));
  if (!uidAllowed(cred.uid, static_cast<uint32_t>(geteuid()), peer_uids))
    return fail(error, tpsInvalidUsage,
                fmt::format("the process listening on the id's socket (pid {}, uid {}) runs as none of the users "
                            "this rank accepts (uid {}; tpsConfig_t.peer_uids names more); it is no rank 0 of this "
                            "communicator, and it was sent nothing",
                            cred.pid, cred.uid, acceptedUids(static_cast<uint32_t>(geteuid()), peer_uids)));
  Hello h{kBootstrapMagic,
          kBootstrapVersion,
          static_cast<uint32_t>(nranks_),
          static_cast<uint32_t>(rank_),
          static_cast<uint32_t>(getpid()),
          0,
          {}};
  std::memcpy(h.secret, id.secret, sizeof(h.secret));
  tpsResult_t r = transfer(fd, &h, sizeof(h), true, deadline);
  explicit_bzero(&h, sizeof(h));
  // Read the verdict even when the hello could not go out whole: rank 0 may have refused this rank
  // (and closed) before reading it, and its refusal still waits on the socket.
  Verdict v{};
  if (r != tpsTimeout) {
    const tpsResult_t got = transfer(fd, &v, sizeof(v), false, deadline + verdictGrace(timeout_ms_));
    r = got == tpsSuccess || r == tpsSuccess ? got : r;
  }
  if (r == tpsTimeout)
    return fail(error, tpsTimeout, fmt::format("the other ranks did not all join within {} ms", timeout_ms_));
  if (r != tpsSuccess) return fail(error, r, "rank 0 closed the connection during the join (did it exit?)");
  tpsResult_t status = tpsInternalError;
  std::string message, why;
  if (!parseVerdict(&v, sizeof(v), &status, &message, &why))
    return fail(error, tpsSystemError, "rank 0 answered the hello with bytes that are no verdict: " + why);
  if (status != tpsSuccess) return fail(error, status, message);
  return tpsSuccess;
}

tpsResult_t Bootstrap::joinAsRankZero(const BootstrapId& id, const std::vector<uint32_t>& peer_uids,
                                      Clock::time_point deadline, std::string* error) {
  sockaddr_un addr;
  const socklen_t addr_len = socketAddress(socketName(id.socket_tag), &addr);
  const int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) return fail(error, tpsSystemError, fmt::format("socket(): {}", std::strerror(errno)));
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
    const int err = errno;
    close(lfd);
    if (err == EADDRINUSE)
      return fail(error, tpsInvalidUsage,
                  "another process already listens on this id's socket (another rank 0 of this id); every "
                  "communicator needs a new id");
    return fail(error, tpsSystemError, fmt::format("bind(): {}", std::strerror(err)));
  }
  if (listen(lfd, 64) != 0) {
    const int err = errno;
    close(lfd);
    return fail(error, tpsSystemError, fmt::format("listen(): {}", std::strerror(err)));
  }
  const uint32_t own_uid = static_cast<uint32_t>(geteuid());
  peers_.assign(nranks_, -1);
  std::vector<bool> taken(nranks_, false);
  taken[0] = true;
  std::deque<Pending> pending;  // in the order they came
  std::vector<int> told;        // proven ranks that conflicted: sent the verdict, closed at the end
  int refused = 0;
  // A refusal: rank 0's log gets the kernel's pid and uid of the peer and the whole reason (`why`); the
  // peer, not proven to be anyone, gets `told` only, which names no process and no user.
  auto refuse = [&](int fd, const PeerCred& c, const std::string& why, tpsResult_t status, const std::string& told) {
    if (++refused <= kMaxRefusalLogs)
      TPS_LOG_WARN("tpsCommInitRank: rank 0 refused a connection from pid {} (uid {}): {}", c.pid, c.uid, why);
    // Only if the socket takes it at once: a refused peer may not be reading.
    const Verdict v = makeVerdict(status, "rank 0 refused this connection: " + told);
    (void)send(fd, &v, sizeof(v), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
  };
  // What a hello lacked names no process or user, so the peer is told that much.
  auto unproven = [&](int fd, const PeerCred& c, const std::string& why) { refuse(fd, c, why, tpsInvalidUsage, why); };

  tpsResult_t status = tpsSuccess;
  std::string message;
  int joined = 1;
  // Reads what p has sent so far and judges its hello once whole. true when p is settled (a rank, refused
  // or a disagreement) and leaves the pending set.
  auto readHello = [&](Pending& p) {
    const ssize_t n = recv(p.fd, p.hello + p.got, sizeof(p.hello) - p.got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n <= 0) {
      unproven(p.fd, p.cred,
               n == 0 ? "it closed before its whole hello" : fmt::format("recv(): {}", std::strerror(errno)));
      return true;
    }
    p.got += static_cast<size_t>(n);
    if (p.got < sizeof(p.hello)) return false;
    Hello h{};
    std::string why;
    HelloDecision d = HelloDecision::kRefuse;
    if (parseHello(p.hello, sizeof(p.hello), &h, &why)) d = judgeHello(h, id, taken, &why);
    explicit_bzero(p.hello, sizeof(p.hello));
    explicit_bzero(h.secret, sizeof(h.secret));
    if (d == HelloDecision::kRefuse) {
      unproven(p.fd, p.cred, why);
    } else if (d == HelloDecision::kDisagree) {
      status = tpsInvalidArgument;
      message = why;
      told.push_back(p.fd);
      sendVerdict(p.fd, status, message, deadline);
    } else {
      peers_[h.rank] = p.fd;
      taken[h.rank] = true;
      ++joined;
      TPS_LOG_INFO("tpsCommInitRank: rank {} joined (pid {}, uid {})", h.rank, p.cred.pid, p.cred.uid);
    }
    return true;
  };
  // Room for one more waiting connection. Every hello that has arrived is read first, so a rank that has
  // sent its hello is never pushed out; then, if the set is still full, the oldest connection of the
  // process that holds the most of them goes (a flood from a few processes never costs a rank its place,
  // each rank's process holding one), told to connect again: a rank pushed out before its hello went
  // out retries within the timeout (joinAsPeer).
  auto makeRoom = [&] {
    for (auto it = pending.begin(); it != pending.end() && status == tpsSuccess;)
      it = readHello(*it) ? pending.erase(it) : std::next(it);
    if (pending.size() < kMaxPending || status != tpsSuccess) return;
    std::map<uint32_t, size_t> per_pid;
    for (const Pending& p : pending) ++per_pid[p.cred.pid];
    auto victim = pending.begin();
    for (auto it = pending.begin(); it != pending.end(); ++it)
      if (per_pid[it->cred.pid] > per_pid[victim->cred.pid]) victim = it;
    refuse(victim->fd, victim->cred,
           fmt::format("more than {} connections waited for their hello at once, and it was the oldest of the "
                       "process that held the most of them ({})",
                       kMaxPending, per_pid[victim->cred.pid]),
           tpsUnavailable, "too many connections wait for their hello; connect again");
    pending.erase(victim);
  };
  while (joined < nranks_ && status == tpsSuccess) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      std::string missing;
      for (int q = 1; q < nranks_; ++q)
        if (!taken[q]) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      status = tpsTimeout;
      message = fmt::format("rank(s) {} of {} did not join within {} ms", missing, nranks_, timeout_ms_);
      if (refused > 0)
        message += fmt::format(" (rank 0 refused {} connection(s) from processes not proven to be ranks: see its log)",
                               refused);
      break;
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (now < it->deadline) {
        ++it;
        continue;
      }
      unproven(it->fd, it->cred, fmt::format("it sent no whole hello within {} ms of connecting", kHelloTimeoutMs));
      it = pending.erase(it);
    }
    std::vector<pollfd> fds{{lfd, POLLIN, 0}};
    int wait_ms = msLeft(deadline);
    for (const Pending& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      wait_ms = std::min(wait_ms, msLeft(p.deadline));
    }
    const int ready = poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      status = tpsSystemError;
      message = fmt::format("poll(): {}", std::strerror(errno));
      break;
    }
    // The hellos that arrived, in the order their connections came.
    size_t i = 1;
    for (auto it = pending.begin(); it != pending.end() && status == tpsSuccess; ++i)
      it = (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && readHello(*it) ? pending.erase(it) : std::next(it);
    if (status != tpsSuccess || joined == nranks_ || !(fds[0].revents & POLLIN)) continue;
    // New connections: the uid first, which costs a stray of another user nothing but its connection.
    for (int k = 0; k < kMaxAcceptsPerTurn && status == tpsSuccess; ++k) {
      const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        status = tpsSystemError;
        message = fmt::format("accept(): {}", std::strerror(errno));
        break;
      }
      PeerCred c;
      if (!peerCred(fd, &c)) {
        unproven(fd, c, fmt::format("its credentials cannot be read ({})", std::strerror(errno)));
        continue;
      }
      if (!uidAllowed(c.uid, own_uid, peer_uids)) {
        refuse(fd, c,
               fmt::format("uid {} is not one rank 0 accepts ({}; tpsConfig_t.peer_uids names more)", c.uid,
                           acceptedUids(own_uid, peer_uids)),
               tpsInvalidUsage, "its user is not one rank 0 accepts (rank 0's log says which it accepts)");
        continue;
      }
      if (pending.size() == kMaxPending) makeRoom();
      Pending p;
      p.fd = fd;
      p.deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(kHelloTimeoutMs));
      p.cred = c;
      pending.push_back(p);
    }
  }
  close(lfd);  // the name disappears with the socket: later joiners of this id find no rank 0
  for (const Pending& p : pending) close(p.fd);
  for (int q = 1; q < nranks_; ++q)
    if (peers_[q] >= 0) sendVerdict(peers_[q], status, message, deadline);
  for (int fd : told) close(fd);
  if (refused > kMaxRefusalLogs)
    TPS_LOG_WARN("tpsCommInitRank: rank 0 refused {} connections in all (the first {} are logged above)", refused,
                 kMaxRefusalLogs);
  if (status != tpsSuccess) return fail(error, status, message);
  return tpsSuccess;
}

tpsResult_t Bootstrap::allGather(void* all, size_t bytes, std::string* error) {
  if (nranks_ == 1) return tpsSuccess;
  char* data = static_cast<char*>(all);
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  if (rank_ == 0) return gatherAtRankZero(data, bytes, deadline, error);
  deadline += verdictGrace(timeout_ms_);
  auto io = [&](tpsResult_t r) {
    if (r == tpsTimeout)
      return fail(error, r, fmt::format("rank 0 did not take part in an exchange within {} ms", timeout_ms_));
    if (r != tpsSuccess) return fail(error, r, "rank 0 closed its connection (did it exit?)");
    return tpsSuccess;
  };
  // The size first; the blob only once rank 0 has found every size alike (bootstrap.h).
  // Read the verdict even when the header could not go out: rank 0 may have judged (on its own size, or
  // another rank's) and closed before this rank sent, and its verdict still waits on the socket.
  GatherHeader hd{kBootstrapMagic, 0, bytes};
  const tpsResult_t sent = transfer(peers_[0], &hd, sizeof(hd), true, deadline);
  if (sent == tpsTimeout) return io(sent);
  Verdict v{};
  const tpsResult_t got = transfer(peers_[0], &v, sizeof(v), false, deadline);
  if (got != tpsSuccess) return io(sent != tpsSuccess ? sent : got);
  tpsResult_t status = tpsInternalError;
  std::string message, why;
  if (!parseVerdict(&v, sizeof(v), &status, &message, &why))
    return fail(error, tpsSystemError, "rank 0 answered an exchange with bytes that are no verdict: " + why);
  if (status != tpsSuccess) return fail(error, status, message);
  // bytes <= kMaxGatherBytes now (rank 0 checked it), so neither product below overflows.
  TPS_CHECK(io(transfer(peers_[0], data + rank_ * bytes, bytes, true, deadline)));
  return io(transfer(peers_[0], data, bytes * nranks_, false, deadline));
}

tpsResult_t Bootstrap::gatherAtRankZero(char* data, size_t bytes, Clock::time_point deadline, std::string* error) {
  auto lost = [&](tpsResult_t r, int q) {
    return r == tpsTimeout ? fmt::format("rank {} did not take part in an exchange within {} ms", q, timeout_ms_)
                           : fmt::format("rank {} closed its connection (did it exit?)", q);
  };
  tpsResult_t status = tpsSuccess;
  std::string message;
  int gone = -1;  // the rank whose connection failed: no verdict for it
  if (bytes > kMaxGatherBytes) {
    status = tpsInvalidArgument;
    message = fmt::format("rank 0 passed a blob of {} bytes to an exchange, more than its limit of {}", bytes,
                          kMaxGatherBytes);
  }
  for (int q = 1; q < nranks_ && status == tpsSuccess; ++q) {
    GatherHeader hd{};
    const tpsResult_t r = transfer(peers_[q], &hd, sizeof(hd), false, deadline);
    if (r != tpsSuccess) {
      status = r;
      message = lost(r, q);
      gone = q;
      break;
    }
    status = checkGatherHeader(&hd, sizeof(hd), bytes, q, &message);
  }
  // Every rank learns the outcome before any blob travels; the ranks not yet heard from find the
  // verdict waiting when they send their header.
  for (int q = 1; q < nranks_; ++q) {
    if (q == gone) continue;
    Verdict v = makeVerdict(status, message);
    const tpsResult_t r = transfer(peers_[q], &v, sizeof(v), true, deadline);
    if (r != tpsSuccess && status == tpsSuccess) {
      status = r;
      message = lost(r, q);
    }
  }
  if (status != tpsSuccess) return fail(error, status, message);
  for (int q = 1; q < nranks_; ++q) {
    const tpsResult_t r = transfer(peers_[q], data + q * bytes, bytes, false, deadline);
    if (r != tpsSuccess) return fail(error, r, lost(r, q));
  }
  for (int q = 1; q < nranks_; ++q) {
    const tpsResult_t r = transfer(peers_[q], data, bytes * nranks_, true, deadline);
    if (r != tpsSuccess) return fail(error, r, lost(r, q));
  }
  return tpsSuccess;
}

tpsResult_t Bootstrap::barrier(std::string* error) {
  std::vector<char> none(nranks_, 0);
  return allGather(none.data(), 1, error);
}

}  // namespace tpscope::detail
