// SPDX-License-Identifier: Apache-2.0
// meter/meter_serve.cc - the /metrics endpoint of `tpscope meter --serve` (cpp-httplib).
#include "meter/meter_serve.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>

#include "cli.h"
#include "meter/exposition.h"
#include "meter/meter_signals.h"

namespace tpscope::cli {

namespace {

constexpr int kLinkEverySeconds = 5;  // PCIe link generation and width are read this often
constexpr size_t kMaxBody = 4096;     // a scrape has no body; anything bigger is refused (413)

using Clock = std::chrono::steady_clock;

// "Gen4 x16"; a part NVML cannot say is left out ("Gen4", "x8").
std::string gen(const std::optional<int>& g, const std::optional<int>& w) {
  const std::string a = g ? "Gen" + std::to_string(*g) : "", b = w ? "x" + std::to_string(*w) : "";
  return a.empty() || b.empty() ? a + b : a + " " + b;
}

double unixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

int msUntil(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(t - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, (left + 999) / 1000));
}

void drop(int fd) {
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

// A connection the front holds: its socket, when it must be answered by, and the bytes of its request
// read so far.
struct Connection {
  int fd = -1;
  Clock::time_point accepted, deadline;
  std::string head;
};

bool headWhole(const std::string& head) { return head.find("\r\n\r\n") != std::string::npos; }

// The stream cpp-httplib's request handling reads and writes: first the bytes the front read, then the
// socket, every wait bounded by the connection's deadline (a read or write past it fails, and the
// connection is dropped).
class DeadlineStream : public httplib::Stream {
 public:
  explicit DeadlineStream(const Connection& c) : c_(c) {}
  bool is_readable() const override { return pos_ < c_.head.size(); }
  bool wait_readable() const override { return is_readable() || waitFor(POLLIN); }
  bool wait_writable() const override { return waitFor(POLLOUT); }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < c_.head.size()) {
      const size_t n = std::min(size, c_.head.size() - pos_);
      std::memcpy(ptr, c_.head.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    for (;;) {
      if (!waitFor(POLLIN)) return -1;
      const ssize_t n = recv(c_.fd, ptr, size, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      return n;
    }
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!waitFor(POLLOUT)) return -1;
      const ssize_t n = send(c_.fd, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip.clear(), port = 0; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip.clear(), port = 0; }
  socket_t socket() const override { return c_.fd; }
  time_t duration() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c_.accepted).count();
  }

 private:
  bool waitFor(short events) const {
    for (;;) {
      const int ms = msUntil(c_.deadline);
      if (ms <= 0) return false;
      pollfd p{c_.fd, events, 0};
      const int r = poll(&p, 1, ms);
      if (r < 0 && errno == EINTR) continue;
      return r > 0;
    }
  }
  const Connection& c_;
  size_t pos_ = 0;
};

// Runs each task the moment the listener gives it: the task hands the accepted socket to the front.
class InlineQueue : public httplib::TaskQueue {
 public:
  bool enqueue(std::function<void()> fn) override {
    fn();
    return true;
  }
  void shutdown() override {}
};

}  // namespace

// cpp-httplib's server with its connection handling replaced: the listener's accepted sockets go to the
// front (process_and_close_socket, which httplib calls for each), and a worker answers a connection
// whose head came whole with httplib's own request handling (process_request).
class MetricsHttp : public httplib::Server {
 public:
  explicit MetricsHttp(ServeFront* front) : front_(front) {}
  void answer(const Connection& c) {
    DeadlineStream stream(c);
    bool closed = false;
    try {
      (void)process_request(stream, "", 0, "", 0, /*close_connection=*/true, closed, nullptr);
    } catch (...) {  // a handler's exception must not end the worker; the connection is dropped
    }
  }

 private:
  bool process_and_close_socket(socket_t sock) override;
  ServeFront* front_;
};

class ServeFront {
 public:
  ServeFront() : http_(this) {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  }
  ~ServeFront() {
    stop();
    for (int fd : wake_)
      if (fd >= 0) close(fd);
  }
  MetricsHttp& http() { return http_; }

  void start() {
    front_ = std::thread([this] { frontLoop(); });
    for (int i = 0; i < kServeWorkers; ++i) workers_.emplace_back([this] { workerLoop(); });
    listener_ = std::thread([this] { http_.listen_after_bind(); });
    http_.wait_until_ready();
  }

