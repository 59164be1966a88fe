// SPDX-License-Identifier: Apache-2.0
// wire_codec.h - the compressed wires' numbers: one block of values to codes and a scale, and a code back
// to a value. Host and device share these functions (the unit tests run the GPU's arithmetic on the CPU).
//
// A block is kWireBlock consecutive values of one rank's message (the last block of a message may be
// shorter). Its scale is the largest finite magnitude in it over the format's largest finite code, one
// float per block; a code times the scale is the value a peer adds. Special values travel as codes of
// their own, never through the scale, so a NaN or an infinity comes out of the sum as it does on the exact
// wire (a NaN anywhere makes a NaN, +Inf and -Inf together make a NaN):
//   int8  finite codes -126..126, +127 = +Inf, -127 = -Inf, -128 = NaN;
//   fp8   e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits, subnormals), finite up to 416:
//         0x7E (448) = +Inf, 0xFE = -Inf, 0x7F and 0xFF = NaN;
//   int4  two codes a byte (element 2i in the low nibble), finite -6..6, +7 = +Inf, -7 = -Inf, -8 = NaN.
//   bf16  float32 messages only: each value rounded to bfloat16 (nearest, ties to even), no scale.
// A block of zeros has scale 0 and decodes to zeros; a block whose largest magnitude is so small that the
// scale underflows takes the smallest subnormal as its scale. The arithmetic is IEEE single precision with
// no contraction (__fmul_rn on the GPU), so the CPU and every GPU decode the same codes to the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#ifdef __CUDACC__
#define TPS_WIRE_HD __host__ __device__ __forceinline__
#else
#define TPS_WIRE_HD inline
#endif

