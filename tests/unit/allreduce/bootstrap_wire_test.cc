// SPDX-License-Identifier: Apache-2.0
// bootstrap_wire_test - the join's bytes without a socket: the id (fresh secrets, a name that tells
// nothing of them, no id without random bytes), and every check rank 0 and the ranks make of a hello,
// a verdict and an exchange header.
#include "allreduce/bootstrap_wire.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#if defined(__linux__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#endif

#include "allreduce/bootstrap.h"
#include "tpscope/tpscope.h"

namespace {

using namespace tpscope::detail;

BootstrapId freshContents() {
  tpsUniqueId id;
  EXPECT_EQ(tpsGetUniqueId(&id), tpsSuccess);
  BootstrapId b{};
  std::string why;
  EXPECT_TRUE(parseBootstrapId(&id, sizeof(id), &b, &why)) << why;
  return b;
}

std::string hex(const void* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", static_cast<const unsigned char*>(p)[i]);
  return s;
}

TEST(BootstrapWire, IdsHoldFreshSecretsThatNoNameShows) {
  std::set<std::string> secrets;
  for (int i = 0; i < 64; ++i) {
    const BootstrapId b = freshContents();
    EXPECT_EQ(b.version, kBootstrapVersion);
    const std::string secret = hex(b.secret, sizeof(b.secret));
    EXPECT_TRUE(secrets.insert(secret).second) << "two ids with one secret";
    EXPECT_NE(secret, std::string(16 * 2, '0'));
    const std::string name = socketName(b.socket_tag);
    EXPECT_EQ(name, fmt::format("@tpscope-bootstrap-{:016x}", b.socket_tag));
    // The name holds the tag alone: no 4 bytes of the secret or of the nonce appear in it.
    const std::string nonce = hex(&b.nonce, sizeof(b.nonce));
    for (size_t k = 0; k + 8 <= secret.size(); k += 2) EXPECT_EQ(name.find(secret.substr(k, 8)), std::string::npos);
    for (size_t k = 0; k + 8 <= nonce.size(); k += 2) EXPECT_EQ(name.find(nonce.substr(k, 8)), std::string::npos);
    EXPECT_NE(std::memcmp(&b.socket_tag, b.secret, sizeof(b.socket_tag)), 0);
  }
}

TEST(BootstrapWire, BytesThatAreNoIdAreRefused) {
  tpsUniqueId raw;
  ASSERT_EQ(tpsGetUniqueId(&raw), tpsSuccess);
  BootstrapId b{};
  std::string why;
  ASSERT_TRUE(parseBootstrapId(&raw, sizeof(raw), &b, &why));
  EXPECT_FALSE(parseBootstrapId(&raw, sizeof(raw) - 1, &b, &why));
  EXPECT_NE(why.find("127 bytes are no id"), std::string::npos) << why;
  auto refused = [&](size_t offset, unsigned char x, const char* expect) {
    tpsUniqueId bad = raw;
    reinterpret_cast<unsigned char*>(&bad)[offset] ^= x;
    std::string w;
    EXPECT_FALSE(parseBootstrapId(&bad, sizeof(bad), &b, &w)) << "offset " << offset;
    EXPECT_NE(w.find(expect), std::string::npos) << w;
  };
  refused(offsetof(BootstrapId, magic), 1, "not made by tpsGetUniqueId");
  refused(offsetof(BootstrapId, version), 3, "the id is of version 1, this library speaks 2");
  refused(offsetof(BootstrapId, reserved) + 40, 0x80, "reserved bytes are not zero");
}

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
// In a child whose getrandom() fails (a seccomp filter makes it ENOSYS): no id, tpsSystemError, and the
// caller's bytes are left alone. Exit 0 passed, 1 failed, 77 no seccomp here.
int childWithoutRandomBytes() {
#if defined(__x86_64__)
  constexpr unsigned kArch = AUDIT_ARCH_X86_64;
#else
  constexpr unsigned kArch = AUDIT_ARCH_AARCH64;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getrandom, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 77;
  unsigned char probe[4];
  if (getrandom(probe, sizeof(probe), 0) >= 0 || errno != ENOSYS) return 77;  // the filter did not take
  tpsUniqueId id;
  std::memset(&id, 0x5a, sizeof(id));
  if (tpsGetUniqueId(&id) != tpsSystemError) return 1;
  for (unsigned char c : id.internal)
    if (c != 0x5a) return 1;
  return 0;
}

TEST(BootstrapWire, NoIdWithoutRandomBytes) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(childWithoutRandomBytes());
  int status = -1;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "seccomp filters are not available to this process";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "tpsGetUniqueId made an id although getrandom() failed";
}
#endif

