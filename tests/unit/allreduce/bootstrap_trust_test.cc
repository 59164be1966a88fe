// SPDX-License-Identifier: Apache-2.0
// bootstrap_trust_test - nobody joins uninvited, and nobody holds up the ranks that were invited:
// another user who finds the socket in /proc/net/unix (forked children that drop to uid 65534; the
// tests skip where this process cannot switch user), another user who holds the id, a listener of
// another user squatting the id's socket, processes of this user without the secret, and connections
// that send garbage, too much, part of a hello or nothing (more of them than rank 0 keeps waiting).
// Then the exchanges: sizes that disagree or are huge, from real ranks and from a proven peer that
// speaks the wire by hand, fail every rank at once with tpsInvalidArgument; a silent one, by the timeout.
#include <fmt/format.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/bootstrap.h"
#include "bootstrap_test_util.h"

namespace {

using namespace bootstrap_test;
using tpscope::detail::GatherHeader;
using tpscope::detail::kBootstrapMagic;
using tpscope::detail::kHelloTimeoutMs;
using tpscope::detail::kMaxGatherBytes;
using tpscope::detail::kMaxPending;

constexpr uid_t kOtherUid = 65534;  // nobody
// The other user's group differs from its uid (and from rank 0's group), so a check that read the gid
// where it should read the uid would fail these tests instead of passing by the coincidence uid == gid.
constexpr gid_t kOtherGid = 65533;

// Drops this (forked) process to uid 65534, gid 65533 for good; false where it cannot.
bool becomeOtherUser() {
  (void)setgroups(0, nullptr);
  return setresgid(kOtherGid, kOtherGid, kOtherGid) == 0 && setresuid(kOtherUid, kOtherUid, kOtherUid) == 0 &&
         geteuid() == kOtherUid && getuid() == kOtherUid && getegid() == kOtherGid && getgid() == kOtherGid;
}

int exitCode(pid_t pid) {
  int status = -1;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Why a child of this process cannot run as another user, or "" when it can.
std::string cannotSwitchUser() {
  if (geteuid() == kOtherUid) return "the tests already run as uid 65534";
  const pid_t pid = fork();
  if (pid == 0) _exit(becomeOtherUser() ? 0 : 77);
  if (pid < 0 || exitCode(pid) != 0)
    return "this process cannot switch a child to uid 65534, gid 65533 (setresuid needs root or CAP_SETUID)";
  return "";
}

#define SKIP_UNLESS_SWITCHING_USER()            \
  do {                                          \
    const std::string why = cannotSwitchUser(); \
    if (!why.empty()) GTEST_SKIP() << why;      \
  } while (0)

// A forked child that runs fn and exits with its result. Fork before starting threads: the child then
// holds no lock another thread had.
pid_t spawn(const std::function<int()>& fn) {
  const pid_t pid = fork();
  if (pid == 0) _exit(fn());
  return pid;
}

// Everything written to fd until its writer closes it (or timeout_ms passes).
std::string readAll(int fd, int timeout_ms) {
  std::string s;
  const auto t0 = Clock::now();
  char buf[4096];
  for (;;) {
    const int left = timeout_ms - static_cast<int>(secondsSince(t0) * 1000);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  return s;
}

// The tpscope bootstrap sockets that /proc/net/unix lists, as any user reads them.
std::set<std::string> tpscopeSockets() {
  std::set<std::string> names;
  std::ifstream f("/proc/net/unix");
  std::string line;
  std::getline(f, line);  // the column names
  while (std::getline(f, line)) {
    std::istringstream fields(line);
    std::string field, last;
    while (fields >> field) last = field;
    if (last.rfind("@tpscope-bootstrap-", 0) == 0) names.insert(last);
  }
  return names;
}

// Failures of checks made in a child process, reported to the test as text.
struct Report {
  std::string text;
  void check(bool ok, const std::string& what) {
    if (!ok) text += what + "\n";
  }
};

// Runs fn in a child process, in a network namespace of its own where this process may make one:
// abstract socket names belong to a network namespace, so /proc/net/unix there lists this test's
// sockets alone (and an attacker in it can reach no other test's). Returns fn's failures.
std::string inArena(const std::function<std::string()>& fn) {
  int out[2];
  if (pipe(out) != 0) return "pipe() failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    (void)unshare(CLONE_NEWNET);  // where refused, the shared namespace (the attacker then skips names it saw before)
    const std::string failures = fn();
    (void)!write(out[1], failures.data(), failures.size());
    _exit(0);
  }
  close(out[1]);
  std::string failures = readAll(out[0], 60000);
  close(out[0]);
  const int code = exitCode(pid);
  if (code != 0) failures += fmt::format("the test's child process ended with {}\n", code);
  return failures;
}

// What the other user does: finds the tpscope sockets that were not there before, connects to each and
// says hello with everything it can see (the protocol's constants, a guess at nranks and rank, and the
// name's digits where the secret goes). Writes one line per socket to `out`: its name and what rank 0
// answered. Runs in a forked child.
int attack(const std::set<std::string>& before, int out) {
  if (!becomeOtherUser()) return 3;
  std::set<std::string> targets;
  for (const auto t0 = Clock::now(); targets.empty() && secondsSince(t0) < 5;) {
    for (const std::string& name : tpscopeSockets())
      if (!before.count(name)) targets.insert(name);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string lines;
  for (const std::string& name : targets) {
    const int fd = connectTo(name, 1000);
    if (fd < 0) {
      lines += name + " unreachable\n";
      continue;
    }
    const uint64_t tag = std::strtoull(name.c_str() + std::strlen("@tpscope-bootstrap-"), nullptr, 16);
    tpscope::detail::Hello h{
        kBootstrapMagic, tpscope::detail::kBootstrapVersion, 2, 1, static_cast<uint32_t>(getpid()), 0, {}};
    std::memcpy(h.secret, &tag, sizeof(tag));
    std::memcpy(h.secret + sizeof(tag), &tag, sizeof(tag));
    sendAll(fd, &h, sizeof(h));
    const Answer a = awaitAnswer(fd, 3000);
    close(fd);
    lines += name + " " +
             (a.kind == Answer::kVerdict  ? (a.status == tpsSuccess ? "ACCEPTED" : "refused: " + a.message)
              : a.kind == Answer::kClosed ? "closed"
                                          : "no answer") +
             "\n";
  }
  (void)!write(out, lines.data(), lines.size());
  return 0;
}

TEST(BootstrapTrust, OtherUserWhoFindsTheSocketInProcNetUnixIsRefused) {
  SKIP_UNLESS_SWITCHING_USER();
  EXPECT_EQ(inArena([] {
              Report rep;
              const tpsUniqueId id = freshId();
              const std::set<std::string> before = tpscopeSockets();
              int seen[2];
              if (pipe(seen) != 0) return std::string("pipe() failed");
              const pid_t attacker = spawn([&] {
                close(seen[0]);
                return attack(before, seen[1]);
              });
              close(seen[1]);
              testing::internal::CaptureStderr();
              Outcome o0;
              std::thread rank0([&] { o0 = joinAndGather(id, 2, 0, 8000); });
              // The real rank 1 comes only after the attacker has had its answer.
              const std::string lines = readAll(seen[0], 8000);
              close(seen[0]);
              const Outcome o1 = joinAndGather(id, 2, 1, 8000);
              rank0.join();
              const std::string log = testing::internal::GetCapturedStderr();
              rep.check(exitCode(attacker) == 0, "the attacker could not run as uid 65534");
              rep.check(lines.find(nameOf(id) + " ") != std::string::npos,
                        "the attacker did not find the id's socket in /proc/net/unix; it saw:\n" + lines);
              rep.check(lines.find(nameOf(id) + " refused: rank 0") != std::string::npos ||
                            lines.find(nameOf(id) + " closed") != std::string::npos,
                        "the attacker was not refused:\n" + lines);
              rep.check(o0.result == tpsSuccess && o1.result == tpsSuccess,
                        "the real ranks did not join: " + o0.error + " / " + o1.error);
              rep.check(o0.gathered == expectedGather(2) && o1.gathered == expectedGather(2),
                        "the real ranks' all-gather returned other bytes");
              rep.check(
                  log.find(fmt::format("refused a connection from pid {} (uid 65534)", attacker)) != std::string::npos,
                  "rank 0 did not log the refused peer's pid and uid:\n" + log);
              return rep.text;
            }),
            "");
}

TEST(BootstrapTrust, OtherUserHoldingTheIdIsRefusedForItsUser) {
  SKIP_UNLESS_SWITCHING_USER();
  const tpsUniqueId id = freshId();
  const uint32_t own = geteuid();
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  // The other user has the id itself (leaked) and accepts rank 0's user: only rank 0's uid check stops it.
  // It learns that it was refused for its user, and nothing of rank 0's process or the users it accepts.
  const pid_t rank0_pid = getpid();
  const pid_t other = spawn([&] {
    close(go[1]);
    char c;
    if (!becomeOtherUser() || read(go[0], &c, 1) != 1) return 3;
    const Outcome o = joinAndGather(id, 2, 1, 3000, {own});
    if (o.result != tpsInvalidUsage || o.error.find("its user is not one rank 0 accepts") == std::string::npos)
      return 1;
    if (o.error.find(std::to_string(rank0_pid)) != std::string::npos || o.error.find("uid") != std::string::npos ||
        o.error.find("peer_uids") != std::string::npos)
      return 2;
    return 0;
  });
  close(go[0]);
  testing::internal::CaptureStderr();
  Outcome o0;
  std::thread rank0([&] { o0 = joinAndGather(id, 2, 0, 5000); });
  (void)!write(go[1], "g", 1);
  close(go[1]);
  const int code = exitCode(other);  // refused before the real rank 1 comes
  const Outcome o1 = joinAndGather(id, 2, 1, 5000);
  rank0.join();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(code, 1) << "the other user's rank 1 was not refused with tpsInvalidUsage for its user";
  EXPECT_NE(code, 2) << "the refusal sent to the other user named rank 0's pid or the uids it accepts";
  EXPECT_EQ(code, 0);
  ASSERT_EQ(o0.result, tpsSuccess) << o0.error;
  ASSERT_EQ(o1.result, tpsSuccess) << o1.error;
  EXPECT_EQ(o1.gathered, expectedGather(2));
  // Rank 0's log has what the peer was not told: its pid and uid, and the uids rank 0 accepts.
  EXPECT_NE(log.find(fmt::format("refused a connection from pid {} (uid 65534): uid 65534 is not one rank 0 accepts "
                                 "({};",
                                 other, own)),
            std::string::npos)
      << log;
}

TEST(BootstrapTrust, AnotherUserNamedInPeerUidsJoins) {
  SKIP_UNLESS_SWITCHING_USER();
  const tpsUniqueId id = freshId();
  const uint32_t own = geteuid();
  const pid_t other = spawn([&] {
    if (!becomeOtherUser()) return 3;
    const Outcome o = joinAndGather(id, 2, 1, 5000, {own});
    return o.result == tpsSuccess && o.gathered == expectedGather(2) ? 0 : 1;
  });
  const Outcome o0 = joinAndGather(id, 2, 0, 5000, {kOtherUid});
  EXPECT_EQ(o0.result, tpsSuccess) << o0.error;
  EXPECT_EQ(o0.gathered, expectedGather(2));
  EXPECT_EQ(exitCode(other), 0) << "rank 1 of uid 65534 did not join";
}

TEST(BootstrapTrust, RankRefusesARankZeroOfAnotherUser) {
  SKIP_UNLESS_SWITCHING_USER();
  const tpsUniqueId id = freshId();
  int ready[2], got[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(got), 0);
  ASSERT_EQ(pipe(done), 0);
  // The other user squats the id's socket name first and reports how many bytes reach it.
  const pid_t squatter = spawn([&] {
    close(ready[0]);
    close(got[0]);
    close(done[1]);
    if (!becomeOtherUser()) return 3;
    const std::string name = nameOf(id);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.data(), name.size());
    addr.sun_path[0] = '\0';
    const int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), offsetof(sockaddr_un, sun_path) + name.size()) != 0 ||
        listen(lfd, 8) != 0)
      return 4;
    (void)!write(ready[1], "r", 1);
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return 5;
    const int fd = accept(lfd, nullptr, nullptr);
    size_t bytes = 0;
    char buf[256];
    for (pollfd q{fd, POLLIN, 0}; poll(&q, 1, 1000) == 1;) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      bytes += static_cast<size_t>(n);
    }
    const std::string count = std::to_string(bytes);
    (void)!write(got[1], count.data(), count.size());
    close(got[1]);
    char c;
    (void)!read(done[0], &c, 1);  // holds the name until the test is done
    return 0;
  });
  close(ready[1]);
  close(got[1]);
  close(done[0]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  const Outcome o1 = joinAndGather(id, 2, 1, 3000);
  EXPECT_EQ(o1.result, tpsInvalidUsage) << o1.error;
  EXPECT_NE(o1.error.find(fmt::format("(pid {}, uid 65534) runs as none of the users this rank accepts", squatter)),
            std::string::npos)
      << o1.error;
  EXPECT_LT(o1.seconds, 1.0);  // at once, not by the timeout
  // The real rank 0 finds the name taken and says so.
  const Outcome o0 = joinAndGather(id, 2, 0, 1000);
  EXPECT_EQ(o0.result, tpsInvalidUsage);
  EXPECT_NE(o0.error.find("another process already listens on this id's socket"), std::string::npos) << o0.error;
  EXPECT_EQ(readAll(got[0], 5000), "0") << "rank 1 sent bytes to a listener of another user";
  close(got[0]);
  close(done[1]);
  EXPECT_EQ(exitCode(squatter), 0);
}

