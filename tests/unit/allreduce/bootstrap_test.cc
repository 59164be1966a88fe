// SPDX-License-Identifier: Apache-2.0
// bootstrap_test - the rank-per-process join without a GPU: ranks as threads and as forked processes
// joining, exchanging and failing (a rank that never comes, ranks that disagree on nranks, a rank
// number taken twice, an id used again, bytes that are no id), and tpsCommInitRank's argument checks.
// bootstrap_trust_test.cc has the peers that are no ranks (other users, wrong secrets, garbage, silence)
// and the exchanges' size checks.
#include "allreduce/bootstrap.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap_test_util.h"
#include "tpscope/tpscope.h"
#include "tpscope/tpscope.hpp"

namespace {

using namespace bootstrap_test;

TEST(Bootstrap, FourRanksJoinAndExchangeInRankOrder) {
  const tpsUniqueId id = freshId();
  // Rank 0 last: the others must wait for it to listen.
  auto out = runThreads(id, {{4, 3}, {4, 1}, {4, 2}, {4, 0}}, 5000);
  for (const Outcome& o : out) {
    ASSERT_EQ(o.result, tpsSuccess) << o.error;
    EXPECT_EQ(o.gathered, (std::vector<int>{1, 11, 21, 31}));
  }
}

TEST(Bootstrap, RanksInSeparateProcessesJoin) {
  const tpsUniqueId id = freshId();
  std::vector<pid_t> children;
  for (int rank = 1; rank < 3; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const Outcome o = joinAndGather(id, 3, rank, 5000);
      _exit(o.result == tpsSuccess && o.gathered == std::vector<int>{1, 11, 21} ? 0 : 1);
    }
    children.push_back(pid);
  }
  const Outcome o = joinAndGather(id, 3, 0, 5000);
  EXPECT_EQ(o.result, tpsSuccess) << o.error;
  EXPECT_EQ(o.gathered, (std::vector<int>{1, 11, 21}));
  for (pid_t pid : children) {
    int status = -1;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child rank failed to join or exchange";
  }
}

TEST(Bootstrap, RankThatNeverJoinsTimesOutEveryOtherRank) {
  const tpsUniqueId id = freshId();
  auto out = runThreads(id, {{3, 0}, {3, 1}}, 400);  // rank 2 never comes
  for (const Outcome& o : out) {
    EXPECT_EQ(o.result, tpsTimeout) << o.error;
    EXPECT_GE(o.seconds, 0.35);
    EXPECT_LT(o.seconds, 5.0);
    // Rank 1 waits a little past the timeout for rank 0's verdict, so it names the missing rank too.
    EXPECT_NE(o.error.find("rank(s) 2 of 3 did not join"), std::string::npos) << o.error;
  }
}

TEST(Bootstrap, MissingRankZeroTimesOut) {
  const tpsUniqueId id = freshId();
  const Outcome o = joinAndGather(id, 2, 1, 300);
  EXPECT_EQ(o.result, tpsTimeout);
  EXPECT_NE(o.error.find("rank 0 did not open"), std::string::npos) << o.error;
  EXPECT_GE(o.seconds, 0.25);
}

TEST(Bootstrap, RanksDisagreeingOnNranksAllFail) {
  const tpsUniqueId id = freshId();
  auto out = runThreads(id, {{2, 0}, {3, 1}}, 5000);
  for (const Outcome& o : out) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("was given nranks 3, rank 0 nranks 2"), std::string::npos) << o.error;
    EXPECT_LT(o.seconds, 4.0);  // found at once, not by the timeout
  }
}

TEST(Bootstrap, RankNumberTakenTwiceFailsEveryRank) {
  const tpsUniqueId id = freshId();
  // The second rank 1 in another process (one process may not join one id twice as one rank).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const Outcome o = joinAndGather(id, 3, 1, 5000);
    _exit(o.result == tpsInvalidArgument && o.error.find("rank 1 joined twice") != std::string::npos ? 0 : 1);
  }
  auto out = runThreads(id, {{3, 0}, {3, 1}}, 5000);
  for (const Outcome& o : out) {
    EXPECT_EQ(o.result, tpsInvalidArgument) << o.error;
    EXPECT_NE(o.error.find("rank 1 joined twice"), std::string::npos) << o.error;
  }
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the other process's rank 1 did not fail alike";
}

