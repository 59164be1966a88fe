// SPDX-License-Identifier: Apache-2.0
// wire_kernels.cuh - the compressed wires on the GPU: one warp encodes one block of kWireBlock values (each
// lane two of them), and decodes it again, with wire_codec.h's arithmetic.
//
// A payload of n values is laid out as wire_codec.h says: codes, then one float scale per block. Lane l of
// the warp that handles block k owns values 64k + 2l and 64k + 2l + 1; the block's largest finite magnitude
// is a warp maximum, its scale the same on every lane. Every rank decodes every payload, its own included,
// through the same functions in the same rank order, so all ranks hold the same sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "allreduce/host_kernels.cuh"
#include "allreduce/reduce_ops.cuh"
#include "allreduce/wire_codec.h"

namespace tpscope::detail {

static_assert(kWireBlock == 64, "a warp of 32 lanes takes a block two values a lane");

// A view of one payload of n values.
struct WirePayload {
  uint8_t* codes;
  float* scales;
  __host__ __device__ static WirePayload at(void* base, WireCode w, size_t n) {
    uint8_t* c = static_cast<uint8_t*>(base);
    return WirePayload{c, reinterpret_cast<float*>(c + wireCodeBytes(w, n))};
  }
};

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Lane l's two values of block k (zero past n).
template <typename T>
__device__ __forceinline__ void loadPair(const T* x, size_t n, size_t i, float* a, float* b) {
  *a = i < n ? Elem<T>::toFloat(x[i]) : 0.0f;
  *b = i + 1 < n ? Elem<T>::toFloat(x[i + 1]) : 0.0f;
}

// The warp encodes block k of x (n values) into p (when kStore), and returns in (*a, *b) what lane l's two
// values decode to: this rank's own contribution, exactly as its peers decode it.
template <typename T, WireCode W, bool kStore = true>
__device__ __forceinline__ void warpEncode(const T* x, size_t n, size_t k, WirePayload p, float* a, float* b) {
  const int lane = threadIdx.x & 31;
  const size_t i = k * kWireBlock + 2 * lane;
  float v0, v1;
  loadPair<T>(x, n, i, &v0, &v1);
  if constexpr (W == WireCode::kBf16) {
    const __nv_bfloat16 h0 = __float2bfloat16_rn(v0), h1 = __float2bfloat16_rn(v1);
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(p.codes);
    if (kStore && i + 1 < n)
      *reinterpret_cast<__nv_bfloat162*>(out + i) = __nv_bfloat162(h0, h1);  // one 4-byte store a lane
    else if (kStore && i < n)
      out[i] = h0;
    *a = __bfloat162float(h0), *b = __bfloat162float(h1);
  } else {
    float m = 0.0f;
    if (i < n && !wireIsNan(v0) && !wireIsInf(v0)) m = fabsf(v0);
    if (i + 1 < n && !wireIsNan(v1) && !wireIsInf(v1)) m = fmaxf(m, fabsf(v1));
    const float s = wireScale(W, warpMax(m));
    const uint8_t c0 = wireEncode(W, v0, s), c1 = wireEncode(W, v1, s);
    if constexpr (kStore) {
      if constexpr (W == WireCode::kInt4) {
        if (i < n) p.codes[i / 2] = static_cast<uint8_t>(c0 | (i + 1 < n ? c1 << 4 : 0));
      } else if (i + 1 < n) {
        *reinterpret_cast<uint16_t*>(p.codes + i) = static_cast<uint16_t>(c0 | (c1 << 8));  // one 2-byte store
      } else if (i < n) {
        p.codes[i] = c0;
      }
      if (lane == 0) p.scales[k] = s;
    }
    *a = wireDecode(W, c0, s), *b = wireDecode(W, c1, s);
  }
}

template <typename U, bool kVolatile>
__device__ __forceinline__ U load(const U* p) {
  return kVolatile ? __ldcv(p) : *p;
}

// Lane l's two values of block k of a payload of n values, decoded. kVolatile: the payload is in host
// memory that another GPU rewrites between calls, so it is read past the caches.
template <WireCode W, bool kVolatile = false>
__device__ __forceinline__ void warpDecode(WirePayload p, size_t n, size_t k, float* a, float* b) {
  const int lane = threadIdx.x & 31;
  const size_t i = k * kWireBlock + 2 * lane;
  *a = 0.0f, *b = 0.0f;
  if (i >= n) return;
  if constexpr (W == WireCode::kBf16) {
    const unsigned short* in = reinterpret_cast<const unsigned short*>(p.codes);
    if (i + 1 < n) {
      const unsigned pair = load<unsigned, kVolatile>(reinterpret_cast<const unsigned*>(in + i));
      *a = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair & 0xFFFF)));
      *b = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(pair >> 16)));
    } else {
      *a = __bfloat162float(__ushort_as_bfloat16(load<unsigned short, kVolatile>(in + i)));
    }
  } else {
    const float s = load<float, kVolatile>(p.scales + k);
    if constexpr (W == WireCode::kInt4) {
      const uint8_t c = load<uint8_t, kVolatile>(p.codes + i / 2);
      *a = wireDecode(W, c & 0xF, s);
      if (i + 1 < n) *b = wireDecode(W, c >> 4, s);
    } else if (i + 1 < n) {
      const unsigned short pair = load<unsigned short, kVolatile>(reinterpret_cast<const unsigned short*>(p.codes + i));
      *a = wireDecode(W, static_cast<uint8_t>(pair & 0xFF), s);
      *b = wireDecode(W, static_cast<uint8_t>(pair >> 8), s);
    } else {
      *a = wireDecode(W, load<uint8_t, kVolatile>(p.codes + i), s);
    }
  }
}

