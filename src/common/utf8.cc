// SPDX-License-Identifier: Apache-2.0
// utf8.cc - UTF-8 checks through the JSON writer's replace mode.
#include "common/utf8.h"

#include <nlohmann/json.hpp>

namespace tpscope {

std::string toUtf8(std::string_view text) {
  // Written as a JSON string with the invalid bytes replaced, then read back: the writer's own rules.
  const std::string quoted =
      nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(quoted).get<std::string>();
}

bool isUtf8(std::string_view text) { return toUtf8(text) == text; }

}  // namespace tpscope
