// SPDX-License-Identifier: Apache-2.0
// meter/meter_serve.h - `tpscope meter --serve [ADDR:]PORT`: the meter's counters for Prometheus at /metrics.
//
// Threads, all bounded: the listener, kServeWorkers workers that answer scrapes (kServeQueue more
// connections wait; beyond that a connection is closed at once), and a link watcher that reads each
// GPU's PCIe link every few seconds and says once on stderr when one trained below its maximum.
// A slow or silent client holds a worker for at most the read/write timeout. Request bodies and
// headers are capped, so memory stays bounded whatever the scrapers send.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meter/meter.h"

namespace httplib {
class Server;
}

namespace tpscope::cli {

constexpr int kServeWorkers = 8;
constexpr int kServeQueue = 128;

struct ServeAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (the line on stderr says which)
};
// "9400" (loopback), "0.0.0.0:9400", "host.example:9400", "[::1]:9400". nullopt with *error for
// anything else (a port outside 0-65535, an empty host, junk).
std::optional<ServeAddress> parseServeAddress(const std::string& text, std::string* error);

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds the address; false with one sentence in *error when it cannot (in use, not an address of
  // this machine, a privileged port). Nothing is served before serve().
  bool bind(const ServeAddress& address, std::string* error);
  int port() const { return port_; }  // the bound port
  // Answers scrapes from `meter` (which must outlive stop()) on the listener's own thread.
  void serve(const Meter& meter);
  // Stops listening, finishes the scrapes in flight and joins every thread. Idempotent.
  void stop();

 private:
  void watchLinks();      // the watcher thread: watchLinksOnce() every few seconds until stop()
  void watchLinksOnce();  // reads every GPU's link; one line on stderr the first time one is below max

  std::unique_ptr<httplib::Server> http_;
  const Meter* meter_ = nullptr;
  int port_ = 0;
  double start_unix_s_ = 0;
  std::thread listener_, watcher_;
  std::mutex mu_;  // guards links_, warned_, stopping_
  std::condition_variable cv_;
  std::vector<MeterPcieLink> links_;
  std::vector<bool> warned_;
  bool stopping_ = false;
};

// `tpscope meter --serve` without a command: the scrapes are the output, until SIGINT/SIGTERM; exit 0.
int runServing(Meter& meter);

}  // namespace tpscope::cli