TEST(BootstrapTrust, SameUserWithoutTheSecretIsRefused) {
  const tpsUniqueId id = freshId();
  testing::internal::CaptureStderr();
  Outcome o0;
  std::thread rank0([&] { o0 = joinAndGather(id, 2, 0, 5000); });
  // Strays that know everything but the secret: none at all, and all of it but one bit.
  std::vector<Answer> answers;
  for (int variant = 0; variant < 2; ++variant) {
    tpscope::detail::Hello h = helloFor(id, 2, 1, variant == 1);
    if (variant == 1) h.secret[7] ^= 0x10;
    // No ASSERT while rank 0's thread runs: a failure must still reach rank0.join() below.
    const int fd = connectTo(nameOf(id), 3000);
    EXPECT_GE(fd, 0) << "rank 0 stopped listening: the stray before this one was taken for a rank";
    EXPECT_TRUE(sendAll(fd, &h, sizeof(h)));
    answers.push_back(awaitAnswer(fd, 3000));
    close(fd);
  }
  const Outcome o1 = joinAndGather(id, 2, 1, 5000);
  rank0.join();
  const std::string log = testing::internal::GetCapturedStderr();
  for (const Answer& a : answers) {
    EXPECT_EQ(a.kind, Answer::kVerdict);
    EXPECT_EQ(a.status, tpsInvalidUsage);
    EXPECT_NE(a.message.find("its hello does not prove the id's secret"), std::string::npos) << a.message;
  }
  ASSERT_EQ(o0.result, tpsSuccess) << o0.error;
  ASSERT_EQ(o1.result, tpsSuccess) << o1.error;
  EXPECT_EQ(o0.gathered, expectedGather(2));
  EXPECT_NE(
      log.find(fmt::format("refused a connection from pid {} (uid {}): its hello does not prove", getpid(), geteuid())),
      std::string::npos)
      << log;
}

