// SPDX-License-Identifier: Apache-2.0
// meter/meter_serve.h - `tpscope meter --serve [ADDR:]PORT`: the meter's counters for Prometheus at /metrics.
//
// Connections pass a front before any worker sees them. cpp-httplib's listener accepts; the front's one
// thread then reads each connection's request line and headers as they come, with poll(), holding at
// most kServeWaiting connections (one more drops the oldest) of at most kServeHeadBytes each; only a
// connection whose head has come whole goes to one of kServeWorkers workers (kServeQueue more wait; one
// more drops the oldest), which answers it with cpp-httplib's request handling. Every connection has
// kServeDeadlineMs from its accept to the last byte of its answer, reads and writes together, and is
// dropped when that passes. So idle or trickling clients, however many, hold no worker and a bounded
// amount of memory, and a stalled one is gone within the deadline; a scrape that sends its request at
// once is answered beside them. One request per connection (the answer says Connection: close).
// A link watcher reads each GPU's PCIe link every few seconds and says once on stderr when one trained
// below its maximum.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meter/meter.h"

namespace tpscope::cli {

constexpr int kServeWorkers = 8;
constexpr size_t kServeQueue = 128;
constexpr size_t kServeWaiting = 512;     // below the usual 1024 open files a process may have
constexpr size_t kServeHeadBytes = 8192;  // a scrape's request line and headers are a few hundred bytes
constexpr int kServeDeadlineMs = 2000;

struct ServeAddress {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port (the line on stderr says which)
};
// "9400" (loopback), "0.0.0.0:9400", "host.example:9400", "[::1]:9400". nullopt with *error for
// anything else (a port outside 0-65535, an empty host, junk).
std::optional<ServeAddress> parseServeAddress(const std::string& text, std::string* error);

class ServeFront;  // meter_serve.cc: the listener, the front's thread and the workers

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds the address; false with one sentence in *error when it cannot (in use, not an address of
  // this machine, a privileged port). Nothing is served before serve().
  bool bind(const ServeAddress& address, std::string* error);
  int port() const { return port_; }  // the bound port
  // Answers scrapes from `meter` (which must outlive stop()) on the server's own threads.
  void serve(const Meter& meter);
  // Stops listening, drops the connections not yet answered, finishes the answers in flight and joins
  // every thread. Idempotent.
  void stop();

 private:
  void watchLinks();      // the watcher thread: watchLinksOnce() every few seconds until stop()
  void watchLinksOnce();  // reads every GPU's link; one line on stderr the first time one is below max

  std::unique_ptr<ServeFront> front_;
  const Meter* meter_ = nullptr;
  int port_ = 0;
  double start_unix_s_ = 0;
  std::thread watcher_;
  std::mutex mu_;  // guards links_, warned_, stopping_
  std::condition_variable cv_;
  std::vector<MeterPcieLink> links_;
  std::vector<bool> warned_;
  bool stopping_ = false;
};

// `tpscope meter --serve` without a command: the scrapes are the output, until SIGINT/SIGTERM; exit 0.
int runServing(Meter& meter);

}  // namespace tpscope::cli
