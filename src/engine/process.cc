// SPDX-License-Identifier: Apache-2.0
// process.cc - fork + execve with everything the child needs prepared before the fork, since a
// multithreaded parent's child may only make async-signal-safe calls until it execs.
#include "engine/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace tpscope::engine {

namespace {

// argv[0] as execve needs it: a path as given, or the first executable of that name in PATH.
std::string resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t i = 0;
  while (i <= dirs.size()) {
    const size_t j = std::min(dirs.find(':', i), dirs.size());
    const std::string candidate = (j > i ? dirs.substr(i, j - i) : ".") + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    i = j + 1;
  }
  return "";
}

std::vector<std::string> environment(const SpawnOptions& o) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    bool drop = false;
    for (const std::string& u : o.unset) drop |= key == u;
    for (const auto& kv : o.env) drop |= key == kv.first;
    if (!drop) env.push_back(entry);
  }
  for (const auto& [k, v] : o.env) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (std::string& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

bool ChildProcess::spawn(const SpawnOptions& o, std::unique_ptr<ChildProcess>* out, std::string* error,
                         int* error_number) {
  auto failed = [&](int e, std::string message) {
    *error = std::move(message);
    if (error_number) *error_number = e;
    return false;
  };
  if (o.argv.empty()) return failed(EINVAL, "no program to start");
  const std::string path = resolve(o.argv[0]);
  struct stat st {};
  int unusable = 0;  // why the file cannot be run, as an errno
  if (path.empty())
    unusable = ENOENT;
  else if (stat(path.c_str(), &st) != 0)
    unusable = errno;
  else if (!S_ISREG(st.st_mode))
    unusable = EACCES;
  else if (access(path.c_str(), X_OK) != 0)
    unusable = errno;
  if (unusable != 0)
    return failed(unusable,
                  "'" + o.argv[0] + "' is not an executable file" + (path.empty() ? " (not found in PATH)" : ""));
  std::vector<std::string> args = o.argv, env = environment(o);
  std::vector<char*> argv = pointers(args), envp = pointers(env);
  int log = -1;
  if (!o.inherit_stdio) {
    log = open(o.log_path.empty() ? "/dev/null" : o.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) {
      const int e = errno;
      return failed(e, "cannot open the log " + o.log_path + ": " + std::strerror(e));
    }
  }
  auto closeLog = [&] {
    if (log >= 0) close(log);
  };
  // exec's failure comes back through a close-on-exec pipe: EOF means the exec succeeded.
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    const int e = errno;
    closeLog();
    return failed(e, std::string("pipe: ") + std::strerror(e));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    closeLog(), close(report[0]), close(report[1]);
    return failed(e, std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGPIPE, &dfl, nullptr);  // ignored in tpscope while it serves HTTP (`meter --serve`)
    if (o.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before the line above took effect
    }
    if (log >= 0) {
      const int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    execve(path.c_str(), argv.data(), envp.data());
    const int e = errno;
    (void)!write(report[1], &e, sizeof(e));
    _exit(127);
  }
  closeLog();
  close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do n = read(report[0], &child_errno, sizeof(child_errno));
  while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == sizeof(child_errno)) {
    waitpid(pid, nullptr, 0);
    return failed(child_errno, "cannot start " + path + ": " + std::strerror(child_errno));
  }
  out->reset(new ChildProcess(pid));
  return true;
}

ChildProcess::~ChildProcess() { stop(5); }

bool ChildProcess::running() {
  if (reaped_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    status_ = status;
    return false;
  }
  return true;
}

bool ChildProcess::wait() {
  if (reaped_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, 0);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    status_ = status;
    return true;
  }
  return false;  // EINTR
}

int ChildProcess::exitCode() const {
  if (!reaped_) return -1;
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return 1;
}

std::string ChildProcess::exitDescription() const {
  if (!reaped_) return "running";
  if (WIFEXITED(status_)) return "exited with status " + std::to_string(WEXITSTATUS(status_));
  if (WIFSIGNALED(status_))
    return "killed by signal " + std::to_string(WTERMSIG(status_)) + " (" + strsignal(WTERMSIG(status_)) + ")";
  return "ended";
}

std::string ChildProcess::stop(double grace_s) {
  if (!running()) return exitDescription();
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status_, 0);
      reaped_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exitDescription();
}

}  // namespace tpscope::engine
