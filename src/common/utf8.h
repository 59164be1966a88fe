// SPDX-License-Identifier: Apache-2.0
// utf8.h - text from outside (a server's log, a pipe, a file) made fit for JSON records.
//
// nlohmann::json throws when it writes a string that is not UTF-8, so text that reaches a record is
// checked (isUtf8) or repaired (toUtf8) where it comes in. Both use the JSON writer's own notion of
// UTF-8, so what passes here always writes.
#pragma once

#include <string>
#include <string_view>

namespace tpscope {

// Whether `text` is UTF-8 the JSON writer takes.
bool isUtf8(std::string_view text);
// `text` with every byte that is not part of a UTF-8 sequence replaced by U+FFFD; valid text unchanged.
std::string toUtf8(std::string_view text);
// `text` fit for a terminal: every control character (C0, DEL and the C1 range U+0080-U+009F, among
// them ESC and CSI, which start a terminal's escape sequences) written as \xNN or \u00NN, a backslash
// as \\, and bytes that are not UTF-8 replaced by U+FFFD; printable text, UTF-8 included, unchanged.
std::string printable(std::string_view text);

}  // namespace tpscope
