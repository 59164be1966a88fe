// SPDX-License-Identifier: Apache-2.0
// call_error_stats.cc - wire round trips over blocks of any size, and the error sums of one call.
#include "call_error_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpscope::wires {

using detail::WireCode;

float roundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (x != x) return x;
  u += 0x7FFF + ((u >> 16) & 1);
  u &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

void wireRoundTrip(WireCode w, const float* x, size_t n, int block, float* out) {
  if (w == WireCode::kExact) {
    std::copy(x, x + n, out);
    return;
  }
  if (w == WireCode::kBf16) {
    for (size_t i = 0; i < n; ++i) out[i] = roundToBf16(x[i]);
    return;
  }
  if (block == detail::kWireBlock) {  // the library's own reference
    std::vector<uint8_t> payload(detail::wirePayloadBytes(w, n));
    detail::encodeMessage(w, x, n, payload.data());
    detail::decodeMessage(w, payload.data(), n, out);
    return;
  }
  blockRoundTrip(w, x, n, block, out);
}

void blockRoundTrip(WireCode w, const float* x, size_t n, int block, float* out) {
  for (size_t i0 = 0; i0 < n; i0 += static_cast<size_t>(block)) {
    const size_t i1 = std::min(n, i0 + static_cast<size_t>(block));
    float amax = 0;
    for (size_t i = i0; i < i1; ++i)
      if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
    const float s = detail::wireScale(w, amax);
    for (size_t i = i0; i < i1; ++i) out[i] = detail::wireDecode(w, detail::wireEncode(w, x[i], s), s);
  }
}

double CallError::relRms() const { return sum_sq_exact > 0 ? std::sqrt(sum_sq_error / sum_sq_exact) : 0.0; }

CallError& CallError::operator+=(const CallError& o) {
  sum_sq_error += o.sum_sq_error, sum_sq_exact += o.sum_sq_exact;
  max_abs = std::max(max_abs, o.max_abs), max_abs_rel = std::max(max_abs_rel, o.max_abs_rel);
  values += o.values, nonfinite += o.nonfinite;
  return *this;
}

CallError callError(WireCode w, int block, const std::vector<std::vector<float>>& ranks) {
  const size_t n = ranks.front().size();
  std::vector<float> acc(n, 0.0f), d(n);
  std::vector<double> exact(n, 0.0);
  std::vector<bool> finite(n, true);
  for (const std::vector<float>& x : ranks) {
    wireRoundTrip(w, x.data(), n, block, d.data());
    for (size_t i = 0; i < n; ++i) {
      acc[i] += d[i];  // float32, rank order, from zero
      exact[i] += static_cast<double>(x[i]);
      finite[i] = finite[i] && std::isfinite(x[i]);
    }
  }
  CallError e;
  for (size_t i = 0; i < n; ++i) {
    if (!finite[i]) {
      ++e.nonfinite;
      continue;
    }
    const double err = static_cast<double>(roundToBf16(acc[i])) - exact[i];
    e.sum_sq_error += err * err, e.sum_sq_exact += exact[i] * exact[i];
    e.max_abs = std::max(e.max_abs, std::fabs(err));
    ++e.values;
  }
  const double rms = e.values ? std::sqrt(e.sum_sq_exact / static_cast<double>(e.values)) : 0.0;
  e.max_abs_rel = rms > 0 ? e.max_abs / rms : 0.0;
  return e;
}

double wireBytesPerValue(WireCode w, int block, int dtype_bytes) {
  if (w == WireCode::kExact) return dtype_bytes;
  if (w == WireCode::kBf16) return 2;
  return detail::wireCodeBits(w) / 8.0 + 4.0 / block;
}

}  // namespace tpscope::wires
