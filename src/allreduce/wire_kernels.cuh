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

// Encodes n values of x into the payload at `out`, a warp per block (the copy-engine path's D2H source).
template <typename T, WireCode W>
__global__ void wireEncodeKernel(const T* x, size_t n, void* out) {
  const WirePayload p = WirePayload::at(out, W, n);
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  float a, b;
  for (size_t k = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; k < wireBlocks(n); k += warps)
    warpEncode<T, W>(x, n, k, p, &a, &b);
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
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x & 31;
  for (size_t k = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; k < wireBlocks(n); k += warps) {
    float mine0, mine1;
    warpEncode<T, W, false>(buf, n, k, WirePayload{}, &mine0, &mine1);
    float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
      if (q >= args.nranks) break;
      float a = mine0, b = mine1;
      if (q != args.rank) warpDecode<W>(WirePayload::at(const_cast<void*>(args.payload[q]), W, n), n, k, &a, &b);
      acc0 += a, acc1 += b;
    }
    const size_t i = k * kWireBlock + 2 * lane;
    if (i < n) buf[i] = Elem<T>::fromFloat(acc0);
    if (i + 1 < n) buf[i + 1] = Elem<T>::fromFloat(acc1);
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
