// SPDX-License-Identifier: Apache-2.0
// tuning.h - the host backend's tunables: built-in defaults, a tuning file measured on the box, the
// environment and the caller's config, in increasing order of precedence.
//
// The tuning file is JSON written by `tpscope bench allreduce --tune` (keys: host_copy_threshold,
// host_chunk_bytes, host_blocks; and "auto", the backend per size range, read by auto_table.h); its
// path is TPSCOPE_TUNE_FILE or ~/.cache/tpscope/tune.json. A file value that is not a whole number in
// range is a WARN and the built-in default for that key; a file that is not JSON (or not a regular file,
// or too large or too deep to read), a WARN and every default.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>  // the .cu files that include this header need no JSON parser
#include <optional>
#include <string>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct HostTuning {
  size_t copy_threshold;  // bytes per GPU at or above which the copy-engine path runs
  size_t chunk_bytes;     // copy-engine chunk
  int blocks;             // kernel-path blocks per GPU
  unsigned spin_timeout_ms;
  std::string source;  // where the values came from, for logs and reports
};

// Resolves the tunables for a communicator from every source. Returns tpsInvalidArgument (with a
// WARN line) for environment or config values that cannot work: blocks outside 1..64, a chunk below 64 KiB.
tpsResult_t resolveHostTuning(const tpsConfig_t& config, HostTuning* out);

// Applies a tuning file's document (read from `path`, named in the WARN lines) over *t: each host key that
// is a whole number in range replaces its value, and t->source becomes the file; a document that is not
// a JSON object (a parse that failed included) is a WARN and changes nothing.
void applyTuneDocument(const nlohmann::json& doc, const std::string& path, HostTuning* t);

// The tuning file's path (it may not exist).
std::string tuneFilePath();

// The most bytes of a tuning file that are read: the file holds a few keys and a table of a few rows.
constexpr size_t kMaxTuneFileBytes = size_t{1} << 20;
// A tuning file's document from its text (`path` names it in *why): nullopt with *why for text that is
// not JSON or nests deeper than kMaxJsonDepth (common/bounded_input.h).
std::optional<nlohmann::json> parseTuneText(const std::string& text, const std::string& path, std::string* why);
// The tuning file at `path`: nullopt with *why empty where there is none; nullopt with *why when it is
// not a regular file, is larger than kMaxTuneFileBytes, cannot be read, or does not parse.
std::optional<nlohmann::json> readTuneFile(const std::string& path, std::string* why);

}  // namespace tpscope::detail
