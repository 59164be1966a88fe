// SPDX-License-Identifier: Apache-2.0
// meter_serve_test - `tpscope meter --serve`'s address parsing, the text format's escaping and numbers,
// and the endpoint on loopback against trickling, stalled and idle clients. The endpoint scraped by a real
// Prometheus is tests/prometheus/meter_serve_test.py.
#include "meter/meter_serve.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "meter/exposition.h"

namespace {

using tpscope::Meter;
using tpscope::MeterOptions;
using tpscope::cli::parseServeAddress;
using tpscope::detail::MetricsText;

TEST(MeterServe, AddressDefaultsToLoopbackAndTakesNamedHosts) {
  std::string error;
  auto a = parseServeAddress("9400", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9400);
  a = parseServeAddress("0.0.0.0:9401", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 9401);
  a = parseServeAddress("[::1]:0", &error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
}

TEST(MeterServe, BadAddressesSayWhy) {
  for (const char* bad : {"", "65536", "99999999", "-1", "host:", ":9400", "::1:9400", "[::1]9400", "[::1", "a:b"}) {
    std::string error;
    EXPECT_FALSE(parseServeAddress(bad, &error)) << bad;
    EXPECT_NE(error.find("--serve"), std::string::npos) << bad << ": " << error;
  }
}

TEST(MeterServe, TextEscapesLabelValuesAndHelp) {
  MetricsText m;
  m.family("x_total", "counter", "line one\nback\\slash");
  m.sample({{"name", "a \"b\" \\ c\nd"}}, uint64_t{18446744073709551615u});
  m.sample({}, 0.25);
  EXPECT_EQ(m.text(),
            "# HELP x_total line one\\nback\\\\slash\n# TYPE x_total counter\n"
            "x_total{name=\"a \\\"b\\\" \\\\ c\\nd\"} 18446744073709551615\nx_total 0.25\n");
}

TEST(MeterServe, NonFiniteValuesUseTheFormatsWords) {
  MetricsText m;
  m.family("g", "gauge", "h");
  m.sample({}, std::numeric_limits<double>::quiet_NaN());
  m.sample({}, std::numeric_limits<double>::infinity());
  m.sample({}, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(m.text(), "# HELP g h\n# TYPE g gauge\ng NaN\ng +Inf\ng -Inf\n");
}

// ---- the endpoint on loopback: slow, stalled and idle clients against scrapes ------------------------

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A connected loopback socket to `port`; -1 on failure.
int connectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// One scrape on a fresh connection: the answer's status line, or "" when none came within timeout_s.
std::string scrape(int port, double timeout_s, double* took) {
  const auto t0 = Clock::now();
  const int fd = connectTo(port);
  if (fd < 0) return "";
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string got;
  char buf[65536];
  for (;;) {
    const int left = static_cast<int>((timeout_s - since(t0)) * 1000);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  *took = since(t0);
  return got.substr(0, got.find("\r\n")) + (got.find("tpscope_pcie_rx_bytes_total{") != std::string::npos ? " +" : "");
}

class MeterServeLoopback : public ::testing::Test {
 protected:
  void SetUp() override {
    MeterOptions o;
    o.fake_gpus = true;
    o.calibrate = false;
    std::string reason;
    ASSERT_EQ(Meter::start(o, &meter_, &reason), tpsSuccess) << reason;
    std::string error;
    ASSERT_TRUE(server_.bind({"127.0.0.1", 0}, &error)) << error;
    server_.serve(*meter_);
    port_ = server_.port();
  }
  void TearDown() override {
    server_.stop();
    if (meter_) meter_->stop();
  }
  // Scrapes every 100 ms until `stop`; fails any that is not answered whole within a second.
  void scrapeUntil(const std::atomic<bool>& stop, int* answered, double* slowest) {
    while (!stop) {
      double took = 0;
      const std::string status = scrape(port_, 2.0, &took);
      EXPECT_EQ(status, "HTTP/1.1 200 OK +") << "a scrape beside the slow clients got no whole answer";
      EXPECT_LT(took, 1.0);
      *slowest = std::max(*slowest, took);
      ++*answered;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::unique_ptr<Meter> meter_;
  tpscope::cli::MetricsServer server_;
  int port_ = 0;
};

// Eight clients that each send a byte of their request every half second would hold every worker of a
// server that bounds each read only: here each is dropped by the deadline for its whole request, and
// scrapes are answered all along.
TEST_F(MeterServeLoopback, TricklingClientsAreDroppedByTheDeadlineWhileScrapesAreAnswered) {
  std::atomic<bool> stop{false};
  int answered = 0;
  double slowest = 0;
  std::thread scraper([&] { scrapeUntil(stop, &answered, &slowest); });
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::vector<double> held(2 * tpscope::cli::kServeWorkers, -1);
  std::vector<std::thread> tricklers;
  for (size_t i = 0; i < held.size(); ++i)
    tricklers.emplace_back([&, i] {
      const auto t0 = Clock::now();
      const int fd = connectTo(port_);
      if (fd < 0) return;
      for (size_t k = 0; k < request.size() && since(t0) < 6; ++k) {
        if (send(fd, &request[k], 1, MSG_NOSIGNAL) != 1) break;  // the server closed it
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 500) == 1) {
          char c;
          if (recv(fd, &c, 1, 0) <= 0) break;  // closed, with nothing said
        }
      }
      held[i] = since(t0);
      close(fd);
    });
  for (std::thread& t : tricklers) t.join();
  stop = true;
  scraper.join();
  for (double h : held) {
    EXPECT_GE(h, tpscope::cli::kServeDeadlineMs / 1000.0 - 0.2) << "dropped before its deadline";
    EXPECT_LT(h, tpscope::cli::kServeDeadlineMs / 1000.0 + 0.8) << "held past its deadline";
  }
  EXPECT_GE(answered, 15);
}

// Connections that say nothing, more of them than the server keeps waiting: the oldest are dropped,
// memory stays bounded, and a scrape made while they all wait is answered at once.
TEST_F(MeterServeLoopback, IdleConnectionsBeyondTheCapNeitherBlockScrapesNorGrowMemory) {
  auto rss_kb = [] {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return 0L;
  };
  const long rss_before = rss_kb();
  std::vector<int> idle;
  for (size_t i = 0; i < tpscope::cli::kServeWaiting + 200; ++i) {
    const int fd = connectTo(port_);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_EQ(idle.size(), tpscope::cli::kServeWaiting + 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 5; ++i) {
    double took = 0;
    EXPECT_EQ(scrape(port_, 2.0, &took), "HTTP/1.1 200 OK +");
    EXPECT_LT(took, 0.5);
  }
  // The first 200 were dropped for the newer ones (closed: recv gives 0 at once).
  int closed = 0;
  for (size_t i = 0; i < 200; ++i) {
    pollfd p{idle[i], POLLIN, 0};
    char c;
    closed += poll(&p, 1, 0) == 1 && recv(idle[i], &c, 1, MSG_DONTWAIT) == 0;
  }
  EXPECT_GE(closed, 195);
  EXPECT_LT(rss_kb() - rss_before, 32 * 1024) << "kB grown";
  // And by their deadline every one is gone.
  std::this_thread::sleep_for(std::chrono::milliseconds(tpscope::cli::kServeDeadlineMs + 500));
  int gone = 0;
  for (int fd : idle) {
    pollfd p{fd, POLLIN, 0};
    char c;
    gone += poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) == 0;
    close(fd);
  }
  EXPECT_EQ(gone, static_cast<int>(idle.size()));
}

// A request whose head comes whole but whose body trickles holds a worker until its deadline, never longer.
TEST_F(MeterServeLoopback, ASlowBodyIsCutAtTheDeadline) {
  const auto t0 = Clock::now();
  const int fd = connectTo(port_);
  ASSERT_GE(fd, 0);
  const std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  double closed_at = -1;
  for (int i = 0; i < 100 && since(t0) < 6; ++i) {
    if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 300) == 1) {
      char buf[4096];
      if (recv(fd, buf, sizeof(buf), 0) <= 0) break;
    }
  }
  closed_at = since(t0);
  close(fd);
  EXPECT_GT(closed_at, tpscope::cli::kServeDeadlineMs / 1000.0 - 0.3) << "answered before its body came";
  EXPECT_LT(closed_at, tpscope::cli::kServeDeadlineMs / 1000.0 + 0.8);
}

}  // namespace
