// SPDX-License-Identifier: Apache-2.0
// token_decode.cc - the token decode run: the vocabulary head, the per-step loop, the capture tap, .npy.
#include "workload/token_decode.h"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include "allreduce/wire.h"
#include "common/checks.h"
#include "common/cuda_raii.h"
#include "workload/capture.h"
#include "workload/shard.h"

namespace tpscope::workload {

namespace {

// W [kVocab][hidden] on the output position's GPU and the float32 logits of one hidden row through it.
class VocabHead {
 public:
  ~VocabHead() {
    if (cublas_) {
      DeviceGuard on(device_);
      (void)cublasDestroy(cublas_);
    }
  }
  tpsResult_t create(const Shard& s, int hidden, uint64_t seed) {
    device_ = s.device(), stream_ = s.stream(), hidden_ = hidden;
    DeviceGuard on(device_);
    TPS_CHECK(DeviceBuffer::create(device_, static_cast<size_t>(kVocab) * hidden * 2, &w_));
    TPS_CHECK(DeviceBuffer::create(device_, static_cast<size_t>(kVocab) * 4, &logits_));
    const float a = kLogitStd * std::sqrt(3.0f / static_cast<float>(hidden));
    TPS_CUDA_CHECK(
        launchFillHash(w_.as<bf16_t>(), kVocab, hidden, hidden, 0, 0, hidden, seed, kLmHeadTensor, a, 0, stream_));
    TPS_EXPECT(cublasCreate(&cublas_) == CUBLAS_STATUS_SUCCESS, tpsCudaError, "cublasCreate failed");
    TPS_EXPECT(cublasSetStream(cublas_, stream_) == CUBLAS_STATUS_SUCCESS, tpsCudaError, "cublasSetStream failed");
    return tpsSuccess;
  }
  // logits[kVocab] = W . x, x one bf16 row on this GPU; enqueued on the output position's stream (after
  // the forward that wrote x), waited for.
  tpsResult_t logits(const bf16_t* x, float* host) {
    DeviceGuard on(device_);
    const float one = 1.0f, zero = 0.0f;
    TPS_EXPECT(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, kVocab, 1, hidden_, &one, w_.get(), CUDA_R_16BF, hidden_,
                            x, CUDA_R_16BF, hidden_, &zero, logits_.get(), CUDA_R_32F, kVocab, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
               tpsCudaError, "the vocabulary head's cublasGemmEx failed");
    TPS_CUDA_CHECK(
        cudaMemcpyAsync(host, logits_.get(), static_cast<size_t>(kVocab) * 4, cudaMemcpyDeviceToHost, stream_));
    TPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return tpsSuccess;
  }

 private:
  int device_ = -1, hidden_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer w_, logits_;
};

// Writes the AllReduce inputs of the forwards it taps (set on the model for those alone, so the others
// run without its waits).
class CaptureTap : public AllReduceTap {
 public:
  CaptureTap(int hidden, int max_rows) : hidden_(hidden), max_rows_(max_rows) {}
  CaptureWriter& writer() { return writer_; }
  // The calls from now on belong to forward `forward` of `phase`.
  void at(const char* phase, int forward) { phase_ = phase, forward_ = forward; }
  const std::string& error() const { return error_; }

  tpsResult_t onAllReduce(int layer, bool after_attention, int tokens, const std::vector<const bf16_t*>& partials,
                          const std::vector<int>& devices) override {
    CapturedCall c;
    c.phase = phase_, c.forward = forward_, c.layer = layer, c.which = after_attention ? "attention_out" : "ffn_down";
    c.tokens = tokens, c.hidden = hidden_, c.ranks = static_cast<int>(partials.size());
    c.rows = capturedRows(tokens, max_rows_);
    std::vector<uint16_t> full(static_cast<size_t>(tokens) * hidden_);
    std::vector<std::vector<uint16_t>> ranks(partials.size());
    for (size_t r = 0; r < partials.size(); ++r) {
      DeviceGuard on(devices[r]);
      TPS_CUDA_CHECK(cudaMemcpy(full.data(), partials[r], full.size() * 2, cudaMemcpyDeviceToHost));
      for (int row : c.rows)
        ranks[r].insert(ranks[r].end(), full.begin() + static_cast<ptrdiff_t>(row) * hidden_,
                        full.begin() + static_cast<ptrdiff_t>(row + 1) * hidden_);
    }
    if (!writer_.append(std::move(c), ranks, &error_)) return tpsSystemError;
    return tpsSuccess;
  }

