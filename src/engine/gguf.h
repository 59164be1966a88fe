// SPDX-License-Identifier: Apache-2.0
// gguf.h - the start of a GGUF model file, checked before a server is asked to load it.
//
// GGUF (ggml's gguf.h and llama.cpp's docs/gguf.md): "GGUF", a uint32 version, a uint64 tensor count,
// a uint64 metadata key-value count, then the key-value pairs (a uint64-length string key, a uint32
// type, the value), all little-endian. llama.cpp reads versions 2 and 3. Only the first
// kGgufPrefixBytes of a file are read: enough for the fixed header and the metadata a model lists
// first, never the tokenizer's arrays of a real model in full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tpscope::engine {

constexpr size_t kGgufPrefixBytes = 64 << 10;

struct GgufHeader {
  uint32_t version = 0;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  uint64_t kv_checked = 0;  // key-value pairs that lie whole inside the bytes given, each well-formed
};

// Parses the start of a GGUF file: `bytes` is its first bytes, `whole_file` says whether they are all
// of it. False with *why (a phrase, no file name) when the magic is not "GGUF", the version is not 2
// or 3, the fixed header is cut short, or a key-value pair inside the bytes is malformed (a value type
// GGUF does not define, an array of arrays); for a whole file also when a pair runs past its end. A pair cut off by the
// end of a prefix is not an error: the rest of the file is not read. Never reads outside `bytes`; the work is linear in
// bytes.size().
bool parseGgufHeader(std::string_view bytes, bool whole_file, GgufHeader* out, std::string* why);

// Reads the first kGgufPrefixBytes of `path` and parses them. False with *why, one sentence naming the
// file: it cannot be read, or it is not a GGUF file llama.cpp can load (with what is wrong).
bool readGgufHeader(const std::string& path, GgufHeader* out, std::string* why);

}  // namespace tpscope::engine