// ---- the copy-engine path: eight lanes a block ------------------------------------------------------------
// Whole messages, memory bound: each lane takes 8 consecutive values of a block (one 16-byte load of a
// 16-bit type, two of a float), so a warp moves four blocks per step with wide loads and stores; the
// block's largest magnitude is a maximum over its 8 lanes. The arithmetic per value is warpEncode's and
// warpDecode's (wire_codec.h), so the codes, the decoded values and the sums are the same bits.
constexpr int kWireLanes = 8;                             // lanes per block of kWireBlock values
constexpr int kWireLaneValues = kWireBlock / kWireLanes;  // values per lane
static_assert(kWireLaneValues == 8, "a lane's 8 values are one 16-byte vector of a 16-bit type");

__device__ __forceinline__ float laneGroupMax(float v) {
#pragma unroll
  for (int o = kWireLanes / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Values i..i+7 of x (zero past n); `wide`: x is 16-byte aligned, so whole groups load as vectors.
template <typename T>
__device__ __forceinline__ void load8(const T* x, size_t n, size_t i, bool wide, float v[8]) {
  if (wide && i + 8 <= n) {
    const uint4* p = reinterpret_cast<const uint4*>(x + i);
    if constexpr (sizeof(T) == 4) {
      const uint4 a = p[0], b = p[1];
      const float f[8] = {__uint_as_float(a.x), __uint_as_float(a.y), __uint_as_float(a.z), __uint_as_float(a.w),
                          __uint_as_float(b.x), __uint_as_float(b.y), __uint_as_float(b.z), __uint_as_float(b.w)};
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = f[j];
    } else {
      Vec<T> u;
      u.raw = p[0];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = Elem<T>::toFloat(u.e[j]);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = i + j < n ? Elem<T>::toFloat(x[i + j]) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void store8(T* x, size_t n, size_t i, bool wide, const float v[8]) {
  if (wide && i + 8 <= n) {
    uint4* p = reinterpret_cast<uint4*>(x + i);
    if constexpr (sizeof(T) == 4) {
      p[0] = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
      p[1] = make_uint4(__float_as_uint(v[4]), __float_as_uint(v[5]), __float_as_uint(v[6]), __float_as_uint(v[7]));
    } else {
      Vec<T> u;
#pragma unroll
      for (int j = 0; j < 8; ++j) u.e[j] = Elem<T>::fromFloat(v[j]);
      p[0] = u.raw;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (i + j < n) x[i + j] = Elem<T>::fromFloat(v[j]);
}

// The lane's 8 values v (at i, block k) encoded: their codes stored in p (when kStore; the block's scale
// by its first lane) and v replaced by what they decode to. Every lane of the warp must call it.
template <WireCode W, bool kStore>
__device__ __forceinline__ void encode8(float v[8], size_t n, size_t i, size_t k, bool first, WirePayload p) {
  if constexpr (W == WireCode::kBf16) {
    unsigned short h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __nv_bfloat16 b = __float2bfloat16_rn(v[j]);
      h[j] = __bfloat16_as_ushort(b);
      v[j] = __bfloat162float(b);
    }
    if constexpr (kStore) {
      unsigned short* out = reinterpret_cast<unsigned short*>(p.codes) + i;
      if (i + 8 <= n) {
        *reinterpret_cast<uint4*>(out) = make_uint4(h[0] | (unsigned(h[1]) << 16), h[2] | (unsigned(h[3]) << 16),
                                                    h[4] | (unsigned(h[5]) << 16), h[6] | (unsigned(h[7]) << 16));
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (i + j < n) out[j] = h[j];
      }
    }
  } else {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (i + j < n && !wireIsNan(v[j]) && !wireIsInf(v[j])) m = fmaxf(m, fabsf(v[j]));
    const float s = wireScale(W, laneGroupMax(m));
    uint8_t c[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      c[j] = wireEncode(W, v[j], s);
      v[j] = wireDecode(W, c[j], s);
    }
    if constexpr (kStore) {
      if constexpr (W == WireCode::kInt4) {
        uint8_t* out = p.codes + i / 2;
        if (i + 8 <= n) {
          *reinterpret_cast<uint32_t*>(out) = (c[0] | c[1] << 4) | (c[2] | c[3] << 4) << 8 | (c[4] | c[5] << 4) << 16 |
                                              static_cast<uint32_t>(c[6] | c[7] << 4) << 24;
        } else {
#pragma unroll
          for (int b = 0; b < 4; ++b)
            if (i + 2 * b < n) out[b] = static_cast<uint8_t>(c[2 * b] | (i + 2 * b + 1 < n ? c[2 * b + 1] << 4 : 0));
        }
      } else if (i + 8 <= n) {
        *reinterpret_cast<uint2*>(p.codes + i) =
            make_uint2(c[0] | c[1] << 8 | c[2] << 16 | static_cast<uint32_t>(c[3]) << 24,
                       c[4] | c[5] << 8 | c[6] << 16 | static_cast<uint32_t>(c[7]) << 24);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (i + j < n) p.codes[i + j] = c[j];
      }
      if (first && k < wireBlocks(n)) p.scales[k] = s;
    }
  }
}

// The lane's 8 values (at i, block k) of a payload of n values, decoded (zero past n).
template <WireCode W>
__device__ __forceinline__ void decode8(WirePayload p, size_t n, size_t i, size_t k, float v[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if (i >= n) return;
  if constexpr (W == WireCode::kBf16) {
    const unsigned short* in = reinterpret_cast<const unsigned short*>(p.codes) + i;
    if (i + 8 <= n) {
      const uint4 u = *reinterpret_cast<const uint4*>(in);
      const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[2 * j] = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w[j] & 0xFFFF)));
        v[2 * j + 1] = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w[j] >> 16)));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (i + j < n) v[j] = __bfloat162float(__ushort_as_bfloat16(in[j]));
    }
  } else {
    const float s = p.scales[k];
    uint8_t c[8];
    if constexpr (W == WireCode::kInt4) {
      const uint8_t* in = p.codes + i / 2;
      uint32_t w = 0;
      if (i + 8 <= n) {
        w = *reinterpret_cast<const uint32_t*>(in);
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if (i + 2 * b < n) w |= static_cast<uint32_t>(in[b]) << (8 * b);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) c[j] = (w >> (4 * j)) & 0xF;
    } else if (i + 8 <= n) {
      const uint2 u = *reinterpret_cast<const uint2*>(p.codes + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) c[j] = (u.x >> (8 * j)) & 0xFF, c[4 + j] = (u.y >> (8 * j)) & 0xFF;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) c[j] = i + j < n ? p.codes[i + j] : 0;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = i + j < n ? wireDecode(W, c[j], s) : 0.0f;
  }
}

// Encodes n values of x into the payload at `out` (the copy-engine path's D2H source).
template <typename T, WireCode W>
__global__ void wireEncodeKernel(const T* x, size_t n, void* out) {
  const WirePayload p = WirePayload::at(out, W, n);
  const int lane = threadIdx.x & 31;
  const bool wide = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const size_t per_warp = 32 / kWireLanes;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t k0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * per_warp; k0 < wireBlocks(n);
       k0 += warps * per_warp) {
    const size_t k = k0 + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
    float v[8];
    load8<T>(x, n, i, wide, v);
    encode8<W, true>(v, n, i, k, lane % kWireLanes == 0, p);
  }
}

