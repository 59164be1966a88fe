// SPDX-License-Identifier: Apache-2.0
// call_error_stats.h - the error a wire adds to one AllReduce call, computed on the CPU against the exact sum
// (benchmarks/wires/call_error runs it over a capture of a model's own AllReduce inputs).
//
// For a call of n values per rank, x_r (r = 0 .. N-1, bfloat16 values read as floats):
//   S_i = sum_r x_r,i                         in float64: the exact sum (exact unless two ranks' values
//                                             differ in magnitude by more than 2^44)
//   d_r = decode(encode(x_r))                 the values rank r's payload stands for on the wire (x_r itself
//                                             on the exact wire), blocks of `block` values per scale
//   W_i = bf16(((0 + d_0,i) + d_1,i) + ... + d_{N-1},i)   float32 additions in rank order from zero, the sum
//                                             rounded to bfloat16 (nearest, ties to even): what every rank
//                                             holds after the call (the host backend's order and rounding)
//   rel_rms = sqrt(sum_i (W_i - S_i)^2 / sum_i S_i^2)
//   max_abs = max_i |W_i - S_i| / sqrt(sum_i S_i^2 / n)    the largest error in units of the exact sum's RMS
// The exact wire's W differs from S only by the bfloat16 rounding of the result: the floor every bf16
// AllReduce has, beside which a lossy wire's figures read.
#pragma once

#include <cstddef>
#include <vector>

#include "allreduce/wire.h"

namespace tpscope::wires {

using detail::WireCode;

// The values n values x stand for after a round trip through wire w with `block` values per scale, into
// out: wire_codec.h's per-value arithmetic over blocks of any size (for block == kWireBlock the library's
// encodeMessage / decodeMessage, which the tests check it against). bf16: each value rounded; exact: x.
void wireRoundTrip(WireCode w, const float* x, size_t n, int block, float* out);
// The same through wire_codec.h's per-value functions at every block size, the library's reference left
// aside (int8, fp8, int4 only): what wireRoundTrip does for blocks other than kWireBlock.
void blockRoundTrip(WireCode w, const float* x, size_t n, int block, float* out);

// Rounds to the nearest bfloat16 (ties to even) and back; NaN stays NaN.
float roundToBf16(float x);

// One call's error sums (above); calls pool by adding them.
struct CallError {
  double sum_sq_error = 0;  // sum_i (W_i - S_i)^2
  double sum_sq_exact = 0;  // sum_i S_i^2
  double max_abs = 0;       // max_i |W_i - S_i|
  double max_abs_rel = 0;   // one call: max_abs over the exact sum's RMS (0 when that is 0); pooled: the largest
  size_t values = 0;        // n
  size_t nonfinite = 0;     // positions where some rank's value is NaN or infinite: left out of the sums
  double relRms() const;    // 0 when the exact sum is all zeros
  CallError& operator+=(const CallError& o);  // pooled: sums and counts add, the maxima are the larger
};

// The error of wire w (block values per scale) on the call whose ranks' inputs are ranks[r] (all of the
// same length, at least one rank).
CallError callError(WireCode w, int block, const std::vector<std::vector<float>>& ranks);

// Bytes a value takes on wire w with `block` values per scale (the scale's 4 bytes shared by the block);
// `dtype_bytes` for exact.
double wireBytesPerValue(WireCode w, int block, int dtype_bytes);

}  // namespace tpscope::wires
