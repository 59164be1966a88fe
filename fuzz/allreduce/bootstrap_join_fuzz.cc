// SPDX-License-Identifier: Apache-2.0
// bootstrap_join_fuzz - a real rank-0 join (Bootstrap::join on a thread, over the real socket) with the
// fuzzer's bytes on one more connection. Byte 0 picks how they come, the rest is the stream:
//  0: a stranger's stream, then the real rank 1 joins;
//  1: the same with the id's secret written over the stream's secret field, as a peer holding the id;
//  2: a proven rank 1 (a whole hello with the secret, sent by the harness) whose all-gather is the
//     stream, followed by the end of its writes.
// What rank 0 must do follows from the pure checks (bootstrap_wire.h) and is asserted:
//  - less than a hello: the stream waits, and the real rank 1 joins past it;
//  - a hello that is refused (no secret, bad magic, ...): the stream gets a refusal, and the real rank
//    1 then joins, both ranks all-gathering the right bytes;
//  - a proven hello that conflicts (a rank it would take is made out of range first): the stream and
//    rank 0 get the same tpsInvalidArgument at once;
//  - an exchange: a header that fails checkGatherHeader fails rank 0 with its reason, one that passes
//    brings rank 1's blob into rank 0's result, and a stream that ends early fails it as a closed
//    connection.
// No wait may come near its bound: each is checked well inside it.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "allreduce/bootstrap.h"
#include "allreduce/bootstrap_wire.h"

using namespace tpscope::detail;

namespace {

constexpr unsigned kTimeoutMs = 5000;

struct Result {
  tpsResult_t status = tpsInternalError;
  std::string error;
  std::vector<int> gathered;
};

Result joinAndGather(const tpsUniqueId& id, int rank) {
  Result r;
  std::unique_ptr<Bootstrap> b;
  r.status = Bootstrap::join(id, 2, rank, kTimeoutMs, {}, &b, &r.error);
  if (r.status != tpsSuccess) return r;
  r.gathered = {0, 0};
  r.gathered[rank] = rank * 10 + 1;
  r.status = b->allGather(r.gathered.data(), sizeof(int), &r.error);
  return r;
}

int connectTo(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), name.size());
  addr.sun_path[0] = '\0';
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  for (int tries = 0; tries < 2000; ++tries) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  std::abort();  // rank 0 never listened
}

// rank 0's verdict on the stream's connection: true with it, false when the connection closed first.
bool readVerdict(int fd, tpsResult_t* status, std::string* message) {
  char buf[sizeof(Verdict)];
  size_t got = 0;
  while (got < sizeof(buf)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) std::abort();  // rank 0 left a judged stream waiting
    const ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  std::string why;
  if (!parseVerdict(buf, sizeof(buf), status, message, &why)) std::abort();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("TPSCOPE_DEBUG", "NONE", 1);  // a refusal per run would flood the fuzzer's output
  return 0;
}

// Mode 2: the stream is a proven rank 1's part of rank 0's first all-gather.
void exchangeStream(const tpsUniqueId& raw, const BootstrapId& id, const std::vector<uint8_t>& stream) {
  Result r0;
  std::thread rank0([&] { r0 = joinAndGather(raw, 0); });
  const int fd = connectTo(socketName(id.socket_tag));
  Hello h{kBootstrapMagic, kBootstrapVersion, 2, 1, static_cast<uint32_t>(getpid()), 0, {}};
  std::memcpy(h.secret, id.secret, kSecretBytes);
  if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(h))) std::abort();
  tpsResult_t status = tpsInternalError;
  std::string message;
  if (!readVerdict(fd, &status, &message) || status != tpsSuccess) std::abort();
  if (!stream.empty()) (void)send(fd, stream.data(), stream.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  shutdown(fd, SHUT_WR);  // rank 0 sees the stream end instead of waiting for more
  rank0.join();
  std::string why;
  const size_t header = sizeof(GatherHeader);
  if (stream.size() < header) {
    if (r0.status != tpsSystemError) std::abort();
  } else if (checkGatherHeader(stream.data(), header, sizeof(int), 1, &why) != tpsSuccess) {
    if (r0.status != tpsInvalidArgument || r0.error != why) std::abort();
  } else if (stream.size() < header + sizeof(int)) {
    if (r0.status != tpsSystemError) std::abort();
  } else {
    int blob = 0;
    std::memcpy(&blob, stream.data() + header, sizeof(blob));
    if (r0.status != tpsSuccess || r0.gathered != std::vector<int>{1, blob}) std::abort();
  }
  close(fd);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  const bool with_secret = mode == 1;
  std::vector<uint8_t> stream(data + 1, data + size);
  tpsUniqueId raw;
  if (makeBootstrapId(&raw) != tpsSuccess) std::abort();
  BootstrapId id{};
  std::memcpy(&id, &raw, sizeof(id));
  if (mode == 2) {
    exchangeStream(raw, id, stream);
    return 0;
  }
  if (with_secret && stream.size() >= offsetof(Hello, secret) + kSecretBytes)
    std::memcpy(stream.data() + offsetof(Hello, secret), id.secret, kSecretBytes);

  // What rank 0 must do with the stream's first hello.
  const bool whole = stream.size() >= sizeof(Hello);
  HelloDecision expect = HelloDecision::kRefuse;
  Hello h{};
  if (whole && parseHello(stream.data(), sizeof(Hello), &h, nullptr)) {
    expect = judgeHello(h, id, {true, false}, nullptr);
    if (expect == HelloDecision::kAccept) {  // it would be rank 1: make it a conflict instead
      h.rank = 7;
      std::memcpy(stream.data(), &h, sizeof(h));
      expect = HelloDecision::kDisagree;
    }
  }

  Result r0, r1;
  std::thread rank0([&] { r0 = joinAndGather(raw, 0); });
  const int fd = connectTo(socketName(id.socket_tag));
  if (!stream.empty()) (void)send(fd, stream.data(), stream.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  tpsResult_t status = tpsInternalError;
  std::string message;
  if (whole) {
    const bool answered = readVerdict(fd, &status, &message);
    if (!answered) std::abort();  // a judged stream gets a verdict before its connection closes
    if (expect == HelloDecision::kRefuse && status != tpsInvalidUsage) std::abort();
    if (expect == HelloDecision::kDisagree && status != tpsInvalidArgument) std::abort();
  }
  if (expect == HelloDecision::kDisagree) {
    rank0.join();
    if (r0.status != tpsInvalidArgument || r0.error.substr(0, sizeof(Verdict::message) - 1) != message) std::abort();
  } else {
    r1 = joinAndGather(raw, 1);
    rank0.join();
    const std::vector<int> right{1, 11};
    if (r0.status != tpsSuccess || r1.status != tpsSuccess || r0.gathered != right || r1.gathered != right)
      std::abort();
  }
  close(fd);
  return 0;
}