TEST(BootstrapTrust, GarbageOversizedPartialAndSilentPeersDoNotHoldUpTheJoin) {
  const tpsUniqueId id = freshId();
  Outcome o0;
  std::thread rank0([&] { o0 = joinAndGather(id, 3, 0, 5000); });
  std::vector<int> silent;
  for (size_t i = 0; i < kMaxPending + 4; ++i) silent.push_back(connectTo(nameOf(id), 3000));
  for (int fd : silent) EXPECT_GE(fd, 0);
  const int garbage = connectTo(nameOf(id), 3000);
  std::vector<char> junk(sizeof(tpscope::detail::Hello));
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 37 + 11);
  EXPECT_TRUE(sendAll(garbage, junk.data(), junk.size()));
  const int partial = connectTo(nameOf(id), 3000);
  const tpscope::detail::Hello h = helloFor(id, 3, 1, true);
  EXPECT_TRUE(sendAll(partial, &h, sizeof(h) / 2));
  // Oversized: as much as the socket takes (rank 0 reads one hello's worth and refuses the rest).
  const int oversized = connectTo(nameOf(id), 3000);
  std::vector<char> lots(1 << 20, 'x');
  size_t sent = 0;
  for (ssize_t n; (n = send(oversized, lots.data(), lots.size(), MSG_NOSIGNAL | MSG_DONTWAIT)) > 0;) sent += n;
  EXPECT_GT(sent, sizeof(h));

  const auto t0 = Clock::now();
  auto out = runThreads(id, {{3, 1}, {3, 2}}, 5000);
  const double took = secondsSince(t0);
  rank0.join();
  ASSERT_EQ(o0.result, tpsSuccess) << o0.error;
  EXPECT_EQ(o0.gathered, expectedGather(3));
  for (const Outcome& o : out) {
    ASSERT_EQ(o.result, tpsSuccess) << o.error;
    EXPECT_EQ(o.gathered, expectedGather(3));
  }
  // Well inside one hello's bound: the real ranks waited for no stray.
  EXPECT_LT(took, kHelloTimeoutMs / 1000.0 * 0.8);
  const Answer g = awaitAnswer(garbage, 1000);
  EXPECT_EQ(g.kind, Answer::kVerdict);
  EXPECT_NE(g.message.find("no tpscope hello (wrong magic)"), std::string::npos) << g.message;
  EXPECT_NE(awaitAnswer(oversized, 1000).kind, Answer::kNothing);
  // Once the ranks have joined, rank 0 closes every connection still waiting for its hello.
  EXPECT_EQ(awaitAnswer(partial, 1000).kind, Answer::kClosed);
  for (int fd : silent) EXPECT_NE(awaitAnswer(fd, 1000).kind, Answer::kNothing);
  for (int fd : silent) close(fd);
  for (int fd : {garbage, partial, oversized}) close(fd);
}

