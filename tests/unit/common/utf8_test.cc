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

// What a command writes to the control pipe reaches the terminal in a warning: its escape sequences
// (ESC [ 2 J clears the screen; the C1 CSI byte does the same on many terminals) must not act there.
TEST(Utf8, PrintableEscapesEveryControlCharacter) {
  EXPECT_EQ(printable("begin x\x1b[2J\x07"), "begin x\\x1b[2J\\x07");
  EXPECT_EQ(printable("a\x7f b\r\n\t"), "a\\x7f b\\x0d\\x0a\\x09");
  EXPECT_EQ(printable("csi \xc2\x9b"
                      "31m"),
            "csi \\u009b31m");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");
  EXPECT_EQ(printable("d\xc3\xa9j\xc3\xa0 vu \xc2\xa0"), "d\xc3\xa9j\xc3\xa0 vu \xc2\xa0");  // printable UTF-8 stays
  EXPECT_EQ(printable("x\xff"), "x\xef\xbf\xbd");
  for (int c = 0; c < 256; ++c) {
    const std::string out = printable(std::string(1, static_cast<char>(c)));
    for (unsigned char o : out) EXPECT_TRUE(o >= 0x20 && o != 0x7f) << "byte " << c << " -> " << out;
  }
}

}  // namespace
}  // namespace tpscope