 private:
  CaptureWriter writer_;
  int hidden_, max_rows_;
  std::string phase_, error_;
  int forward_ = 0;
};

tpsResult_t failWith(tpsResult_t r, std::string* reason, std::string text) {
  *reason = std::move(text);
  return r;
}

// Whether every GPU position's final hidden state (row 0) is bitwise the output position's.
tpsResult_t positionsAgree(const Model& m, int hidden, bool* agree) {
  *agree = true;
  std::vector<uint16_t> first(hidden), other(hidden);
  for (size_t i = 0; i < m.shardCount(); ++i) {
    const Shard& s = m.shard(i);
    DeviceGuard on(s.device());
    TPS_CUDA_CHECK(cudaMemcpy(i == 0 ? first.data() : other.data(), s.out(), hidden * 2, cudaMemcpyDeviceToHost));
    if (i > 0 && std::memcmp(first.data(), other.data(), hidden * 2) != 0) *agree = false;
  }
  return tpsSuccess;
}

}  // namespace

int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best] || (v[best] != v[best] && v[i] == v[i])) best = i;
  return best;
}

tpsResult_t runTokenDecode(Model& model, const TokenDecodeOptions& o, TokenDecodeResult* out, std::string* reason) {
  const ModelOptions& mo = model.options();
  const int hidden = mo.config.hidden;
  const bool tensor = mo.split == SplitMode::kTensor;
  if (o.prompt < 1 || o.ubatch < 1 || o.steps < 1)
    return failWith(tpsInvalidArgument, reason, "a token decode needs a prompt, a micro-batch and steps of 1 or more");
  if (mo.shape.ctx_capacity < o.prompt + o.steps || mo.shape.max_tokens < std::min(o.ubatch, o.prompt))
    return failWith(tpsInvalidArgument, reason,
                    fmt::format("the model holds {} positions and forwards of {} tokens: a token decode of a {}-token "
                                "prompt in micro-batches of {} and {} steps needs more",
                                mo.shape.ctx_capacity, mo.shape.max_tokens, o.prompt, o.ubatch, o.steps));
  if (!o.forced.empty()) {
    if (static_cast<int>(o.forced.size()) < o.steps)
      return failWith(
          tpsInvalidArgument, reason,
          fmt::format("{} forced tokens for {} steps: give at least one per step", o.forced.size(), o.steps));
    for (int t : o.forced)
      if (t < 0 || t >= kVocab)
        return failWith(tpsInvalidArgument, reason,
                        fmt::format("forced token {} is outside the vocabulary 0..{}", t, kVocab - 1));
  }
  if (!o.capture_dir.empty() && !tensor)
    return failWith(tpsInvalidArgument, reason, "an AllReduce capture needs split tensor");

  VocabHead head;
  if (head.create(model.output(), hidden, mo.seed) != tpsSuccess)
    return failWith(tpsCudaError, reason, "the vocabulary head could not be made (see the log)");
  std::unique_ptr<CaptureTap> tap;
  if (!o.capture_dir.empty()) {
    tap = std::make_unique<CaptureTap>(hidden, o.capture_rows);
    std::string error;
    if (!tap->writer().open(o.capture_dir, o.capture_model, &error)) return failWith(tpsSystemError, reason, error);
  }
  // Taps the forwards to capture (tap set: which phase and forward), leaves the others alone.
  auto capture = [&](const char* phase, bool on) {
    if (!tap) return;
    tap->at(phase, 0);
    model.setAllReduceTap(on ? tap.get() : nullptr);
  };
  if (model.comm()) (void)tpsCommResetStats(model.comm());
  TokenDecodeResult r;
  r.logits.resize(static_cast<size_t>(o.steps) * kVocab);
  std::vector<float> row(kVocab);
  // Untaps the model on every return: the tap dies with this function.
  struct Untap {
    Model& m;
    ~Untap() { m.setAllReduceTap(nullptr); }
  } untap{model};
  auto failed = [&](tpsResult_t e, const char* what) {
    if (tap && !tap->error().empty()) return failWith(tpsSystemError, reason, "writing the capture: " + tap->error());
    return failWith(e, reason, fmt::format("{} failed (see the log)", what));
  };

  // The prompt, micro-batch by micro-batch (as Model::prefill), the first one captured.
  int last = 0;
  for (int pos = 0, u = 0; pos < o.prompt; pos += o.ubatch, ++u) {
    const int n = std::min(o.ubatch, o.prompt - pos);
    capture("prefill", u == 0);
    if (tpsResult_t e = model.forward(n, pos); e != tpsSuccess) return failed(e, "the prompt's forward");
    last = n - 1;
  }
  capture("prefill", false);
  if (tpsResult_t e = model.synchronize(); e != tpsSuccess) return failed(e, "the prompt's forward");
  if (tpsResult_t e = head.logits(model.output().out() + static_cast<size_t>(last) * hidden, row.data());
      e != tpsSuccess)
    return failed(e, "the prompt's logits");
  int token = o.forced.empty() ? argmax(row.data(), kVocab) : o.forced[0];
  for (int i = 0; i < o.steps; ++i) {
    r.tokens.push_back(token);
    capture("decode", i == 0);
    if (tpsResult_t e = model.forwardToken(token, o.prompt + i); e != tpsSuccess) return failed(e, "a decode step");
    if (tpsResult_t e = model.synchronize(); e != tpsSuccess) return failed(e, "a decode step");
    float* logits = r.logits.data() + static_cast<size_t>(i) * kVocab;
    if (tpsResult_t e = head.logits(model.output().out(), logits); e != tpsSuccess) return failed(e, "a step's logits");
    r.greedy.push_back(argmax(logits, kVocab));
    if (tensor) {
      bool agree = true;
      if (tpsResult_t e = positionsAgree(model, hidden, &agree); e != tpsSuccess) return failed(e, "the rank check");
      r.rank_mismatch_steps += agree ? 0 : 1;
    }
    if (i + 1 < o.steps) token = o.forced.empty() ? r.greedy.back() : o.forced[i + 1];
  }
  if (tap) {
    std::string error;
    if (!tap->writer().finish(&error)) return failWith(tpsSystemError, reason, "writing the capture: " + error);
    r.captured_calls = static_cast<int>(tap->writer().index().calls.size());
  }
  if (model.comm() && allPathStats(model.comm(), &r.stats) != tpsSuccess) r.stats.clear();
  *out = std::move(r);
  return tpsSuccess;
}