TEST(BootstrapTrust, WaitingConnectionsAreCappedAndTimed) {
  const tpsUniqueId id = freshId();
  Outcome o0;
  std::thread rank0([&] { o0 = joinAndGather(id, 2, 0, 2500); });  // rank 1 never comes
  const size_t extra = 4;
  std::vector<int> fds;
  for (size_t i = 0; i < kMaxPending + extra; ++i) {
    fds.push_back(connectTo(nameOf(id), 3000));
    EXPECT_GE(fds.back(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // in order, one after the other
  }
  const auto opened = Clock::now();
  // Past the cap the oldest go at once (all are this process's), told to connect again ...
  for (size_t i = 0; i < extra; ++i) {
    const Answer a = awaitAnswer(fds[i], 300);
    EXPECT_EQ(a.kind, Answer::kVerdict) << "connection " << i;
    EXPECT_EQ(a.status, tpsUnavailable) << "connection " << i;
    EXPECT_NE(a.message.find("too many connections wait for their hello; connect again"), std::string::npos)
        << a.message;
  }
  // ... the others when their hello's bound passes, long before the join's own timeout.
  for (size_t i = extra; i < fds.size(); ++i) {
    const Answer a = awaitAnswer(fds[i], 2000);
    const double at = secondsSince(opened);
    EXPECT_EQ(a.kind, Answer::kVerdict) << "connection " << i;
    EXPECT_NE(a.message.find("it sent no whole hello within 1000 ms"), std::string::npos) << a.message;
    EXPECT_GT(at, kHelloTimeoutMs / 1000.0 - 0.4) << "connection " << i;
    EXPECT_LT(at, kHelloTimeoutMs / 1000.0 + 0.6) << "connection " << i;
  }
  rank0.join();
  EXPECT_EQ(o0.result, tpsTimeout);
  EXPECT_NE(o0.error.find(fmt::format("rank 0 refused {} connection(s)", fds.size())), std::string::npos) << o0.error;
  for (int fd : fds) close(fd);
}

// A forked process of this user without the secret: once the test writes to `go`, it connects `n` times
// to the id's socket, writes one byte to `ready`, and holds the connections silent until the test
// writes to `release`. Forked before the test starts any thread, so the child holds no lock.
struct SilentProcess {
  pid_t pid = -1;
  int go[2] = {-1, -1}, ready[2] = {-1, -1}, release[2] = {-1, -1};
  SilentProcess(const tpsUniqueId& id, int n) {
    if (pipe(go) != 0 || pipe(ready) != 0 || pipe(release) != 0) return;
    pid = spawn([&] {
      char c;
      if (read(go[0], &c, 1) != 1) return 3;
      std::vector<int> fds;
      for (int i = 0; i < n; ++i) fds.push_back(connectTo(nameOf(id), 3000));
      (void)!write(ready[1], "c", 1);
      (void)!read(release[0], &c, 1);
      for (int fd : fds) close(fd);
      return 0;
    });
  }
  // Connects and returns once all its connections are made.
  bool connectAll() {
    char c;
    return write(go[1], "g", 1) == 1 && read(ready[0], &c, 1) == 1;
  }
  // Closes its connections and returns its exit code.
  int finish() {
    (void)!write(release[1], "r", 1);
    const int code = exitCode(pid);
    for (int* p : {go, ready, release}) close(p[0]), close(p[1]);
    return code;
  }
};

// A rank whose process is slow between its connect and its hello (descheduled on a loaded box) while
// another process of the same user floods rank 0 with silent connections, more than it keeps waiting:
// rank 0 makes room by refusing the flood's connections, never the rank's, and the rank joins.
TEST(BootstrapTrust, AFloodFromOneProcessNeverPushesOutASlowRank) {
  const tpsUniqueId id = freshId();
  SilentProcess flood(id, static_cast<int>(3 * kMaxPending));
  int connected[2], slow_go[2];
  ASSERT_EQ(pipe(connected), 0);
  ASSERT_EQ(pipe(slow_go), 0);
  // The slow rank 1 speaks the protocol by hand so that its hello can wait; exits 0 when rank 0 accepts it.
  const pid_t slow = spawn([&] {
    const int fd = connectTo(nameOf(id), 3000);
    if (fd < 0) return 3;
    (void)!write(connected[1], "c", 1);
    char c;
    if (read(slow_go[0], &c, 1) != 1) return 4;
    const tpscope::detail::Hello h = helloFor(id, 2, 1, true);
    if (!sendAll(fd, &h, sizeof(h))) return 5;
    const Answer a = awaitAnswer(fd, 3000);
    return a.kind == Answer::kVerdict && a.status == tpsSuccess ? 0 : 1;
  });
  testing::internal::CaptureStderr();
  Outcome o0;  // the join only: the hand-made rank 1 takes part in no exchange
  std::thread rank0([&] {
    std::unique_ptr<Bootstrap> b;
    o0.result = Bootstrap::join(id, 2, 0, 4000, {}, &b, &o0.error);
  });
  // The rank's connection first, then the flood: the rank's is the oldest waiting when the flood passes the cap.
  char c;
  EXPECT_EQ(read(connected[0], &c, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(flood.connectAll());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 has accepted them by now
  (void)!write(slow_go[1], "g", 1);
  const int slow_code = exitCode(slow);
  rank0.join();
  EXPECT_EQ(flood.finish(), 0);
  const std::string log = testing::internal::GetCapturedStderr();
  for (int fd : {connected[0], connected[1], slow_go[0], slow_go[1]}) close(fd);
  EXPECT_EQ(slow_code, 0) << "the slow rank 1 was not accepted:\n" << log;
  EXPECT_EQ(o0.result, tpsSuccess) << o0.error;
  EXPECT_EQ(log.find(fmt::format("refused a connection from pid {}", slow)), std::string::npos) << log;
  EXPECT_NE(log.find(fmt::format("refused a connection from pid {} (uid {}): more than {} connections waited",
                                 flood.pid, geteuid(), kMaxPending)),
            std::string::npos)
      << log;
}

// Floods from many processes (one connection each, so none holds more than a rank does) can push a
// rank's connection out before its hello: the rank is told to connect again, without a pid or a uid.
TEST(BootstrapTrust, ARankPushedOutByManyProcessesIsToldToConnectAgain) {
  const tpsUniqueId id = freshId();
  std::vector<std::unique_ptr<SilentProcess>> others;
  for (size_t i = 0; i < kMaxPending; ++i) others.push_back(std::make_unique<SilentProcess>(id, 1));
  Outcome o0;
  std::thread rank0([&] { o0 = joinAndGather(id, 2, 0, 2500); });
  const int mine = connectTo(nameOf(id), 3000);  // the oldest, silent for now
  EXPECT_GE(mine, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (auto& o : others) EXPECT_TRUE(o->connectAll());
  const Answer a = awaitAnswer(mine, 1000);
  EXPECT_EQ(a.kind, Answer::kVerdict);
  EXPECT_EQ(a.status, tpsUnavailable);
  EXPECT_NE(a.message.find("connect again"), std::string::npos) << a.message;
  EXPECT_EQ(a.message.find(std::to_string(getpid())), std::string::npos) << a.message;
  EXPECT_EQ(a.message.find("uid"), std::string::npos) << a.message;
  close(mine);
  for (auto& o : others) EXPECT_EQ(o->finish(), 0);
  rank0.join();
  EXPECT_EQ(o0.result, tpsTimeout);
}

// A rank that rank 0 refuses for load connects again and joins: here rank 0 is played by hand, busy at
// the first hello and accepting at the second.
TEST(BootstrapTrust, ARankRefusedForLoadConnectsAgainAndJoins) {
  const tpsUniqueId id = freshId();
  const std::string name = nameOf(id);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), name.size());
  addr.sun_path[0] = '\0';
  const int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), offsetof(sockaddr_un, sun_path) + name.size()), 0);
  ASSERT_EQ(listen(lfd, 8), 0);
  Outcome o1;
  std::thread rank1([&] {
    std::unique_ptr<Bootstrap> b;
    o1.result = Bootstrap::join(id, 2, 1, 3000, {}, &b, &o1.error);
  });
  int hellos = 0;
  for (tpsResult_t verdict : {tpsUnavailable, tpsSuccess}) {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1) break;
    const int fd = accept(lfd, nullptr, nullptr);
    tpscope::detail::Hello h{};
    size_t got = 0;
    for (pollfd q{fd, POLLIN, 0}; got < sizeof(h) && poll(&q, 1, 2000) == 1;) {
      const ssize_t n = recv(fd, reinterpret_cast<char*>(&h) + got, sizeof(h) - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    hellos += got == sizeof(h) && h.rank == 1;
    const tpscope::detail::Verdict v = tpscope::detail::makeVerdict(verdict, "rank 0 refused this connection: busy");
    EXPECT_TRUE(sendAll(fd, &v, sizeof(v)));
    close(fd);
  }
  rank1.join();
  close(lfd);
  EXPECT_EQ(hellos, 2);
  EXPECT_EQ(o1.result, tpsSuccess) << o1.error;
}

// ---- exchanges -------------------------------------------------------------------------------------

struct GatherOutcome {
  tpsResult_t result = tpsInternalError;
  std::string error;
  double seconds = 0;
};

// Joins, then all-gathers `bytes` bytes per rank (into a buffer of nranks x buffer_bytes).
GatherOutcome joinAndGatherBytes(const tpsUniqueId& id, int nranks, int rank, size_t bytes, size_t buffer_bytes,
                                 unsigned timeout_ms) {
  GatherOutcome o;
  std::unique_ptr<Bootstrap> b;
  o.result = Bootstrap::join(id, nranks, rank, timeout_ms, {}, &b, &o.error);
  if (o.result != tpsSuccess) return o;
  std::vector<char> data(nranks * buffer_bytes, static_cast<char>(rank));
  const auto t0 = Clock::now();
  o.result = b->allGather(data.data(), bytes, &o.error);
  o.seconds = secondsSince(t0);
  return o;
}

// Ranks 0..n-1 on threads, rank q passing sizes[q] bytes into a buffer of buffers[q] per rank.
std::vector<GatherOutcome> gatherSizes(const std::vector<size_t>& sizes, const std::vector<size_t>& buffers) {
  const tpsUniqueId id = freshId();
  const int n = static_cast<int>(sizes.size());
  std::vector<GatherOutcome> out(n);
  std::vector<std::thread> threads;
  for (int q = 0; q < n; ++q)
    threads.emplace_back([&, q] { out[q] = joinAndGatherBytes(id, n, q, sizes[q], buffers[q], 5000); });
  for (auto& t : threads) t.join();
  return out;
}

TEST(BootstrapTrust, AllGatherOfDifferentSizesFailsEveryRank) {
  for (const GatherOutcome& o : gatherSizes({4, 5, 4}, {4, 5, 4})) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("the ranks passed blobs of different sizes: rank 1 5 bytes, rank 0 4"), std::string::npos)
        << o.error;
    EXPECT_LT(o.seconds, 1.0);
  }
}