Hello goodHello(const BootstrapId& id, uint32_t nranks, uint32_t rank) {
  Hello h{kBootstrapMagic, kBootstrapVersion, nranks, rank, 1234, 0, {}};
  std::memcpy(h.secret, id.secret, sizeof(h.secret));
  return h;
}

TEST(BootstrapWire, HellosParseOnlyWhole) {
  const BootstrapId id = freshContents();
  const Hello h = goodHello(id, 2, 1);
  Hello out{};
  std::string why;
  EXPECT_TRUE(parseHello(&h, sizeof(h), &out, &why)) << why;
  EXPECT_EQ(out.rank, 1u);
  EXPECT_FALSE(parseHello(&h, sizeof(h) - 1, &out, &why));
  EXPECT_NE(why.find("a hello of 39 bytes"), std::string::npos) << why;
  Hello bad = h;
  bad.magic ^= 1;
  EXPECT_FALSE(parseHello(&bad, sizeof(bad), &out, &why));
  EXPECT_NE(why.find("wrong magic"), std::string::npos);
  bad = h;
  bad.version = 1;
  EXPECT_FALSE(parseHello(&bad, sizeof(bad), &out, &why));
  EXPECT_NE(why.find("protocol version 1"), std::string::npos);
  bad = h;
  bad.reserved = 7;
  EXPECT_FALSE(parseHello(&bad, sizeof(bad), &out, &why));
}

TEST(BootstrapWire, SecretsDifferingInAnyByteAreUnequal) {
  const BootstrapId id = freshContents();
  uint8_t other[kSecretBytes];
  std::memcpy(other, id.secret, sizeof(other));
  EXPECT_TRUE(secretsEqual(id.secret, other));
  for (size_t i = 0; i < kSecretBytes; ++i)
    for (uint8_t bit = 1; bit != 0; bit = static_cast<uint8_t>(bit << 1)) {
      other[i] ^= bit;
      EXPECT_FALSE(secretsEqual(id.secret, other)) << "byte " << i;
      other[i] ^= bit;
    }
}

TEST(BootstrapWire, HellosAreJudgedSecretFirst) {
  const BootstrapId id = freshContents();
  std::vector<bool> taken{true, false, true};  // nranks 3; ranks 0 and 2 have joined
  std::string why;
  EXPECT_EQ(judgeHello(goodHello(id, 3, 1), id, taken, &why), HelloDecision::kAccept) << why;
  // Without the secret nothing else counts: not even a conflict that would fail a proven rank.
  Hello h = goodHello(id, 5, 2);
  h.secret[15] ^= 1;
  EXPECT_EQ(judgeHello(h, id, taken, &why), HelloDecision::kRefuse);
  EXPECT_NE(why.find("does not prove the id's secret"), std::string::npos) << why;
  EXPECT_EQ(judgeHello(goodHello(id, 5, 1), id, taken, &why), HelloDecision::kDisagree);
  EXPECT_NE(why.find("was given nranks 5, rank 0 nranks 3"), std::string::npos) << why;
  EXPECT_EQ(judgeHello(goodHello(id, 3, 2), id, taken, &why), HelloDecision::kDisagree);
  EXPECT_NE(why.find("rank 2 joined twice (the second from pid 1234)"), std::string::npos) << why;
  EXPECT_EQ(judgeHello(goodHello(id, 3, 0), id, taken, &why), HelloDecision::kDisagree);
  EXPECT_NE(why.find("says it is rank 0, outside 1..2"), std::string::npos) << why;
  EXPECT_EQ(judgeHello(goodHello(id, 3, 3), id, taken, &why), HelloDecision::kDisagree);
  EXPECT_EQ(judgeHello(goodHello(id, 3, 0xffffffffu), id, taken, &why), HelloDecision::kDisagree);
}