  void stop() {
    http_.stop();  // closes the listening socket; the listener's loop ends
    if (listener_.joinable()) listener_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake();
    if (front_.joinable()) front_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Connection& c : ready_) drop(c.fd);
      ready_.clear();
      for (int fd : incoming_) drop(fd);
      incoming_.clear();
    }
    ready_cv_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  // From the listener's thread: a new connection for the front.
  void admit(int fd) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        drop(fd);
        return;
      }
      if (incoming_.size() >= kServeWaiting) {
        drop(incoming_.front());
        incoming_.erase(incoming_.begin());
      }
      incoming_.push_back(fd);
    }
    wake();
  }

 private:
  void wake() {
    if (wake_[1] >= 0) (void)!::write(wake_[1], "w", 1);  // a full pipe has woken the front already
  }

  // The front's thread: reads the heads of the waiting connections as they come, hands each whole one
  // to the workers, drops the ones past their deadline, and keeps at most kServeWaiting.
  void frontLoop() {
    std::deque<Connection> waiting;  // in the order they came
    std::vector<pollfd> fds;
    for (;;) {
      fds.assign(1, pollfd{wake_[0], POLLIN, 0});
      int wait_ms = -1;
      for (const Connection& c : waiting) {
        fds.push_back({c.fd, POLLIN, 0});
        const int ms = msUntil(c.deadline);
        wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
      }
      if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
      char sink[64];
      while (::read(wake_[0], sink, sizeof(sink)) > 0) {
      }
      std::vector<int> fresh;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
        fresh.swap(incoming_);
      }
      // What came on each connection, in the order they came.
      size_t i = 1;
      for (auto it = waiting.begin(); it != waiting.end(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          ++it;
          continue;
        }
        char buf[2048];
        const size_t room = kServeHeadBytes - it->head.size();
        const ssize_t n = recv(it->fd, buf, std::min(room, sizeof(buf)), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          ++it;
          continue;
        }
        if (n <= 0) {
          drop(it->fd);
          it = waiting.erase(it);
          continue;
        }
        it->head.append(buf, static_cast<size_t>(n));
        // A head at the cap goes to a worker too: httplib answers what it cannot parse with 400.
        if (headWhole(it->head) || it->head.size() >= kServeHeadBytes) {
          handOver(std::move(*it));
          it = waiting.erase(it);
          continue;
        }
        ++it;
      }
      const Clock::time_point now = Clock::now();
      for (auto it = waiting.begin(); it != waiting.end();) {
        if (now < it->deadline) {
          ++it;
          continue;
        }
        drop(it->fd);
        it = waiting.erase(it);
      }
      for (int fd : fresh) {
        Connection c;
        c.fd = fd;
        c.accepted = now;
        c.deadline = now + std::chrono::milliseconds(kServeDeadlineMs);
        waiting.push_back(std::move(c));
        if (waiting.size() > kServeWaiting) {
          drop(waiting.front().fd);
          waiting.pop_front();
        }
      }
    }
    for (const Connection& c : waiting) drop(c.fd);
  }

  void handOver(Connection c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(c));
      if (ready_.size() > kServeQueue) {
        drop(ready_.front().fd);
        ready_.pop_front();
      }
    }
    ready_cv_.notify_one();
  }

  void workerLoop() {
    for (;;) {
      Connection c;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
        if (ready_.empty()) return;
        c = std::move(ready_.front());
        ready_.pop_front();
      }
      if (Clock::now() < c.deadline) http_.answer(c);
      drop(c.fd);
    }
  }

  MetricsHttp http_;
  std::thread listener_, front_;
  std::vector<std::thread> workers_;
  std::mutex mu_;  // guards incoming_, ready_, stopping_
  std::condition_variable ready_cv_;
  std::vector<int> incoming_;     // accepted, not yet taken by the front's thread
  std::deque<Connection> ready_;  // heads whole, waiting for a worker
  bool stopping_ = false;
  int wake_[2] = {-1, -1};  // a self-pipe: wakes the front's poll() for new connections and for stop()
};

bool MetricsHttp::process_and_close_socket(socket_t sock) {
  front_->admit(sock);
  return true;
}