TEST(BootstrapTrust, AllGatherOverTheLimitFailsEveryRankBeforeAnyBlob) {
  // A size no buffer has (rank 1's is 8 bytes): only a header travels, so nothing reads past the buffer.
  for (const GatherOutcome& o : gatherSizes({4, SIZE_MAX / 4}, {4, 8})) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(
        o.error.find(fmt::format("rank 1 passed a blob of {} bytes to an exchange, more than its limit", SIZE_MAX / 4)),
        std::string::npos)
        << o.error;
    EXPECT_LT(o.seconds, 1.0);
  }
  const size_t over = kMaxGatherBytes + 1;
  for (const GatherOutcome& o : gatherSizes({over, over}, {over, over})) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("rank 0 passed a blob of 1048577 bytes"), std::string::npos) << o.error;
  }
}

// A proven rank 1 that speaks the wire by hand: it joins (ranks 0 and 2 are real, on threads), then
// `misbehave` runs on its connection during the first exchange. Returns ranks 0's and 2's outcomes.
std::vector<GatherOutcome> withHandmadeRankOne(unsigned timeout_ms, const std::function<void(int fd)>& misbehave) {
  const tpsUniqueId id = freshId();
  std::vector<GatherOutcome> out(2);
  std::thread rank0([&] { out[0] = joinAndGatherBytes(id, 3, 0, 4, 4, timeout_ms); });
  std::thread rank2([&] { out[1] = joinAndGatherBytes(id, 3, 2, 4, 4, timeout_ms); });
  const int fd = connectTo(nameOf(id), 3000);
  const tpscope::detail::Hello h = helloFor(id, 3, 1, true);
  sendAll(fd, &h, sizeof(h));
  const Answer joined = awaitAnswer(fd, 3000);
  EXPECT_EQ(joined.kind, Answer::kVerdict);
  EXPECT_EQ(joined.status, tpsSuccess) << joined.message;
  misbehave(fd);
  rank0.join();
  rank2.join();
  close(fd);
  return out;
}

