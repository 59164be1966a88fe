// SPDX-License-Identifier: Apache-2.0
// process.h - a child program that cannot outlive tpscope: started with its own environment and log,
// stopped with SIGTERM and then SIGKILL.
//
// The child asks the kernel for SIGKILL when the thread that started it dies (PR_SET_PDEATHSIG), so a
// tpscope that is interrupted, crashes or is killed -9 takes its server with it. Start children from
// the thread that lives longest (the CLI's main thread): the signal follows that thread, not the process.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpscope::engine {

struct SpawnOptions {
  std::vector<std::string> argv;                         // argv[0]: a path, or a name looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set (or replaced) over tpscope's environment
  std::vector<std::string> unset;                        // removed from it
  std::string log_path;                                  // stdout and stderr go here (created, appended); "": /dev/null
};

class ChildProcess {
 public:
  // Starts the program. false with *error (one sentence) when it cannot be found or started; a program
  // that starts and fails later is seen through running() / exitDescription().
  static bool spawn(const SpawnOptions& options, std::unique_ptr<ChildProcess>* out, std::string* error);
  ~ChildProcess();  // stop(5 s) if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reaps the child if it has exited; true while it runs.
  bool running();
  // "exited with status 1", "killed by signal 9 (Killed)"; "running" while it runs.
  std::string exitDescription() const;
  // SIGTERM, then SIGKILL after grace_s; returns how it ended. Idempotent.
  std::string stop(double grace_s);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace tpscope::engine