nlohmann::json tokenDecodeJson(const Model& model, const TokenDecodeOptions& o, const TokenDecodeResult& r) {
  const ModelOptions& mo = model.options();
  std::string wire = "none";  // no communicator: no AllReduce
  if (tpsConfig_t cfg; model.comm() && tpsCommGetConfig(model.comm(), &cfg) == tpsSuccess) {
    const int w = static_cast<int>(cfg.wire);
    wire = w == tpsWireAuto            ? "auto"
           : w >= 0 && w < tpsWireAuto ? detail::wireName(static_cast<detail::WireCode>(w))
                                       : "unknown";
  }
  nlohmann::json paths = nlohmann::json::object();
  for (const PathStats& p : r.stats) {
    unsigned long long calls = 0;
    for (const tpsStatsCell_t& c : p.cells) calls += c.calls;
    if (calls) paths[p.name] = calls;
  }
  nlohmann::json doc = {{"preset", mo.config.preset},
                        {"split", splitModeName(mo.split)},
                        {"devices", mo.devices},
                        {"backend", mo.split == SplitMode::kTensor ? tpsBackendName(mo.backend) : "none"},
                        {"wire", wire},
                        {"seed", mo.seed},
                        {"prompt", o.prompt},
                        {"ubatch", o.ubatch},
                        {"steps", o.steps},
                        {"vocab", kVocab},
                        {"logit_std", kLogitStd},
                        {"forced", !o.forced.empty()},
                        {"tokens", r.tokens},
                        {"greedy", r.greedy},
                        {"rank_mismatch_steps", r.rank_mismatch_steps},
                        {"allreduce_calls_by_path", paths}};
  if (!o.capture_dir.empty())
    doc["capture"] = {{"dir", o.capture_dir}, {"rows_per_call", o.capture_rows}, {"calls", r.captured_calls}};
  return doc;
}

bool readTokens(const std::string& path, std::vector<int>* tokens, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = fmt::format("cannot open {}", path);
    return false;
  }
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("tokens") || !doc["tokens"].is_array()) {
    *error = fmt::format("{} has no \"tokens\" list", path);
    return false;
  }
  std::vector<int> t;
  for (const nlohmann::json& v : doc["tokens"]) {
    if (!v.is_number_integer()) {
      *error = fmt::format("{}: \"tokens\" holds a value that is not an integer", path);
      return false;
    }
    t.push_back(v.get<int>());
  }
  *tokens = std::move(t);
  return true;
}

std::string npyHeader(const std::vector<size_t>& shape) {
  std::string dims;
  for (size_t d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();  // (n,) for one dimension, (a, b) for more
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + dict + '\n', padded with spaces to a multiple of 64.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string h("\x93NUMPY\x01\x00", 8);
  h += static_cast<char>(dict.size() & 0xFF);
  h += static_cast<char>(dict.size() >> 8);
  return h + dict;
}

bool writeNpy(const std::string& path, const float* data, const std::vector<size_t>& shape, std::string* error) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const std::string h = npyHeader(shape);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
  if (!f.flush()) {
    *error = fmt::format("cannot write {}", path);
    return false;
  }
  return true;
}

}  // namespace tpscope::workload
