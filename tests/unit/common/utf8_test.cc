// SPDX-License-Identifier: Apache-2.0
// utf8_test - outside text checked and repaired for JSON records (src/common/utf8.h).
#include "common/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tpscope {
namespace {

TEST(Utf8, ValidTextPassesUnchanged) {
  for (const char* s : {"", "prefill", "d\xc3\xa9j\xc3\xa0 vu", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xef\xbf\xbd"}) {
    EXPECT_TRUE(isUtf8(s)) << s;
    EXPECT_EQ(toUtf8(s), s);
  }
}

TEST(Utf8, InvalidBytesBecomeTheReplacementCharacterAndThenWrite) {
  // A lone continuation byte, a cut sequence, an overlong '/', a surrogate, a byte never in UTF-8.
  for (const char* s : {"a\x80z", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "x\xff"}) {
    EXPECT_FALSE(isUtf8(s)) << s;
    const std::string fixed = toUtf8(s);
    EXPECT_TRUE(isUtf8(fixed));
    EXPECT_NE(fixed.find("\xef\xbf\xbd"), std::string::npos);
    EXPECT_NO_THROW((void)nlohmann::json(fixed).dump());
  }
  EXPECT_EQ(toUtf8("a\x80z"), "a\xef\xbf\xbdz");
}

}  // namespace
}  // namespace tpscope
