// SPDX-License-Identifier: Apache-2.0
// capture.h - a tensor-split model's AllReduce inputs, each rank's partial sums as the projections left
// them, written to a folder: what the wires' accuracy is measured on (benchmarks/wires/call_error).
//
// A capture folder holds index.json and one data file per phase (decode.bin, prefill.bin):
//
//   {"format": "tpscope-allreduce-capture", "version": 1, "dtype": "bfloat16",
//    "model": {...},                        // the run's settings, as the writer gives them
//    "calls": [{"phase": "decode", "forward": 0, "layer": 3, "which": "ffn_down", "tokens": 1,
//               "hidden": 4096, "ranks": 2, "rows": [0], "file": "decode.bin", "offset": 147456}, ...]}
//
// One call is one AllReduce of `tokens` x `hidden` bfloat16 values per rank: after layer `layer`'s
// attention output projection ("attention_out") or its FFN down projection ("ffn_down"), in the
// `forward`-th forward of the phase. `rows` are the token rows kept (all of them, or a subset spread
// evenly over the call when the writer was given a row limit: a prefill call is tokens x hidden x 2 bytes
// per rank). In `file`, from byte `offset`, come the ranks' arrays one after the other, each rows.size() x
// hidden values row-major, little-endian bfloat16 bits; rank r's starts at offset + r x rankBytes().
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpscope::workload {

struct CapturedCall {
  std::string phase;  // "decode" or "prefill"
  int forward = 0;    // the forward of the phase (0: its first)
  int layer = 0;
  std::string which;  // "attention_out" or "ffn_down"
  int tokens = 0;     // the call's rows: its size is tokens x hidden values per rank
  int hidden = 0;
  int ranks = 0;
  std::vector<int> rows;  // the rows kept, ascending, each in [0, tokens)
  std::string file;       // a plain file name in the capture folder
  uint64_t offset = 0;
  uint64_t rankValues() const { return static_cast<uint64_t>(rows.size()) * static_cast<uint64_t>(hidden); }
  uint64_t rankBytes() const { return rankValues() * 2; }
};

struct CaptureIndex {
  nlohmann::json model = nlohmann::json::object();
  std::vector<CapturedCall> calls;
};

// The rows a capture keeps of a call of `tokens` rows: all of them when max_rows is 0 or at least tokens,
// else max_rows rows spread evenly, row floor(k x tokens / max_rows) for k = 0 .. max_rows - 1.
std::vector<int> capturedRows(int tokens, int max_rows);

nlohmann::json captureIndexJson(const CaptureIndex& index);
// False with *error (one phrase) for a document that is not a capture index: another format or version, a
// dtype other than bfloat16, a call with a field missing or out of range (rows not ascending within
// [0, tokens), a file name with a '/', a rank count below 1).
bool parseCaptureIndex(const nlohmann::json& doc, CaptureIndex* out, std::string* error);
// Reads index.json of folder `dir`; false with *error for a file that is missing, not JSON, or refused above.
bool readCaptureIndex(const std::string& dir, CaptureIndex* out, std::string* error);
// The call's values per rank, as floats: (*ranks)[r] holds rankValues() values. False with *error for a
// data file that is missing or shorter than the call's bytes.
bool readCapturedCall(const std::string& dir, const CapturedCall& call, std::vector<std::vector<float>>* ranks,
                      std::string* error);

// Writes a capture folder: calls appended one by one (their values given as bfloat16 bits), the index last.
class CaptureWriter {
 public:
  // Creates `dir` (and its parents) when missing; false with *error when it cannot.
  bool open(const std::string& dir, nlohmann::json model, std::string* error);
  // Appends `call` (its file and offset are set here, from its phase) with rank r's values in ranks[r]
  // (call.rankValues() each). False with *error when a write fails or a size does not match.
  bool append(CapturedCall call, const std::vector<std::vector<uint16_t>>& ranks, std::string* error);
  // Writes index.json.
  bool finish(std::string* error);
  const CaptureIndex& index() const { return index_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  CaptureIndex index_;
  std::map<std::string, uint64_t> written_;  // bytes written to each data file so far
};

}  // namespace tpscope::workload
