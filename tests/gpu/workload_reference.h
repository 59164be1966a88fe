// SPDX-License-Identifier: Apache-2.0
// workload_reference.h - a double-precision host model of the synthetic transformer, for small shapes.
//
// It regenerates the weights, input and context from the same hash as the GPU and rounds to bf16 at
// the points where the GPU stores bf16, so the GPU's fp32-accumulated result must match it closely.
// This is what says the unsplit model is a correct transformer; the split tests then compare to it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "workload/model_config.h"
#include "workload/shard.h"

namespace tpscope::testing {

class ReferenceModel {
 public:
  ReferenceModel(const workload::ModelConfig& c, uint64_t seed) : c_(c), seed_(seed) {}

  // Final hidden states of `tokens` tokens at positions pos0.., after a context of pos0 generated
  // positions (ctx_generated) or of the same tokens' own earlier positions (prefill from 0).
  std::vector<double> forward(int tokens, int pos0, bool generated_context) {
    const int h = c_.hidden, d = c_.head_dim, qh = c_.q_heads, kvh = c_.kv_heads, f = c_.ffn;
    const int keys = pos0 + tokens;
    std::vector<double> x(size_t(tokens) * h);
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < h; ++j) x[t * h + j] = value(workload::kInputTensor, uint64_t(pos0 + t) * h + j, 1, 0);
    for (int l = 0; l < c_.layers; ++l) {
      const uint64_t base = uint64_t(l) * workload::kTensorsPerLayer;
      // Attention.
      std::vector<double> xn = norm(x, tokens, base + 0);
      std::vector<double> q = gemm(xn, tokens, h, qh * d, base + 1, h, 0);
      std::vector<double> k = gemm(xn, tokens, h, kvh * d, base + 2, h, 0);
      std::vector<double> v = gemm(xn, tokens, h, kvh * d, base + 3, h, 0);
      for (int t = 0; t < tokens; ++t) {
        rope(&q[size_t(t) * qh * d], qh, pos0 + t);
        rope(&k[size_t(t) * kvh * d], kvh, pos0 + t);
      }
      // The cache: generated context, then this forward's own K and V.
      std::vector<double> kc(size_t(kvh) * keys * d), vc(kc.size());
      for (int hh = 0; hh < kvh; ++hh)
        for (int p = 0; p < keys; ++p)
          for (int i = 0; i < d; ++i) {
            const size_t at = (size_t(hh) * keys + p) * d + i;
            if (p < pos0) {
              const uint64_t g = ((uint64_t(hh) << 24) + p) * d + i;
              kc[at] = generated_context ? value(base + 9, g, 1, 0) : 0;
              vc[at] = generated_context ? value(base + 10, g, 1, 0) : 0;
            } else {
              kc[at] = k[(size_t(p - pos0) * kvh + hh) * d + i];
              vc[at] = v[(size_t(p - pos0) * kvh + hh) * d + i];
            }
          }
      std::vector<double> att(size_t(tokens) * qh * d);
      for (int t = 0; t < tokens; ++t)
        for (int hq = 0; hq < qh; ++hq) {
          const int hk = hq / (qh / kvh), last = pos0 + t;
          std::vector<double> s(last + 1);
          double mx = -1e300, sum = 0;
          for (int p = 0; p <= last; ++p) {
            double dot = 0;
            for (int i = 0; i < d; ++i) dot += q[(size_t(t) * qh + hq) * d + i] * kc[(size_t(hk) * keys + p) * d + i];
            s[p] = dot / std::sqrt(double(d));
            mx = std::max(mx, s[p]);
          }
          for (int p = 0; p <= last; ++p) sum += s[p] = std::exp(s[p] - mx);
          for (int i = 0; i < d; ++i) {
            double a = 0;
            for (int p = 0; p <= last; ++p) a += s[p] * vc[(size_t(hk) * keys + p) * d + i];
            att[(size_t(t) * qh + hq) * d + i] = bf16(a / sum);
          }
        }
      addInto(&x, gemm(att, tokens, qh * d, h, base + 4, qh * d, 0));
      // FFN.
      xn = norm(x, tokens, base + 5);
      std::vector<double> g = gemm(xn, tokens, h, f, base + 6, h, 0);
      std::vector<double> u = gemm(xn, tokens, h, f, base + 7, h, 0);
      std::vector<double> act(g.size());
      for (size_t i = 0; i < g.size(); ++i) act[i] = bf16(g[i] / (1 + std::exp(-g[i])) * u[i]);
      addInto(&x, gemm(act, tokens, f, h, base + 8, f, 0));
    }
    return norm(x, tokens, workload::kFinalNormTensor);
  }

  static double bf16(double v) {
    float f = static_cast<float>(v);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;  // round to nearest even
    std::memcpy(&f, &b, 4);
    return f;
  }

 private:
  static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  // Exactly the GPU's fillHashKernel arithmetic (float), then bf16.
  double value(uint64_t tensor, uint64_t global, float scale, float offset) const {
    const uint64_t key = mix(seed_ ^ mix(tensor + 0x1234567ull));
    const uint64_t hv = mix(key ^ mix(global));
    const float u = static_cast<float>(hv >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    return bf16(offset + scale * u);
  }
  std::vector<double> norm(const std::vector<double>& x, int tokens, uint64_t tensor) const {
    const int h = c_.hidden;
    std::vector<double> y(x.size());
    for (int t = 0; t < tokens; ++t) {
      double ss = 0;
      for (int j = 0; j < h; ++j) ss += x[t * h + j] * x[t * h + j];
      const double inv = 1 / std::sqrt(ss / h + c_.rms_eps);
      for (int j = 0; j < h; ++j) y[t * h + j] = bf16(x[t * h + j] * inv * value(tensor, j, 0.1f, 1.0f));
    }
    return y;
  }
  // y[tokens][n] = x[tokens][k] . W[n][k]^T with W generated as a [n][full_cols] tensor, scale 1/sqrt(k).
  std::vector<double> gemm(const std::vector<double>& x, int tokens, int k, int n, uint64_t tensor, int full_cols,
                           int) const {
    const float scale = 1.0f / std::sqrt(static_cast<float>(k));
    std::vector<double> w(size_t(n) * k), y(size_t(tokens) * n);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < k; ++j) w[size_t(r) * k + j] = value(tensor, uint64_t(r) * full_cols + j, scale, 0);
    for (int t = 0; t < tokens; ++t)
      for (int r = 0; r < n; ++r) {
        double a = 0;
        for (int j = 0; j < k; ++j) a += x[size_t(t) * k + j] * w[size_t(r) * k + j];
        y[size_t(t) * n + r] = bf16(a);
      }
    return y;
  }
  void rope(double* heads, int n, int pos) const {
    if (!c_.rope) return;
    const int d = c_.head_dim, half = d / 2;
    for (int hh = 0; hh < n; ++hh)
      for (int i = 0; i < half; ++i) {
        const double ang = pos * std::pow(10000.0, -2.0 * i / d);
        double* p = heads + size_t(hh) * d;
        const double a = p[i], b = p[i + half];
        p[i] = bf16(a * std::cos(ang) - b * std::sin(ang));
        p[i + half] = bf16(a * std::sin(ang) + b * std::cos(ang));
      }
  }
  static void addInto(std::vector<double>* x, const std::vector<double>& y) {
    for (size_t i = 0; i < x->size(); ++i) (*x)[i] = bf16((*x)[i] + y[i]);
  }

  workload::ModelConfig c_;
  uint64_t seed_;
};

}  // namespace tpscope::testing
