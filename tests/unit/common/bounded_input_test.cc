// SPDX-License-Identifier: Apache-2.0
// bounded_input_test - outside files read only when regular and within their cap, outside JSON parsed
// only within its depth limit, each refusal one sentence naming where (src/common/bounded_input.h).
#include "common/bounded_input.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

namespace tpscope {
namespace {

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(BoundedJson, DepthUpToTheLimitParses) {
  std::string error;
  const std::optional<nlohmann::json> j = parseJsonBounded(nested(kMaxJsonDepth), &error);
  ASSERT_TRUE(j) << error;
  const nlohmann::json copy = *j;  // copies and dumps recurse once per level: bounded here
  EXPECT_EQ(copy.dump(), nested(kMaxJsonDepth));
}

TEST(BoundedJson, OneLevelMoreIsRefusedWithItsLine) {
  std::string error;
  EXPECT_FALSE(parseJsonBounded(nested(kMaxJsonDepth + 1), &error));
  EXPECT_EQ(error, "line 1: arrays and objects nested deeper than 64 levels");
  // Objects count as levels too, and the line is the one where the limit is passed.
  std::string text = "{\n\"a\": 1,\n\"meter\":\n";
  for (int i = 0; i < 100; ++i) text += "{\"x\": ";
  text += "0" + std::string(100, '}') + "}";
  EXPECT_FALSE(parseJsonBounded(text, &error));
  EXPECT_EQ(error, "line 4: arrays and objects nested deeper than 64 levels");
  // A bracket inside a string is no level.
  EXPECT_TRUE(parseJsonBounded("[\"" + std::string(1000, '[') + "\"]", &error)) << error;
}

// The depth that crashed the run-folder reader (a recursive copy overflowed the stack): refused at once.
TEST(BoundedJson, AMillionLevelsAreRefusedWithoutRecursion) {
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(parseJsonBounded(nested(1000000), &error));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_NE(error.find("nested deeper than 64 levels"), std::string::npos) << error;
  EXPECT_FALSE(parseJsonBounded(std::string(1000000, '['), &error));  // never closed
  EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
}

// Values are capped per document, whatever its size in bytes: an array of kMaxJsonValues - 1 numbers (the
// array itself is a value) parses, one more does not.
TEST(BoundedJson, ValuesAreCappedPerDocument) {
  auto array = [](size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += i ? ",0" : "0";
    return s + "]";
  };
  std::string error;
  EXPECT_TRUE(parseJsonBounded(array(kMaxJsonValues - 1), &error)) << error;
  EXPECT_FALSE(parseJsonBounded(array(kMaxJsonValues), &error));
  EXPECT_EQ(error, "more than 1048576 values in one document");
}

TEST(BoundedJson, ANumberBeyondADoubleIsNamedWithItsKeyAndLine) {
  std::string error;
  EXPECT_FALSE(parseJsonBounded("{\"a\": 1,\n \"tok_s\" : 1e999}", &error));
  EXPECT_EQ(error, "line 2: \"tok_s\" = 1e999 is not a finite number");
  EXPECT_FALSE(parseJsonBounded("[1, -1e400]", &error));
  EXPECT_EQ(error, "line 1: -1e400 is not a finite number");
  EXPECT_TRUE(parseJsonBounded("[1.7976931348623157e308]", &error)) << error;  // the largest double
}

TEST(BoundedJson, SyntaxErrorsSayWhereWithoutThePrefix) {
  std::string error;
  EXPECT_FALSE(parseJsonBounded("{\"a\":\n tru}", &error));
  EXPECT_EQ(error.rfind("parse error at line 2, column ", 0), 0u) << error;
  EXPECT_FALSE(parseJsonBounded("", &error));
  EXPECT_NE(error.find("parse error"), std::string::npos) << error;
}

class BoundedFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tpscope_bounded_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(BoundedFile, ARegularFileWithinItsCapIsReadWhole) {
  std::ofstream(dir_ + "/f") << "0123456789";
  std::string text, error;
  EXPECT_EQ(readRegularFile(dir_ + "/f", 10, &text, &error), FileReadError::kNone) << error;
  EXPECT_EQ(text, "0123456789");
  EXPECT_EQ(readRegularFile(dir_ + "/f", 9, &text, &error), FileReadError::kTooLarge);
  EXPECT_EQ(error, dir_ + "/f is larger than the 9 bytes tpscope reads of it");
  EXPECT_EQ(readRegularFile(dir_ + "/none", 9, &text, &error), FileReadError::kMissing);
}

// A folder, a FIFO no one writes (opening it for reading would wait for a writer), a device without end,
// a link to one: refused at once, naming the path.
TEST_F(BoundedFile, AnythingButARegularFileIsRefusedAtOnce) {
  std::filesystem::create_directories(dir_ + "/folder");
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  std::filesystem::create_symlink("/dev/zero", dir_ + "/zero");
  std::string text, error;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& p : {dir_ + "/folder", dir_ + "/fifo", std::string("/dev/zero"), dir_ + "/zero"}) {
    EXPECT_EQ(readRegularFile(p, size_t{1} << 30, &text, &error), FileReadError::kNotRegular) << p;
    EXPECT_EQ(error, p + " is not a regular file (a folder, FIFO, device or socket)");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// The cap is checked before anything is read: a sparse file of 4 GiB costs nothing.
TEST_F(BoundedFile, TheCapIsCheckedBeforeReading) {
  const std::string big = dir_ + "/big";
  std::ofstream(big).close();
  std::filesystem::resize_file(big, uintmax_t{4} << 30);
  std::string text, error;
  EXPECT_EQ(readRegularFile(big, size_t{1} << 20, &text, &error), FileReadError::kTooLarge);
  EXPECT_EQ(error, big + " is larger than the 1 MiB tpscope reads of it");
  EXPECT_TRUE(text.empty());
}

}  // namespace
}  // namespace tpscope
