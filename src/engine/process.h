// SPDX-License-Identifier: Apache-2.0
// process.h - tpscope's one launcher of child programs (the engines' servers and commands, the command
// `tpscope meter -- CMD` wraps): started with its own environment and log, or on tpscope's terminal,
// stopped with SIGTERM and then SIGKILL.
//
// By default the child asks the kernel for SIGKILL when the thread that started it dies
// (PR_SET_PDEATHSIG), so a tpscope that is interrupted, crashes or is killed -9 takes its server with
// it. Start children from the thread that lives longest (the CLI's main thread): the signal follows
// that thread, not the process. Every child starts with SIGINT and SIGTERM at their defaults, even
// where tpscope's caller ignored them (a background job of a non-interactive shell), so it can be stopped.
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
  bool inherit_stdio = false;   // true: stdin, stdout and stderr are tpscope's own (log_path unused)
  bool die_with_parent = true;  // false: the child may outlive tpscope (no PR_SET_PDEATHSIG)
};

class ChildProcess {
 public:
  // Starts the program. false with *error (one sentence) when it cannot be found or started, and
  // *error_number (where given) the errno: ENOENT not found, EACCES not executable, or exec's own. A
  // program that starts and fails later is seen through running() / exitDescription().
  static bool spawn(const SpawnOptions& options, std::unique_ptr<ChildProcess>* out, std::string* error,
                    int* error_number = nullptr);
  ~ChildProcess();  // stop(5 s) if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Reaps the child if it has exited; true while it runs.
  bool running();
  // Blocks until the child exits (true) or a signal interrupts the wait (false).
  bool wait();
  // How it ended as a shell says it: the exit status, or 128 + the signal; -1 while it runs.
  int exitCode() const;
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