TEST(Bootstrap, IdUsedAgainInOneProcessIsRefused) {
  const tpsUniqueId id = freshId();
  for (const Outcome& o : runThreads(id, {{2, 0}, {2, 1}}, 5000)) ASSERT_EQ(o.result, tpsSuccess) << o.error;
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome again = joinAndGather(id, 2, 0, 5000);
  EXPECT_EQ(again.result, tpsInvalidUsage);
  EXPECT_NE(again.error.find("already joined a communicator with this id as rank 0"), std::string::npos) << again.error;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(Bootstrap, SecondRankZeroOnOneIdIsRefused) {
  const tpsUniqueId id = freshId();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Rank 0 in another process, listening until rank 1 comes (it never does).
    close(ready[0]);
    std::thread t([&] { joinAndGather(id, 2, 0, 1500); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)!write(ready[1], "x", 1);
    t.join();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  const Outcome o = joinAndGather(id, 2, 0, 1000);
  EXPECT_EQ(o.result, tpsInvalidUsage) << o.error;
  EXPECT_NE(o.error.find("another rank 0"), std::string::npos) << o.error;
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
}

TEST(Bootstrap, BytesThatAreNoIdAreRefused) {
  tpsUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const Outcome o = joinAndGather(id, 2, 0, 1000);
  EXPECT_EQ(o.result, tpsInvalidArgument);
  EXPECT_NE(o.error.find("not made by tpsGetUniqueId"), std::string::npos) << o.error;
}

TEST(Bootstrap, IdsAreFreshAndOpaque) {
  tpsUniqueId a, b;
  ASSERT_EQ(tpsGetUniqueId(&a), tpsSuccess);
  ASSERT_EQ(tpsGetUniqueId(&b), tpsSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof(a)), 0);
  EXPECT_EQ(sizeof(tpsUniqueId), static_cast<size_t>(TPS_UNIQUE_ID_BYTES));
  EXPECT_EQ(tpsGetUniqueId(nullptr), tpsInvalidArgument);
}

TEST(CommInitRank, ArgumentsAreCheckedBeforeAnyJoin) {
  tpsUniqueId id;
  ASSERT_EQ(tpsGetUniqueId(&id), tpsSuccess);
  tpsComm_t comm = reinterpret_cast<tpsComm_t>(0x1);
  EXPECT_EQ(tpsCommInitRank(nullptr, 2, id, 0, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommInitRank(&comm, 1, id, 0, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(tpsCommInitRank(&comm, TPS_MAX_DEVICES + 1, id, 0, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, 2, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, -1, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, 0, -1, nullptr), tpsInvalidArgument);
  tpsConfig_t cfg;
  std::memset(&cfg, 0xff, sizeof(cfg));  // tpsConfigInit must clear what was there
  tpsConfigInit(&cfg);
  EXPECT_EQ(cfg.num_peer_uids, 0);
  for (unsigned uid : cfg.peer_uids) EXPECT_EQ(uid, 0u);
  cfg.num_peer_uids = TPS_MAX_PEER_UIDS + 1;
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, 0, 0, &cfg), tpsInvalidArgument);
  cfg.num_peer_uids = -1;
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, 0, 0, &cfg), tpsInvalidArgument);
  tpsConfigInit(&cfg);
  cfg.backend = static_cast<tpsBackend_t>(17);
  EXPECT_EQ(tpsCommInitRank(&comm, 2, id, 0, 0, &cfg), tpsInvalidArgument);
  tpsUniqueId junk;
  std::memset(&junk, 0x5a, sizeof(junk));
  EXPECT_EQ(tpsCommInitRank(&comm, 2, junk, 0, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  tpscope::Communicator wrapped;
  EXPECT_EQ(tpscope::Communicator::initRank(1, id, 0, 0, &wrapped), tpsInvalidArgument);
  EXPECT_EQ(wrapped.get(), nullptr);
  int n = 0;
  EXPECT_EQ(tpsCommCount(nullptr, &n), tpsInvalidArgument);
  EXPECT_EQ(tpsCommUserRank(nullptr, &n), tpsInvalidArgument);
}

}  // namespace
