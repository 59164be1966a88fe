// SPDX-License-Identifier: Apache-2.0
// cli_runner.h - runs the built tpscope binary with shell words and captures exit code, stdout, stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tpscope::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// The tpscope binary beside the running test binary (both land in build/bin), else the path CMake
// compiled in: a build folder carried to a GPU machine under another path still finds its own binary.
inline std::string tpscopePath() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    const std::string sibling = dir.substr(0, dir.rfind('/') + 1) + "tpscope";
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return TPSCOPE_CLI_PATH;
}

// `args` are shell words appended to the binary's path; `env` is prefixed ("A=1 B=2").
inline CliResult runTpscope(const std::string& args, const std::string& env = "") {
  char err_path[] = "/tmp/tpscope_cli_runner_XXXXXX";
  const int fd = mkstemp(err_path);
  close(fd);
  const std::string cmd = env + (env.empty() ? "" : " ") + tpscopePath() + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  FILE* e = fopen(err_path, "r");
  while ((n = fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
  fclose(e);
  remove(err_path);
  return r;
}

inline int lineCount(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// The python `tpscope report --plots` will use: TPSCOPE_PYTHON, else python3 on PATH, else /usr/bin/python3
// (the first that imports matplotlib). Plot tests skip, with this reason, when it has no matplotlib.
inline bool importsMatplotlib(const std::string& py) {
  return std::system((py + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0;
}
inline std::string plotPython() {
  const char* p = std::getenv("TPSCOPE_PYTHON");
  if (p && *p) return p;
  return importsMatplotlib("python3") ? "python3" : "/usr/bin/python3";
}
inline bool haveMatplotlib() { return importsMatplotlib(plotPython()); }
inline std::string noMatplotlibReason() {
  return plotPython() +
         " has no matplotlib (scripts/setup installs python3-matplotlib; TPSCOPE_PYTHON picks another python)";
}

}  // namespace tpscope::testing
