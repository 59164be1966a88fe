// SPDX-License-Identifier: Apache-2.0
// param_test - unit tests for src/common/param.cc and src/common/log.cc parsing.
#include "common/param.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/log.h"

namespace tpscope {
namespace {

TEST(Param, ParsesIntegersWithBinarySuffixes) {
  EXPECT_EQ(parseInt("4096"), 4096);
  EXPECT_EQ(parseInt("64K"), 65536);
  EXPECT_EQ(parseInt("1m"), 1 << 20);
  EXPECT_EQ(parseInt("2G"), int64_t{2} << 30);
  EXPECT_EQ(parseInt("-5"), -5);
}

TEST(Param, RejectsGarbage) {
  EXPECT_FALSE(parseInt(""));
  EXPECT_FALSE(parseInt("K"));
  EXPECT_FALSE(parseInt("12x"));
  EXPECT_FALSE(parseInt("1.5M"));
  EXPECT_FALSE(parseInt("99999999999999999999"));
  EXPECT_FALSE(parseBytes("-1"));
}

TEST(Param, BytesAcceptATrailingB) {
  EXPECT_EQ(parseBytes("8KB"), 8192u);
  EXPECT_EQ(parseBytes("256MB"), 256u << 20);
  EXPECT_EQ(parseBytes("1G"), 1u << 30);
  EXPECT_EQ(parseBytes("17"), 17u);
}

TEST(Param, EnvironmentIsReadWithFallbackOnBadValues) {
  setenv("TPSCOPE_TEST_PARAM_A", "32K", 1);
  EXPECT_EQ(detail::readIntParam("TPSCOPE_TEST_PARAM_A", 7), 32768);
  setenv("TPSCOPE_TEST_PARAM_B", "lots", 1);
  EXPECT_EQ(detail::readIntParam("TPSCOPE_TEST_PARAM_B", 7), 7);
  unsetenv("TPSCOPE_TEST_PARAM_C");
  EXPECT_EQ(detail::readIntParam("TPSCOPE_TEST_PARAM_C", 9), 9);
  EXPECT_EQ(detail::readStringParam("TPSCOPE_TEST_PARAM_C", "auto"), "auto");
}

TEST(Log, LevelNamesParseCaseInsensitively) {
  LogLevel l = LogLevel::kNone;
  EXPECT_TRUE(parseLogLevel("info", &l));
  EXPECT_EQ(l, LogLevel::kInfo);
  EXPECT_TRUE(parseLogLevel("TRACE", &l));
  EXPECT_EQ(l, LogLevel::kTrace);
  EXPECT_FALSE(parseLogLevel("verbose", &l));
}

}  // namespace
}  // namespace tpscope
