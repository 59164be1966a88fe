// SPDX-License-Identifier: Apache-2.0
// capture.cc - the capture folder's index and data files (host only).
#include "workload/capture.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace tpscope::workload {

namespace {

constexpr const char* kFormat = "tpscope-allreduce-capture";
constexpr int kVersion = 1;

float bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

bool callError(size_t i, const std::string& what, std::string* error) {
  *error = fmt::format("call {}: {}", i, what);
  return false;
}

}  // namespace

std::vector<int> capturedRows(int tokens, int max_rows) {
  std::vector<int> rows;
  if (max_rows <= 0 || max_rows >= tokens) {
    for (int t = 0; t < tokens; ++t) rows.push_back(t);
    return rows;
  }
  for (int k = 0; k < max_rows; ++k) rows.push_back(static_cast<int>(static_cast<int64_t>(k) * tokens / max_rows));
  return rows;
}

nlohmann::json captureIndexJson(const CaptureIndex& index) {
  nlohmann::json calls = nlohmann::json::array();
  for (const CapturedCall& c : index.calls)
    calls.push_back({{"phase", c.phase},
                     {"forward", c.forward},
                     {"layer", c.layer},
                     {"which", c.which},
                     {"tokens", c.tokens},
                     {"hidden", c.hidden},
                     {"ranks", c.ranks},
                     {"rows", c.rows},
                     {"file", c.file},
                     {"offset", c.offset}});
  return {{"format", kFormat}, {"version", kVersion}, {"dtype", "bfloat16"}, {"model", index.model}, {"calls", calls}};
}

bool parseCaptureIndex(const nlohmann::json& doc, CaptureIndex* out, std::string* error) {
  if (!doc.is_object() || doc.value("format", "") != kFormat) {
    *error = fmt::format("not a capture index (no \"format\": \"{}\")", kFormat);
    return false;
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<int>() != kVersion) {
    *error = fmt::format("capture index version is not {}", kVersion);
    return false;
  }
  if (doc.value("dtype", "") != "bfloat16") {
    *error = "capture dtype is not bfloat16";
    return false;
  }
  if (!doc.contains("calls") || !doc["calls"].is_array()) {
    *error = "capture index has no \"calls\" list";
    return false;
  }
  CaptureIndex index;
  index.model = doc.value("model", nlohmann::json::object());
  const nlohmann::json& calls = doc["calls"];
  for (size_t i = 0; i < calls.size(); ++i) {
    const nlohmann::json& j = calls[i];
    CapturedCall c;
    try {
      c.phase = j.at("phase").get<std::string>(), c.which = j.at("which").get<std::string>();
      c.forward = j.at("forward").get<int>(), c.layer = j.at("layer").get<int>();
      c.tokens = j.at("tokens").get<int>(), c.hidden = j.at("hidden").get<int>(), c.ranks = j.at("ranks").get<int>();
      c.rows = j.at("rows").get<std::vector<int>>();
      c.file = j.at("file").get<std::string>();
      c.offset = j.at("offset").get<uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      return callError(i, fmt::format("a field is missing or of the wrong type ({})", e.what()), error);
    }
    if (c.phase != "decode" && c.phase != "prefill") return callError(i, "phase is not decode or prefill", error);
    if (c.which != "attention_out" && c.which != "ffn_down")
      return callError(i, "which is not attention_out or ffn_down", error);
    if (c.tokens < 1 || c.hidden < 1 || c.ranks < 1 || c.layer < 0 || c.forward < 0)
      return callError(i, "tokens, hidden and ranks must be at least 1, layer and forward at least 0", error);
    if (c.rows.empty()) return callError(i, "rows is empty", error);
    for (size_t k = 0; k < c.rows.size(); ++k)
      if (c.rows[k] < 0 || c.rows[k] >= c.tokens || (k > 0 && c.rows[k] <= c.rows[k - 1]))
        return callError(i, "rows must ascend within [0, tokens)", error);
    if (c.file.empty() || c.file.find('/') != std::string::npos || c.file == "." || c.file == "..")
      return callError(i, "file must be a plain file name in the capture folder", error);
    index.calls.push_back(std::move(c));
  }
  *out = std::move(index);
  return true;
}

bool readCaptureIndex(const std::string& dir, CaptureIndex* out, std::string* error) {
  const std::string path = dir + "/index.json";
  std::ifstream in(path);
  if (!in) {
    *error = fmt::format("cannot open {}", path);
    return false;
  }
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *error = fmt::format("{} is not JSON", path);
    return false;
  }
  if (!parseCaptureIndex(doc, out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

bool readCapturedCall(const std::string& dir, const CapturedCall& call, std::vector<std::vector<float>>* ranks,
                      std::string* error) {
  const std::string path = dir + "/" + call.file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = fmt::format("cannot open {}", path);
    return false;
  }
  std::vector<uint16_t> raw(call.rankValues());
  ranks->assign(static_cast<size_t>(call.ranks), {});
  in.seekg(static_cast<std::streamoff>(call.offset));
  for (int r = 0; r < call.ranks; ++r) {
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(call.rankBytes()));
    if (!in || static_cast<uint64_t>(in.gcount()) != call.rankBytes()) {
      *error = fmt::format("{} ends before the {} bytes of layer {} {} ({}) rank {} at offset {}", path,
                           call.rankBytes(), call.layer, call.which, call.phase, r, call.offset + r * call.rankBytes());
      return false;
    }
    std::vector<float>& v = (*ranks)[r];
    v.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) v[i] = bf16ToFloat(raw[i]);
  }
  return true;
}

bool CaptureWriter::open(const std::string& dir, nlohmann::json model, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    *error = fmt::format("cannot create the capture folder {}: {}", dir, ec ? ec.message() : "not a folder");
    return false;
  }
  dir_ = dir;
  index_ = CaptureIndex{};
  index_.model = std::move(model);
  written_.clear();
  return true;
}

bool CaptureWriter::append(CapturedCall call, const std::vector<std::vector<uint16_t>>& ranks, std::string* error) {
  if (static_cast<int>(ranks.size()) != call.ranks) {
    *error = fmt::format("{} rank arrays for a call of {} ranks", ranks.size(), call.ranks);
    return false;
  }
  for (const auto& r : ranks)
    if (r.size() != call.rankValues()) {
      *error = fmt::format("a rank array of {} values for a call of {}", r.size(), call.rankValues());
      return false;
    }
  call.file = call.phase + ".bin";
  const bool first = written_.find(call.file) == written_.end();
  const std::string path = dir_ + "/" + call.file;
  // A data file starts empty in each capture: an earlier capture's file in the same folder is replaced.
  std::ofstream out(path, std::ios::binary | (first ? std::ios::trunc : std::ios::app));
  call.offset = written_[call.file];
  for (const auto& r : ranks)
    out.write(reinterpret_cast<const char*>(r.data()), static_cast<std::streamsize>(r.size() * 2));
  if (!out.flush()) {
    *error = fmt::format("cannot write {}", path);
    return false;
  }
  written_[call.file] += static_cast<uint64_t>(call.ranks) * call.rankBytes();
  index_.calls.push_back(std::move(call));
  return true;
}

bool CaptureWriter::finish(std::string* error) {
  const std::string path = dir_ + "/index.json";
  std::ofstream out(path);
  out << captureIndexJson(index_).dump(1) << "\n";
  if (!out.flush()) {
    *error = fmt::format("cannot write {}", path);
    return false;
  }
  return true;
}

}  // namespace tpscope::workload
