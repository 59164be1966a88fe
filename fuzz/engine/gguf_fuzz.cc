// SPDX-License-Identifier: Apache-2.0
// gguf_fuzz.cc - the start of a model file (src/engine/gguf.h parseGgufHeader), as `tpscope arms`
// checks a spec's model and draft before it starts a server.
//
// Input: a GGUF file's first bytes. Contract: a whole file that parses also parses as a prefix, with
// the same counts and every pair checked; a prefix that fails fails as a whole file too; the first half
// of a file that parses is an acceptable prefix; nothing is read outside the bytes (ASan).
#include <string>

#include "engine/gguf.h"
#include "fuzz_util.h"

using tpscope::engine::GgufHeader;
using tpscope::engine::parseGgufHeader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The bytes in a buffer of their own size, so ASan sees a read one past the end.
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  GgufHeader whole, prefix;
  std::string why_whole, why_prefix;
  const bool ok_whole = parseGgufHeader(bytes, true, &whole, &why_whole);
  const bool ok_prefix = parseGgufHeader(bytes, false, &prefix, &why_prefix);
  FUZZ_CHECK(ok_whole || !why_whole.empty());
  FUZZ_CHECK(ok_prefix || !why_prefix.empty());
  FUZZ_CHECK(prefix.kv_checked <= prefix.kv_count);
  if (!ok_prefix) FUZZ_CHECK(!ok_whole);
  if (ok_whole) {
    FUZZ_CHECK(ok_prefix && whole.kv_checked == whole.kv_count);
    FUZZ_CHECK(prefix.version == whole.version && prefix.tensor_count == whole.tensor_count &&
               prefix.kv_count == whole.kv_count && prefix.kv_checked == whole.kv_checked);
    if (size / 2 >= 24) {
      GgufHeader half;
      std::string why;
      FUZZ_CHECK(parseGgufHeader(std::string_view(bytes).substr(0, size / 2), false, &half, &why));
      FUZZ_CHECK(half.kv_checked <= whole.kv_checked);
    }
  }
  return 0;
}