namespace tpscope::detail {

// The formats a wire may carry (tpsWire_t's lossy values, in its order).
enum class WireCode : int { kExact = 0, kBf16 = 1, kInt8 = 2, kFp8 = 3, kInt4 = 4 };

// Values per scale: 64, so a block's float scale adds 4/64 byte per value (int8: 1.0625 bytes a value,
// 0.53 of bf16's 2). The block size is measured against 32 and 128 on captured activations in
// docs/PERFORMANCE.md#wires.
constexpr int kWireBlock = 64;

// The largest finite code of a scaled format: what a block's largest finite magnitude maps to.
TPS_WIRE_HD float wireMaxCode(WireCode w) {
  return w == WireCode::kInt8 ? 126.0f : w == WireCode::kFp8 ? 416.0f : w == WireCode::kInt4 ? 6.0f : 1.0f;
}

// Bits per value of a format (the scale aside).
TPS_WIRE_HD int wireCodeBits(WireCode w) {
  return w == WireCode::kInt4 ? 4 : w == WireCode::kBf16 ? 16 : w == WireCode::kExact ? 0 : 8;
}
TPS_WIRE_HD bool wireScaled(WireCode w) { return w == WireCode::kInt8 || w == WireCode::kFp8 || w == WireCode::kInt4; }

TPS_WIRE_HD float wireMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TPS_WIRE_HD float wireDiv(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

TPS_WIRE_HD bool wireIsNan(float x) { return x != x; }
TPS_WIRE_HD bool wireIsInf(float x) { return fabsf(x) == std::numeric_limits<float>::infinity(); }

// A block's scale from its largest finite magnitude.
TPS_WIRE_HD float wireScale(WireCode w, float amax) {
  if (!(amax > 0.0f)) return 0.0f;
  const float s = wireDiv(amax, wireMaxCode(w));
  return s > 0.0f ? s : std::numeric_limits<float>::denorm_min();
}

// ---- e4m3 ---------------------------------------------------------------------------------------------

// |v| <= 416 finite, to its e4m3 magnitude code (nearest, ties to even).
TPS_WIRE_HD uint8_t e4m3Magnitude(float v) {
  if (v < 0.015625f) return static_cast<uint8_t>(rintf(wireMul(v, 512.0f)));  // subnormals: steps of 2^-9
  int e = 0;
  const float m = frexpf(v, &e);         // v = m * 2^e, m in [0.5, 1)
  float q = rintf(ldexpf(m, 4) - 8.0f);  // the three mantissa bits below the leading one
  if (q >= 8.0f) q = 0.0f, ++e;
  const int code = ((e - 1 + 7) << 3) | static_cast<int>(q);
  return static_cast<uint8_t>(code > 0x7D ? 0x7D : code);  // 0x7E is +Inf here
}

TPS_WIRE_HD float e4m3Value(uint8_t c) {
  const int exp = (c >> 3) & 0xF, man = c & 7;
  const float mag = exp == 0 ? ldexpf(static_cast<float>(man), -9) : ldexpf(static_cast<float>(8 + man), exp - 10);
  return (c & 0x80) ? -mag : mag;
}

// ---- one value ----------------------------------------------------------------------------------------

// The code of value x in a block of scale s (s from wireScale of the block's largest finite magnitude).
TPS_WIRE_HD uint8_t wireEncode(WireCode w, float x, float s) {
  if (w == WireCode::kFp8) {
    if (wireIsNan(x)) return 0x7F;
    if (wireIsInf(x)) return x > 0 ? 0x7E : 0xFE;
    const float r = s > 0.0f ? wireDiv(fabsf(x), s) : 0.0f;
    const uint8_t mag = e4m3Magnitude(r < 416.0f ? r : 416.0f);
    return static_cast<uint8_t>(mag | (x < 0.0f && mag != 0 ? 0x80 : 0));
  }
  const float top = wireMaxCode(w);  // int8: 126, int4: 6
  int code;
  if (wireIsNan(x)) {
    code = -static_cast<int>(top) - 2;
  } else if (wireIsInf(x)) {
    code = x > 0 ? static_cast<int>(top) + 1 : -static_cast<int>(top) - 1;
  } else {
    const float r = s > 0.0f ? rintf(wireDiv(x, s)) : 0.0f;
    code = static_cast<int>(r > top ? top : r < -top ? -top : r);
  }
  return static_cast<uint8_t>(w == WireCode::kInt4 ? (code & 0xF) : (code & 0xFF));
}

// The value code c of a block of scale s stands for.
TPS_WIRE_HD float wireDecode(WireCode w, uint8_t c, float s) {
  if (w == WireCode::kFp8) {
    if ((c & 0x7F) == 0x7F) return std::numeric_limits<float>::quiet_NaN();
    if ((c & 0x7F) == 0x7E)
      return (c & 0x80) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    return wireMul(e4m3Value(c), s);
  }
  const int top = static_cast<int>(wireMaxCode(w));
  const int code = w == WireCode::kInt4 ? ((c & 0x8) ? static_cast<int>(c & 0xF) - 16 : static_cast<int>(c & 0xF))
                                        : static_cast<int>(static_cast<int8_t>(c));
  if (code == -top - 2) return std::numeric_limits<float>::quiet_NaN();
  if (code == top + 1) return std::numeric_limits<float>::infinity();
  if (code == -top - 1) return -std::numeric_limits<float>::infinity();
  return wireMul(static_cast<float>(code), s);
}

// ---- payload layout -----------------------------------------------------------------------------------
// One rank's encoded message of n values: the codes (n x bits / 8 bytes, rounded up to 16), then one float
// scale per block. bf16: the n bfloat16 values alone.

TPS_WIRE_HD size_t wireBlocks(size_t n) { return (n + kWireBlock - 1) / kWireBlock; }
TPS_WIRE_HD size_t wireCodeBytes(WireCode w, size_t n) {
  return ((n * static_cast<size_t>(wireCodeBits(w)) + 7) / 8 + 15) / 16 * 16;
}
// Bytes of one rank's encoded message of n values.
TPS_WIRE_HD size_t wirePayloadBytes(WireCode w, size_t n) {
  return wireCodeBytes(w, n) + (wireScaled(w) ? wireBlocks(n) * sizeof(float) : 0);
}

}  // namespace tpscope::detail
