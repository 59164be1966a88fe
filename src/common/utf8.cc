// SPDX-License-Identifier: Apache-2.0
// utf8.cc - UTF-8 checks through the JSON writer's replace mode.
#include "common/utf8.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace tpscope {

std::string toUtf8(std::string_view text) {
  // Written as a JSON string with the invalid bytes replaced, then read back: the writer's own rules.
  const std::string quoted =
      nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

bool isUtf8(std::string_view text) { return toUtf8(text) == text; }

std::string printable(std::string_view text) {
  const std::string valid = toUtf8(text);
  std::string out;
  out.reserve(valid.size());
  char buf[8];
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == 0xc2 && i + 1 < valid.size() && static_cast<unsigned char>(valid[i + 1]) < 0xa0) {
      // U+0080-U+009F: two bytes, 0xc2 then 0x80-0x9f (valid UTF-8 here, so the second byte is there)
      std::snprintf(buf, sizeof(buf), "\\u00%02x", static_cast<unsigned char>(valid[++i]));
      out += buf;
    } else {
      out += valid[i];
    }
  }
  return out;
}

}  // namespace tpscope
