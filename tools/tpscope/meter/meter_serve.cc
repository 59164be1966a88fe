// SPDX-License-Identifier: Apache-2.0
// meter/meter_serve.cc - the /metrics endpoint of `tpscope meter --serve` (cpp-httplib).
#include "meter/meter_serve.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cli.h"
#include "meter/exposition.h"
#include "meter/meter_signals.h"

namespace tpscope::cli {

namespace {

constexpr int kTimeoutS = 1;          // read and write timeout of one connection (a scrape request is tiny)
constexpr int kKeepAliveS = 1;        // a connection that sends nothing is closed after this
constexpr int kLinkEverySeconds = 5;  // PCIe link generation and width are read this often
constexpr size_t kMaxBody = 4096;     // a scrape has no body; anything bigger is refused (413)

// "Gen4 x16"; a part NVML cannot say is left out ("Gen4", "x8").
std::string gen(const std::optional<int>& g, const std::optional<int>& w) {
  const std::string a = g ? "Gen" + std::to_string(*g) : "", b = w ? "x" + std::to_string(*w) : "";
  return a.empty() || b.empty() ? a + b : a + " " + b;
}

double unixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

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

MetricsServer::MetricsServer() : http_(std::make_unique<httplib::Server>()) {
  // Bounded threads and queue: beyond kServeWorkers scrapes at a time and kServeQueue waiting, a new
  // connection is closed at once instead of costing a thread.
  http_->new_task_queue = [] { return new httplib::ThreadPool(kServeWorkers, kServeWorkers, kServeQueue); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second meter share the
  // port silently (the kernel would split the scrapes between the two) instead of failing to bind.
  http_->set_socket_options([](int sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  http_->set_read_timeout(kTimeoutS, 0);
  http_->set_write_timeout(kTimeoutS, 0);
  http_->set_keep_alive_timeout(kKeepAliveS);
  http_->set_payload_max_length(kMaxBody);
}

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::bind(const ServeAddress& address, std::string* error) {
  errno = 0;
  port_ = address.port == 0 ? http_->bind_to_any_port(address.host) : address.port;
  const bool ok = address.port == 0 ? port_ > 0 : http_->bind_to_port(address.host, address.port);
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
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    detail::ExpositionContext ctx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ctx.links = links_;
    }
    ctx.start_unix_s = start_unix_s_;
    res.set_content(detail::renderMetrics(*meter_, ctx), detail::kMetricsContentType);
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("tpscope meter: Prometheus metrics at /metrics\n", "text/plain; charset=utf-8");
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content("tpscope meter: the metrics could not be rendered\n", "text/plain; charset=utf-8");
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = false;
  }
  watchLinksOnce();  // the first scrape already has the link gauges
  watcher_ = std::thread([this] { watchLinks(); });
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  http_->wait_until_ready();
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
  if (http_) http_->stop();  // closes the listening socket; the workers finish what they answer
  if (listener_.joinable()) listener_.join();
}

// --serve without a command: the scrapes are the output; ends at SIGINT/SIGTERM, exit 0.
int runServing(Meter& meter) {
  while (meterInterrupts() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  meter.stop();
  return kExitOk;
}

}  // namespace tpscope::cli
