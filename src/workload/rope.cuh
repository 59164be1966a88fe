// SPDX-License-Identifier: Apache-2.0
// rope.cuh - the rotary position embedding of one pair, shared by the RoPE kernel (kernels.cu) and the
// decode attention kernel that applies it itself (attention_decode.cu), so both round alike.
#pragma once

#include <cuda_runtime.h>

namespace tpscope::workload {

// GPT-NeoX layout: the pair (x0, x1) = (h[i], h[i + d/2]) of a head of size d at position `pos`,
// rotated by pos * 10000^(-2i/d). 10000^(-2i/d) is computed as exp2, and the angle is reduced to
// [-pi, pi] before the fast sincos: sincosf on a raw angle of thousands of radians takes the slow
// reduction path.
__device__ __forceinline__ float2 ropePair(float x0, float x1, int pos, int i, int d) {
  const float freq = exp2f(-2.0f * i / d * 13.287712379549449f);  // log2(10000)
  float a = pos * freq;
  a -= 6.283185307179586f * rintf(a * 0.15915494309189535f);
  float sn, cs;
  __sincosf(a, &sn, &cs);
  return make_float2(x0 * cs - x1 * sn, x0 * sn + x1 * cs);
}

}  // namespace tpscope::workload