std::optional<ServeAddress> parseServeAddress(const std::string& text, std::string* error) {
  ServeAddress a;
  std::string port = text;
  if (!text.empty() && text[0] == '[') {  // [IPv6]:PORT
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = "--serve '" + text + "': write an IPv6 address as [ADDR]:PORT";
      return std::nullopt;
    }
    a.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
    if (text.find(':') != colon) {
      *error = "--serve '" + text + "': write an IPv6 address in brackets, [ADDR]:PORT";
      return std::nullopt;
    }
    a.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (a.host.empty() || port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535) {
    *error = "--serve takes [ADDR:]PORT with a port 0-65535 (0: any free port), not '" + text + "'";
    return std::nullopt;
  }
  a.port = std::stoi(port);
  return a;
}

MetricsServer::MetricsServer() : front_(std::make_unique<ServeFront>()) {
  httplib::Server& http = front_->http();
  // Every accepted socket goes straight to the front (InlineQueue runs the listener's task at once).
  http.new_task_queue = [] { return new InlineQueue; };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second meter share the
  // port silently (the kernel would split the scrapes between the two) instead of failing to bind.
  http.set_socket_options([](int sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  http.set_payload_max_length(kMaxBody);
}

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::bind(const ServeAddress& address, std::string* error) {
  errno = 0;
  httplib::Server& http = front_->http();
  port_ = address.port == 0 ? http.bind_to_any_port(address.host) : address.port;
  const bool ok = address.port == 0 ? port_ > 0 : http.bind_to_port(address.host, address.port);
  if (ok) return true;
  const int err = errno;
  const std::string where = (address.host.find(':') != std::string::npos ? "[" + address.host + "]" : address.host) +
                            ":" + std::to_string(address.port);
  if (err == EADDRINUSE)
    *error = "cannot serve on " + where + ": the port is in use (another meter or exporter?); choose another port";
  else if (err == EACCES)
    *error =
        "cannot serve on " + where + ": permission denied (ports below 1024 need privileges); choose a port >= 1024";
  else
    *error = "cannot serve on " + where + ": " + (err ? std::strerror(err) : "no such address") +
             " (name an address of this machine, e.g. 127.0.0.1 or 0.0.0.0)";
  return false;
}

void MetricsServer::serve(const Meter& meter) {
  meter_ = &meter;
  start_unix_s_ = unixNow();
  links_.resize(meter.gpus().size());
  warned_.assign(meter.gpus().size(), false);
  httplib::Server& http = front_->http();
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    detail::ExpositionContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ctx.links = links_;
    }
    ctx.start_unix_s = start_unix_s_;
    res.set_content(detail::renderMetrics(*meter_, ctx), detail::kMetricsContentType);
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("tpscope meter: Prometheus metrics at /metrics\n", "text/plain; charset=utf-8");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content("tpscope meter: the metrics could not be rendered\n", "text/plain; charset=utf-8");
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = false;
  }
  watchLinksOnce();  // the first scrape already has the link gauges
  watcher_ = std::thread([this] { watchLinks(); });
  front_->start();
}

void MetricsServer::watchLinksOnce() {
  for (size_t k = 0; k < meter_->gpus().size(); ++k) {
    const MeterPcieLink l = meter_->pcieLink(static_cast<int>(k));
    std::lock_guard<std::mutex> lock(mu_);
    links_[k] = l;
    if (l.belowMax() && !warned_[k]) {
      warned_[k] = true;  // one line per GPU: an idle link that trains down and up again is no news
      const MeterGpu& g = meter_->gpus()[k];
      std::fprintf(stderr,
                   "tpscope: GPU %d (%s) PCIe link trained at %s, below its %s maximum: its PCIe counters cannot "
                   "show more than that link carries (an idle GPU may train down to save power; "
                   "tpscope_pcie_link_below_max follows it)\n",
                   g.index, g.bus_id.c_str(), gen(l.gen_current, l.width_current).c_str(),
                   gen(l.gen_max, l.width_max).c_str());
    }
  }
}

void MetricsServer::watchLinks() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(kLinkEverySeconds), [this] { return stopping_; })) {
    lock.unlock();
    watchLinksOnce();
    lock.lock();
  }
}

void MetricsServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (front_) front_->stop();
}

// --serve without a command: the scrapes are the output; ends at SIGINT/SIGTERM, exit 0.
int runServing(Meter& meter) {
  while (meterInterrupts() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  meter.stop();
  return kExitOk;
}

}  // namespace tpscope::cli
