// SPDX-License-Identifier: Apache-2.0
// dtype_values.h - one element of an f32, f16 or bf16 buffer read as a float and written from one, on
// the host, rounding to nearest even as the device does. For the AllReduce tests, in one process and
// in the rank-per-process workers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>

#include "tpscope/tpscope.h"

namespace tpscope::testing {

inline float toFloat(tpsDataType_t t, const void* p, size_t i) {
  if (t == tpsFloat32) return static_cast<const float*>(p)[i];
  if (t == tpsFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

inline void fromFloat(tpsDataType_t t, void* p, size_t i, float v) {
  if (t == tpsFloat32)
    static_cast<float*>(p)[i] = v;
  else if (t == tpsFloat16)
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

}  // namespace tpscope::testing
