// SPDX-License-Identifier: Apache-2.0
// tuning.cc - host backend tunables from defaults, tuning file, environment and config.
#include "allreduce/tuning.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/bounded_input.h"
#include "common/checks.h"
#include "common/param.h"

namespace tpscope::detail {

// Built-in defaults, the best of `tpscope bench allreduce --tune` on an NVLink box (docs/PERFORMANCE.md,
// "AllReduce"); a tuning file written on the user's box replaces them.
constexpr size_t kDefaultCopyThreshold = 4u << 20;
constexpr size_t kDefaultChunkBytes = 4u << 20;
constexpr int kDefaultBlocks = 32;
constexpr unsigned kDefaultSpinTimeoutMs = 10000;

TPS_PARAM_INT(HostCopyThreshold, "TPSCOPE_HOST_COPY_THRESHOLD", 0)
TPS_PARAM_INT(HostChunkBytes, "TPSCOPE_HOST_CHUNK_BYTES", 0)
TPS_PARAM_INT(HostBlocks, "TPSCOPE_HOST_BLOCKS", 0)
TPS_PARAM_INT(SpinTimeoutMs, "TPSCOPE_SPIN_TIMEOUT_MS", 0)
TPS_PARAM_STRING(TuneFile, "TPSCOPE_TUNE_FILE", "")

std::string tuneFilePath() {
  if (!tpsParamTuneFile().empty()) return tpsParamTuneFile();
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/tpscope/tune.json";
}

namespace {

// The tune file's value of `key` when it is a whole number in [lo, hi]; a WARN and nullopt when it is
// there but is not (a hand-edited or truncated file falls back to the defaults, it never fails).
std::optional<size_t> fileValue(const nlohmann::json& j, const char* key, size_t lo, size_t hi,
                                const std::string& path) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_number_unsigned() && it->get<size_t>() >= lo && it->get<size_t>() <= hi) return it->get<size_t>();
  TPS_LOG_WARN("tuning file {}: {} is {}, not a whole number in {}..{}; using the built-in default", path, key,
               it->dump(), lo, hi);
  return std::nullopt;
}

}  // namespace

std::optional<nlohmann::json> parseTuneText(const std::string& text, const std::string& path, std::string* why) {
  std::string error;
  std::optional<nlohmann::json> doc = parseJsonBounded(text, &error);
  if (!doc) *why = fmt::format("tuning file {} is not JSON ({})", path, error);
  return doc;
}

std::optional<nlohmann::json> readTuneFile(const std::string& path, std::string* why) {
  why->clear();
  std::string text, error;
  switch (readRegularFile(path, kMaxTuneFileBytes, &text, &error)) {
    case FileReadError::kNone: return parseTuneText(text, path, why);
    case FileReadError::kMissing: return std::nullopt;
    default: *why = "tuning file: " + error; return std::nullopt;
  }
}

void applyTuneDocument(const nlohmann::json& doc, const std::string& path, HostTuning* t) {
  if (!doc.is_object()) {
    TPS_LOG_WARN("tuning file {} is not a JSON object; using built-in defaults", path);
    return;
  }
  constexpr size_t kMax = SIZE_MAX;
  if (auto v = fileValue(doc, "host_copy_threshold", 1, kMax, path)) t->copy_threshold = *v;
  if (auto v = fileValue(doc, "host_chunk_bytes", 64u << 10, kMax, path)) t->chunk_bytes = *v;
  if (auto v = fileValue(doc, "host_blocks", 1, 64, path)) t->blocks = static_cast<int>(*v);
  t->source = "tune file " + path;
}

tpsResult_t resolveHostTuning(const tpsConfig_t& config, HostTuning* out) {
  HostTuning t{kDefaultCopyThreshold, kDefaultChunkBytes, kDefaultBlocks, kDefaultSpinTimeoutMs, "built-in"};
  const std::string path = tuneFilePath();
  std::string why;
  if (const std::optional<nlohmann::json> doc = readTuneFile(path, &why))
    applyTuneDocument(*doc, path, &t);
  else if (!why.empty())
    TPS_LOG_WARN("{}; using built-in defaults", why);
  if (tpsParamHostCopyThreshold() > 0) t.copy_threshold = tpsParamHostCopyThreshold(), t.source = "environment";
  if (tpsParamHostChunkBytes() > 0) t.chunk_bytes = tpsParamHostChunkBytes(), t.source = "environment";
  if (tpsParamHostBlocks() > 0) t.blocks = static_cast<int>(tpsParamHostBlocks()), t.source = "environment";
  if (tpsParamSpinTimeoutMs() > 0) t.spin_timeout_ms = static_cast<unsigned>(tpsParamSpinTimeoutMs());
  if (config.host_copy_threshold) t.copy_threshold = config.host_copy_threshold, t.source = "config";
  if (config.host_chunk_bytes) t.chunk_bytes = config.host_chunk_bytes, t.source = "config";
  if (config.host_blocks) t.blocks = config.host_blocks, t.source = "config";
  if (config.spin_timeout_ms) t.spin_timeout_ms = config.spin_timeout_ms;
  TPS_EXPECT(t.blocks >= 1 && t.blocks <= 64, tpsInvalidArgument, "host_blocks {} is outside 1..64", t.blocks);
  TPS_EXPECT(t.chunk_bytes >= (64u << 10), tpsInvalidArgument, "host_chunk_bytes {} is below 64 KiB", t.chunk_bytes);
  t.chunk_bytes &= ~size_t{15};  // copies stay 16-byte aligned
  *out = t;
  return tpsSuccess;
}

}  // namespace tpscope::detail
