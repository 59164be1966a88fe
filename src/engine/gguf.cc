// SPDX-License-Identifier: Apache-2.0
// gguf.cc - the fixed GGUF header and a walk over the key-value pairs at the start of the file.
#include "engine/gguf.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

namespace tpscope::engine {

namespace {

// GGUF's value types (ggml's enum gguf_type) and the bytes of one scalar; 0 for string and array.
constexpr uint32_t kTypeString = 8, kTypeArray = 9, kTypeCount = 13;
constexpr size_t kScalarBytes[kTypeCount] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

// A read position inside the bytes; every read checks the bytes left first.
struct Cursor {
  std::string_view bytes;
  size_t at = 0;

  size_t left() const { return bytes.size() - at; }
  template <typename T>
  bool read(T* v) {
    if (left() < sizeof(T)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(T));  // little-endian, as the hosts llama.cpp runs on
    at += sizeof(T);
    return true;
  }
  bool skip(uint64_t n) {
    if (left() < n) return false;
    at += static_cast<size_t>(n);
    return true;
  }
  bool string() {
    uint64_t len = 0;
    return read(&len) && skip(len);
  }
};

enum class Walk { kOk, kEnd, kBad };

// One value of `type`; kEnd when the bytes end inside it.
Walk value(Cursor* c, uint32_t type, bool in_array, std::string* why) {
  if (type >= kTypeCount) {
    *why = fmt::format("a metadata value has type {}, which GGUF does not define", type);
    return Walk::kBad;
  }
  if (type == kTypeString) return c->string() ? Walk::kOk : Walk::kEnd;
  if (type != kTypeArray) return c->skip(kScalarBytes[type]) ? Walk::kOk : Walk::kEnd;
  if (in_array) {
    *why = "a metadata array holds arrays, which llama.cpp does not read";
    return Walk::kBad;
  }
  uint32_t elem = 0;
  uint64_t n = 0;
  if (!c->read(&elem) || !c->read(&n)) return Walk::kEnd;
  if (elem >= kTypeCount || elem == kTypeArray) return value(c, elem, true, why);
  if (elem != kTypeString) {
    // n * size can overflow: compare against what is left instead of multiplying.
    return n <= c->left() / kScalarBytes[elem] && c->skip(n * kScalarBytes[elem]) ? Walk::kOk : Walk::kEnd;
  }
  for (uint64_t i = 0; i < n; ++i)  // each string takes at least its 8-byte length: bounded by the bytes
    if (!c->string()) return Walk::kEnd;
  return Walk::kOk;
}

}  // namespace

bool parseGgufHeader(std::string_view bytes, bool whole_file, GgufHeader* out, std::string* why) {
  *out = GgufHeader{};
  if (bytes.substr(0, 4) != "GGUF") {
    *why = "it does not start with the bytes \"GGUF\"";
    return false;
  }
  Cursor c{bytes, 4};
  if (!c.read(&out->version) || !c.read(&out->tensor_count) || !c.read(&out->kv_count)) {
    *why = "its header is cut short";
    return false;
  }
  if (out->version != 2 && out->version != 3) {
    *why = fmt::format("it is GGUF version {}; llama.cpp reads versions 2 and 3", out->version);
    return false;
  }
  for (; out->kv_checked < out->kv_count; ++out->kv_checked) {
    uint32_t type = 0;
    Walk w = c.string() && c.read(&type) ? value(&c, type, false, why) : Walk::kEnd;
    if (w == Walk::kBad) {
      *why = fmt::format("metadata pair {}: {}", out->kv_checked, *why);
      return false;
    }
    if (w == Walk::kEnd) {
      if (!whole_file) return true;
      *why = fmt::format("it ends inside metadata pair {} of {}", out->kv_checked, out->kv_count);
      return false;
    }
  }
  return true;
}

bool readGgufHeader(const std::string& path, GgufHeader* out, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *why = "model file " + path + " does not exist or cannot be read";
    return false;
  }
  std::string bytes(kGgufPrefixBytes, '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(f.gcount()));
  const bool whole = f.eof();
  std::string what;
  if (!parseGgufHeader(bytes, whole, out, &what)) {
    *why = path + " is not a GGUF file llama.cpp can load (" + what + "); scripts/llama/make-gguf writes one";
    return false;
  }
  return true;
}

}  // namespace tpscope::engine
