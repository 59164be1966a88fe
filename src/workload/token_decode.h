// SPDX-License-Identifier: Apache-2.0
// token_decode.h - decoding a token sequence on the synthetic model, for the wires' end-to-end accuracy:
// a prompt, then one token a step at growing positions, each step's logits over a vocabulary kept.
//
// The synthetic model has no vocabulary of its own; this gives it one. A token's input is its generated
// embedding (Shard::fillInput), and the logits are the final hidden state (after the final RMSNorm)
// through a fixed generated projection W [kVocab][hidden], uniform in +-kLogitStd x sqrt(3 / hidden), in
// float32 (cuBLAS, fp32 accumulation and output): the hidden state's RMS is about 1, so each logit has a
// standard deviation of about kLogitStd over the vocabulary. That spread is chosen, not learned, and a KL
// divergence between two runs grows with its square: compare wires with each other and with the floor
// (two exact runs that differ in reduction order), all under this head.
//
// A run: `prompt` positions prefilled from the generated input (micro-batches of `ubatch`, the cache filled
// by the model itself), then `steps` decode steps, step i at position prompt + i with token t_i as its
// input. t_0 is the greedy token of the prompt's last position and t_{i+1} the greedy token of step i,
// unless `forced` gives the sequence (another run's tokens): two runs then see the same inputs and their
// logits compare step by step.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tpscope/tpscope.hpp"
#include "workload/model.h"

namespace tpscope::workload {

constexpr int kVocab = 32000;
constexpr float kLogitStd = 4.0f;

struct TokenDecodeOptions {
  int prompt = 512, ubatch = 512, steps = 256;
  std::vector<int> forced;  // empty: greedy; else at least `steps` tokens, each in [0, kVocab)
  // `tensor`: capture (capture.h) the AllReduce inputs of the prompt's first micro-batch and of the first
  // decode step into this folder, keeping capture_rows rows of each call (capturedRows; 0: all); empty:
  // no capture. capture_model goes into the capture's index as the run's settings.
  std::string capture_dir;
  int capture_rows = 0;
  nlohmann::json capture_model = nlohmann::json::object();
};

struct TokenDecodeResult {
  std::vector<int> tokens;    // t_0 .. t_{steps-1}: each step's input
  std::vector<int> greedy;    // each step's own argmax (the first of equal maxima)
  std::vector<float> logits;  // steps x kVocab, row i the logits of step i
  // `tensor`: steps after which the GPU positions' final hidden states were not bitwise equal.
  int rank_mismatch_steps = 0;
  int captured_calls = 0;
  std::vector<PathStats> stats;  // the run's AllReduces by path (`tensor`; empty otherwise)
};

// The model's RunShape must hold prompt + steps positions and micro-batches of min(ubatch, prompt) tokens
// (tpsInvalidArgument otherwise, as for forced tokens that are too few or out of range). Errors come
// with *reason set to one sentence.
tpsResult_t runTokenDecode(Model& model, const TokenDecodeOptions& o, TokenDecodeResult* out, std::string* reason);

// The run as JSON: the model's settings (preset, split, devices, backend, the wire its communicator
// resolved, seed), the run's, the tokens, the greedy tokens, the rank check and the calls by path.
nlohmann::json tokenDecodeJson(const Model& model, const TokenDecodeOptions& o, const TokenDecodeResult& r);
// The "tokens" list of a JSON file (tokenDecodeJson's document, or {"tokens": [...]}); false with *error
// (one phrase) for a file that is missing, not JSON, or has no list of integers there.
bool readTokens(const std::string& path, std::vector<int>* tokens, std::string* error);

// The index of the largest of n values (the first of equal maxima; NaN never wins).
int argmax(const float* v, int n);

// NumPy's .npy format 1.0 for a little-endian float32 array of `shape`, C order: the header (magic,
// version, length, the dict padded with spaces to a multiple of 64 bytes) and the file.
std::string npyHeader(const std::vector<size_t>& shape);
bool writeNpy(const std::string& path, const float* data, const std::vector<size_t>& shape, std::string* error);

}  // namespace tpscope::workload
