// SPDX-License-Identifier: Apache-2.0
// bounded_input.h - what comes from outside (a run folder, a tune file, a server's answers) read within
// bounds: regular files only, a size cap per file, JSON nested no deeper than a limit.
//
// Why each bound. A FIFO or a device (a results.jsonl linked to /dev/zero) would block a read forever or
// feed it without end, so only regular files are read, and no more bytes than the caller's cap. nlohmann's
// parser itself is iterative, but copying, dumping or comparing a document recurses once per level, and
// a document nested 100,000 deep overflows the stack there; a depth limit at the parse keeps every later
// use of the document bounded. Both refusals are one sentence that names the file (and the line).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace tpscope {

// The deepest nesting of arrays and objects a document from outside may have. tpscope's own records
// (a run folder's manifest and results, a tune file) nest fewer than 10 levels, a server's answers fewer
// than 8.
constexpr int kMaxJsonDepth = 64;
// The most values (numbers, strings, arrays, objects...) one document from outside may hold. tpscope's
// largest, a results line with a PM step of 20,000 records on 8 GPUs, holds about 500,000; the cap keeps a
// document's memory, and the memory freeing it takes (nlohmann frees a document through a stack of its
// values: 16 MB at most here, which common/memory_reserve.h holds back), bounded whatever its size in bytes.
constexpr size_t kMaxJsonValues = size_t{1} << 20;

// Why a file was not read.
enum class FileReadError {
  kNone,
  kMissing,     // no such file
  kNotRegular,  // a folder, FIFO, device or socket
  kTooLarge,    // more than the caller's cap
  kUnreadable,  // any other error (permissions, I/O)
};

// The whole content of the regular file at `path` (symbolic links followed) when it holds at most
// max_bytes; kNone on success. Otherwise the reason, with one sentence naming the path in *error. Never
// blocks on a FIFO and never reads more than max_bytes + 1 bytes.
FileReadError readRegularFile(const std::string& path, size_t max_bytes, std::string* out, std::string* error);

// One JSON document from `text`, nested at most max_depth arrays and objects deep and holding at most
// kMaxJsonValues values; nullopt with *error otherwise: "line L, column C: <the parser's message>" for a
// syntax error, "line L: ... nested deeper than N levels", "more than N values in one document", and for
// a number too large for a double (JSON has no NaN or infinity, so that is how a non-finite number comes)
// "line L: \"key\" = 1e999 is not a finite number".
std::optional<nlohmann::json> parseJsonBounded(std::string_view text, std::string* error,
                                               int max_depth = kMaxJsonDepth);

}  // namespace tpscope
