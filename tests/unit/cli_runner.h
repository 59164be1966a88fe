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

// `args` are shell words appended to the binary's path (TPSCOPE_CLI_PATH); `env` is prefixed ("A=1 B=2").
inline CliResult runTpscope(const std::string& args, const std::string& env = "") {
  char err_path[] = "/tmp/tpscope_cli_runner_XXXXXX";
  const int fd = mkstemp(err_path);
  close(fd);
  const std::string cmd = env + (env.empty() ? "" : " ") + TPSCOPE_CLI_PATH + " " + args + " 2>" + err_path;
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

}  // namespace tpscope::testing