// The copy-engine path's add with a wire: buf (n values) becomes the rank-order sum of every rank's
// decoded payload, this rank's own re-encoded from buf itself (the codes its peers received).
struct WireAddArgs {
  const void* payload[TPS_MAX_DEVICES];  // per rank q != rank: q's payload of this round (device memory)
  int rank;
  int nranks;
};

template <typename T, WireCode W>
__global__ void wireAddPeers(WireAddArgs args, T* buf, size_t n) {
  const int lane = threadIdx.x & 31;
  const bool wide = (reinterpret_cast<uintptr_t>(buf) & 15) == 0;
  const size_t per_warp = 32 / kWireLanes;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t k0 = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * per_warp; k0 < wireBlocks(n);
       k0 += warps * per_warp) {
    const size_t k = k0 + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
    float mine[8], acc[8], d[8];
    load8<T>(buf, n, i, wide, mine);
    encode8<W, false>(mine, n, i, k, false, WirePayload{});
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
      if (q >= args.nranks) break;
      if (q == args.rank) {
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += mine[j];
      } else {
        decode8<W>(WirePayload::at(const_cast<void*>(args.payload[q]), W, n), n, i, k, d);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += d[j];
      }
    }
    store8<T>(buf, n, i, wide, acc);
  }
}