TEST(BootstrapWire, VerdictsCarryAStatusAndAMessage) {
  tpsResult_t status = tpsSuccess;
  std::string message, why;
  Verdict v = makeVerdict(tpsInvalidArgument, "ranks disagree");
  ASSERT_TRUE(parseVerdict(&v, sizeof(v), &status, &message, &why)) << why;
  EXPECT_EQ(status, tpsInvalidArgument);
  EXPECT_EQ(message, "ranks disagree");
  // A long message is cut to the field, and a field without its NUL is cut at its end.
  v = makeVerdict(tpsTimeout, std::string(1000, 'x'));
  ASSERT_TRUE(parseVerdict(&v, sizeof(v), &status, &message, &why));
  EXPECT_EQ(message.size(), sizeof(v.message) - 1);
  std::memset(v.message, 'y', sizeof(v.message));
  ASSERT_TRUE(parseVerdict(&v, sizeof(v), &status, &message, &why));
  EXPECT_EQ(message, std::string(sizeof(v.message), 'y'));
  for (int32_t s : {-1, static_cast<int32_t>(tpsNumResults), 1 << 30}) {
    v.status = s;
    EXPECT_FALSE(parseVerdict(&v, sizeof(v), &status, &message, &why)) << s;
    EXPECT_NE(why.find("no tpsResult_t"), std::string::npos);
  }
  EXPECT_FALSE(parseVerdict(&v, 12, &status, &message, &why));
}

TEST(BootstrapWire, GatherHeadersAreCheckedBeforeAnyBlob) {
  std::string why;
  GatherHeader h{kBootstrapMagic, 0, 48};
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), 48, 1, &why), tpsSuccess) << why;
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), 40, 2, &why), tpsInvalidArgument);
  EXPECT_NE(why.find("different sizes: rank 2 48 bytes, rank 0 40"), std::string::npos) << why;
  h.bytes = kMaxGatherBytes + 1;
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), kMaxGatherBytes + 1, 1, &why), tpsInvalidArgument);
  EXPECT_NE(why.find("more than its limit of 1048576"), std::string::npos) << why;
  h.bytes = ~uint64_t{0};
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), 48, 1, &why), tpsInvalidArgument);
  h = GatherHeader{kBootstrapMagic ^ 1, 0, 48};
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), 48, 1, &why), tpsInvalidArgument);
  EXPECT_NE(why.find("no exchange header"), std::string::npos) << why;
  h = GatherHeader{kBootstrapMagic, 1, 48};
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h), 48, 1, &why), tpsInvalidArgument);
  EXPECT_EQ(checkGatherHeader(&h, sizeof(h) - 1, 48, 1, &why), tpsInvalidArgument);
}

TEST(BootstrapWire, UidsAcceptedAreOwnOrNamed) {
  EXPECT_TRUE(uidAllowed(1000, 1000, {}));
  EXPECT_FALSE(uidAllowed(0, 1000, {}));  // root is no exception
  EXPECT_FALSE(uidAllowed(65534, 1000, {}));
  EXPECT_TRUE(uidAllowed(65534, 1000, {5, 65534}));
  EXPECT_FALSE(uidAllowed(65533, 1000, {5, 65534}));
}

}  // namespace
