// SPDX-License-Identifier: Apache-2.0
// command.cc - one run of a program that marks its phases on the control pipe.
#include "engine/command.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/process.h"
#include "meter/control.h"

namespace tpscope::engine {

tpsResult_t runMarkedCommand(const CommandOptions& o, std::vector<MarkedWindow>* windows, std::string* reason) {
  windows->clear();
  std::mutex mu;
  detail::WindowBook book;
  std::vector<std::string> problems;
  detail::ControlPipe pipe;
  const bool opened = pipe.open(
      [&](const std::string& line, int64_t t) {
        const detail::ControlLine c = detail::parseControlLine(line);
        std::lock_guard<std::mutex> lock(mu);
        std::optional<std::string> err;
        detail::ClosedWindow w;
        if (c.kind == detail::ControlLine::Kind::kBegin) {
          err = book.begin(c.name, t);
        } else if (c.kind == detail::ControlLine::Kind::kEnd) {
          err = book.end(c.name, t, &w);
          if (!err) windows->push_back({w.name, w.start_ns, w.end_ns});
        } else if (c.kind == detail::ControlLine::Kind::kMalformed) {
          err = c.error;
        }
        if (err) problems.push_back(fmt::format("\"{}\": {}", line, *err));
      },
      reason);
  if (!opened) return tpsSystemError;

  SpawnOptions sp;
  sp.argv = o.argv;
  sp.env = o.env;
  sp.env.emplace_back("TPSCOPE_METER_PIPE", pipe.path());
  sp.log_path = o.log_path;
  std::unique_ptr<ChildProcess> child;
  if (!ChildProcess::spawn(sp, &child, reason)) return tpsInvalidArgument;
  const auto t0 = std::chrono::steady_clock::now();
  bool timed_out = false;
  while (child->running()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > o.timeout_s) {
      child->stop(5);
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pipe.close();  // reads what the program wrote last
  std::ifstream f(o.log_path);
  std::stringstream log;
  log << f.rdbuf();
  const std::string tail = tailLines(log.str(), 6);
  const std::string end = tail.empty() ? "" : "; the end of its log (" + o.log_path + "):\n" + tail;
  std::lock_guard<std::mutex> lock(mu);
  if (timed_out) {
    *reason = fmt::format("the command did not finish within {:g} s and was stopped{}", o.timeout_s, end);
    return tpsTimeout;
  }
  if (child->exitDescription() != "exited with status 0") {
    *reason = fmt::format("the command {}{}", child->exitDescription(), end);
    return tpsSystemError;
  }
  if (!problems.empty()) {
    *reason = "the command wrote lines the control pipe could not use: " + problems.front();
    return tpsInvalidArgument;
  }
  if (book.openCount() > 0) {
    *reason = "the command began a window it never ended (every `begin NAME` needs an `end NAME`)";
    return tpsInvalidArgument;
  }
  return tpsSuccess;
}

}  // namespace tpscope::engine