TEST(BootstrapTrust, ProvenRankWithAHugeSizeCostsOneHeader) {
  Answer verdict;
  const auto out = withHandmadeRankOne(5000, [&](int fd) {
    const GatherHeader hd{kBootstrapMagic, 0, uint64_t{1} << 62};
    sendAll(fd, &hd, sizeof(hd));
    verdict = awaitAnswer(fd, 3000);  // and no blob follows
  });
  for (const GatherOutcome& o : out) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("rank 1 passed a blob of 4611686018427387904 bytes"), std::string::npos) << o.error;
    EXPECT_LT(o.seconds, 1.0);
  }
  EXPECT_EQ(verdict.kind, Answer::kVerdict);
  EXPECT_EQ(verdict.status, tpsInvalidArgument);
}

TEST(BootstrapTrust, ProvenRankWithGarbageForAHeaderFailsEveryRank) {
  const auto out = withHandmadeRankOne(5000, [](int fd) {
    const char junk[sizeof(GatherHeader)] = "not a header";
    sendAll(fd, junk, sizeof(junk));
  });
  for (const GatherOutcome& o : out) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("rank 1 sent bytes that are no exchange header"), std::string::npos) << o.error;
  }
}

TEST(BootstrapTrust, ProvenRankSilentInAnExchangeTimesOutEveryRank) {
  const auto out = withHandmadeRankOne(600, [](int) {});
  for (const GatherOutcome& o : out) {
    EXPECT_EQ(o.result, tpsTimeout) << o.error;
    EXPECT_NE(o.error.find("rank 1 did not take part in an exchange within 600 ms"), std::string::npos) << o.error;
    EXPECT_GT(o.seconds, 0.5);
    EXPECT_LT(o.seconds, 2.0);
  }
}

}  // namespace