// ---- the host kernel path on a compressed wire ---------------------------------------------------------
// host_kernels.cuh's protocol (write, publish, wait, reduce, with its slots, flags and sequence numbers),
// with each block's range a whole number of wire blocks: the block's warps encode its range of this rank's
// message into this rank's staging region (the payload of the piece's `count` values), publish, wait for
// the peers, then sum in rank order every rank's decoded payload, this rank's own re-encoded from buf
// (the codes its peers read). The payload is smaller than the message, so it fits the staging stride.
template <typename T, WireCode W>
__global__ void __launch_bounds__(kKernelThreads) hostKernelWire(HostKernelHandle h, T* buf, size_t count) {
  __shared__ unsigned long long seq;
  __shared__ int aborted;
  const int b = blockIdx.x, nb = gridDim.x, tid = threadIdx.x;
  if (tid == 0) {
    seq = h.counters[b] + 1;
    aborted = 0;
  }
  __syncthreads();
  const unsigned long long s = seq;
  const int slot = static_cast<int>(s & 1);
  const size_t units = wireBlocks(count), per = (units + nb - 1) / nb;
  const size_t u0 = min(units, per * b), u1 = min(units, u0 + per);
  const int warp = tid / 32, warps = blockDim.x / 32;
  auto payload = [&](int q) {
    return WirePayload::at(h.stage + (static_cast<size_t>(slot) * h.nranks + q) * h.stage_stride, W, count);
  };
  float a, v;
  for (size_t k = u0 + warp; k < u1; k += warps) warpEncode<T, W>(buf, count, k, payload(h.rank), &a, &v);
  __syncthreads();
  auto flag = [&](int q) { return h.flags + ((static_cast<size_t>(slot) * h.nranks + q) * nb + b) * kFlagStride; };
  if (tid == 0) storeRelease(flag(h.rank), s);
  if (tid < h.nranks && tid != h.rank) {
    const unsigned long long* f = flag(tid);
    const unsigned long long t0 = globalTimerNs();
    for (unsigned polls = 1; loadAcquire(f) < s; ++polls) {
      if (globalTimerNs() - t0 > h.timeout_ns ||
          (polls % kStatusPollInterval == 0 && errorRecorded(h.status, h.nranks))) {
        aborted = 1;
        break;
      }
      __nanosleep(64);
    }
  }
  __syncthreads();
  if (aborted) {
    if (tid == 0) reportTimeout(h.status, h.rank);
    return;
  }
  const int lane = tid & 31;
  for (size_t k = u0 + warp; k < u1; k += warps) {
    float mine0, mine1;
    warpEncode<T, W, false>(buf, count, k, WirePayload{}, &mine0, &mine1);
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int q = 0; q < h.nranks; ++q) {
      float x0 = mine0, x1 = mine1;
      if (q != h.rank) warpDecode<W, true>(payload(q), count, k, &x0, &x1);
      acc0 += x0, acc1 += x1;
    }
    const size_t i = k * kWireBlock + 2 * lane;
    if (i < count) buf[i] = Elem<T>::fromFloat(acc0);
    if (i + 1 < count) buf[i + 1] = Elem<T>::fromFloat(acc1);
  }
  if (tid == 0) h.counters[b] = s;
}

}  // namespace tpscope::detail
