// SPDX-License-Identifier: Apache-2.0
// engine_command_test - the command engine in-process (src/engine/command.h): a program marks its windows
// on the control pipe while tpscope's reader thread books them and the launcher waits for it, so the
// sanitizer builds see the pipe's thread, the child process and the waiting side together.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/command.h"

namespace tpscope::engine {
namespace {

class EngineCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tpscope_engine_command_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CommandOptions script(const std::string& body) {
    const std::string path = dir_ + "/program.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
    CommandOptions o;
    o.argv = {path};
    o.log_path = dir_ + "/program.log";
    o.timeout_s = 30;
    return o;
  }
  std::string dir_;
};

TEST_F(EngineCommand, WindowsComeFromTheProgramsMarksInOrder) {
  const CommandOptions o = script(
      "p=\"$TPSCOPE_METER_PIPE\"\n"
      "for i in 1 2 3; do echo \"begin prefill\" > \"$p\"; echo \"end prefill\" > \"$p\"; done\n"
      "echo \"begin decode\" > \"$p\"; sleep 0.05; echo \"end decode\" > \"$p\"\n");
  std::vector<MarkedWindow> windows;
  std::string reason;
  ASSERT_EQ(runMarkedCommand(o, &windows, &reason), tpsSuccess) << reason;
  ASSERT_EQ(windows.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(windows[i].name, "prefill");
  EXPECT_EQ(windows[3].name, "decode");
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_LE(windows[i].start_ns, windows[i].end_ns);
    if (i > 0) EXPECT_LE(windows[i - 1].end_ns, windows[i].start_ns);
  }
  EXPECT_GE(windows[3].end_ns - windows[3].start_ns, 40'000'000);  // the program slept 50 ms inside it
}

TEST_F(EngineCommand, AWindowLeftOpenOrAFailedProgramIsAnError) {
  std::vector<MarkedWindow> windows;
  std::string reason;
  EXPECT_EQ(runMarkedCommand(script("echo \"begin decode\" > \"$TPSCOPE_METER_PIPE\"\n"), &windows, &reason),
            tpsInvalidArgument);
  EXPECT_NE(reason.find("never ended"), std::string::npos) << reason;
  EXPECT_EQ(runMarkedCommand(script("echo oops; exit 3\n"), &windows, &reason), tpsSystemError);
  EXPECT_NE(reason.find("exited with status 3"), std::string::npos) << reason;
  EXPECT_NE(reason.find("oops"), std::string::npos) << reason;
}

}  // namespace
}  // namespace tpscope::engine
