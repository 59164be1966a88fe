// SPDX-License-Identifier: Apache-2.0
// wire_kernels.cuh - the compressed wires on the GPU, with wire_codec.h's arithmetic: eight lanes take one
// block of kWireBlock values (8 consecutive values a lane, one 16-byte load of a 16-bit type, two of a
// float), so a warp moves four blocks per step with wide loads and stores; a block's largest magnitude is a
// maximum over its 8 lanes. Both host paths use these functions: the copy-engine path's encode and add
// kernels and the kernel path's one kernel.
//
// A payload of n values is laid out as wire_codec.h says: codes, then one float scale per block. Every rank
// decodes every payload, its own included, through the same functions in the same rank order, so all ranks
// hold the same sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "allreduce/host_kernels.cuh"
#include "allreduce/reduce_ops.cuh"
#include "allreduce/wire_codec.h"

namespace tpscope::detail {

// A view of one payload of n values.
struct WirePayload {
  uint8_t* codes;
  float* scales;
  __host__ __device__ static WirePayload at(void* base, WireCode w, size_t n) {
    uint8_t* c = static_cast<uint8_t*>(base);
    return WirePayload{c, reinterpret_cast<float*>(c + wireCodeBytes(w, n))};
  }
};

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

// One lane's codes of a payload (its 8 values at i, block k) and the block's scale: what encodeLane makes and
// storeCodes8 stores, and what loadCodes8 loads (for every peer first, decoded after, so that a lane's reads
// of remote memory are in flight together).
struct Codes8 {
  uint4 w;  // bf16: eight 16-bit codes; int8, fp8: .x and .y; int4: .x
  float s;  // the block's scale (not bf16)
};

// The lane's 8 values v (at i of n) encoded, and v replaced by what they decode to. Values past n must be
// zero (load8 makes them so). Every lane of the warp must call it: a block's scale is a maximum over its
// eight lanes.
template <WireCode W>
__device__ __forceinline__ Codes8 encodeLane(float v[8], size_t n, size_t i) {
  Codes8 out{make_uint4(0, 0, 0, 0), 0.0f};
  if constexpr (W == WireCode::kBf16) {
    unsigned w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __nv_bfloat16 b = __float2bfloat16_rn(v[j]);
      w[j / 2] |= static_cast<unsigned>(__bfloat16_as_ushort(b)) << (16 * (j % 2));
      v[j] = __bfloat162float(b);
    }
    out.w = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (i + j < n && !wireIsNan(v[j]) && !wireIsInf(v[j])) m = fmaxf(m, fabsf(v[j]));
    out.s = wireScale(W, laneGroupMax(m));
    unsigned w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint8_t c = wireEncode(W, v[j], out.s);
      v[j] = wireDecode(W, c, out.s);
      if constexpr (W == WireCode::kInt4)
        w[0] |= static_cast<unsigned>(c) << (4 * j);
      else
        w[j / 4] |= static_cast<unsigned>(c) << (8 * (j % 4));
    }
    out.w.x = w[0], out.w.y = w[1];
  }
  return out;
}

// Stores a lane's codes (at i of n, block k) into payload p, the block's scale by its first lane; nothing
// past n.
template <WireCode W>
__device__ __forceinline__ void storeCodes8(const Codes8& c, WirePayload p, size_t n, size_t i, size_t k, bool first) {
  if (i >= n) return;
  const bool whole = i + 8 <= n;
  if constexpr (W == WireCode::kBf16) {
    unsigned short* out = reinterpret_cast<unsigned short*>(p.codes) + i;
    if (whole) {
      *reinterpret_cast<uint4*>(out) = c.w;
    } else {
      const unsigned w[4] = {c.w.x, c.w.y, c.w.z, c.w.w};
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (i + j < n) out[j] = static_cast<unsigned short>(w[j / 2] >> (16 * (j % 2)));
    }
    return;
  }
  if constexpr (W == WireCode::kInt4) {
    uint8_t* out = p.codes + i / 2;
    if (whole) {
      *reinterpret_cast<uint32_t*>(out) = c.w.x;
    } else {
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (i + 2 * b < n) out[b] = static_cast<uint8_t>((c.w.x >> (8 * b)) & (i + 2 * b + 1 < n ? 0xFFu : 0x0Fu));
    }
  } else if (whole) {
    *reinterpret_cast<uint2*>(p.codes + i) = make_uint2(c.w.x, c.w.y);
  } else {
    const unsigned w[2] = {c.w.x, c.w.y};
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (i + j < n) p.codes[i + j] = static_cast<uint8_t>(w[j / 4] >> (8 * (j % 4)));
  }
  if (first && k < wireBlocks(n)) p.scales[k] = c.s;
}

template <typename U, bool kVolatile>
__device__ __forceinline__ U load(const U* p) {
  if constexpr (kVolatile) return __ldcv(p);
  return *p;
}

// kVolatile: the payload is in host memory that another GPU rewrites between calls, so it is read past
// the caches. Codes past n load as zero.
template <WireCode W, bool kVolatile>
__device__ __forceinline__ Codes8 loadCodes8(WirePayload p, size_t n, size_t i, size_t k) {
  Codes8 c{make_uint4(0, 0, 0, 0), 0.0f};
  if (i >= n) return c;
  const bool whole = i + 8 <= n;
  if constexpr (W == WireCode::kBf16) {
    const unsigned short* in = reinterpret_cast<const unsigned short*>(p.codes) + i;
    if (whole) return Codes8{load<uint4, kVolatile>(reinterpret_cast<const uint4*>(in)), 0.0f};
    unsigned w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (i + j < n) w[j / 2] |= static_cast<unsigned>(load<unsigned short, kVolatile>(in + j)) << (16 * (j % 2));
    c.w = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    c.s = load<float, kVolatile>(p.scales + k);
    if constexpr (W == WireCode::kInt4) {
      const uint8_t* in = p.codes + i / 2;
      if (whole) {
        c.w.x = load<unsigned, kVolatile>(reinterpret_cast<const unsigned*>(in));
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if (i + 2 * b < n) c.w.x |= static_cast<unsigned>(load<uint8_t, kVolatile>(in + b)) << (8 * b);
      }
    } else if (whole) {
      const uint2 u = load<uint2, kVolatile>(reinterpret_cast<const uint2*>(p.codes + i));
      c.w.x = u.x, c.w.y = u.y;
    } else {
      unsigned w[2] = {0, 0};
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (i + j < n) w[j / 4] |= static_cast<unsigned>(load<uint8_t, kVolatile>(p.codes + i + j)) << (8 * (j % 4));
      c.w.x = w[0], c.w.y = w[1];
    }
  }
  return c;
}

// The lane's 8 values (at i) from its codes, decoded (zero past n).
template <WireCode W>
__device__ __forceinline__ void decodeCodes8(const Codes8& c, size_t n, size_t i, float v[8]) {
  const unsigned w[4] = {c.w.x, c.w.y, c.w.z, c.w.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float x;
    if constexpr (W == WireCode::kBf16)
      x = __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(w[j / 2] >> (16 * (j % 2)))));
    else if constexpr (W == WireCode::kInt4)
      x = wireDecode(W, static_cast<uint8_t>((w[0] >> (4 * j)) & 0xF), c.s);
    else
      x = wireDecode(W, static_cast<uint8_t>(w[j / 4] >> (8 * (j % 4))), c.s);
    v[j] = i + j < n ? x : 0.0f;
  }
}

// The rank-order sum of every rank's decoded values of the lane's 8 values (at i): this rank's own
// re-encoded from buf (the codes its peers received), each peer's from its codes in `in`.
template <typename T, WireCode W>
__device__ __forceinline__ void rankOrderSum(const T* buf, size_t n, size_t i, bool wide,
                                             const Codes8 in[TPS_MAX_DEVICES], int rank, int nranks, float acc[8]) {
  float mine[8], d[8];
  load8<T>(buf, n, i, wide, mine);
  encodeLane<W>(mine, n, i);
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int q = 0; q < TPS_MAX_DEVICES; ++q) {
    if (q >= nranks) break;
    if (q == rank) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += mine[j];
    } else {
      decodeCodes8<W>(in[q], n, i, d);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += d[j];
    }
  }
}

// The lane's 8 values of buf (at i) replaced by their rankOrderSum.
template <typename T, WireCode W>
__device__ __forceinline__ void sumInRankOrder(T* buf, size_t n, size_t i, bool wide, const Codes8 in[TPS_MAX_DEVICES],
                                               int rank, int nranks) {
  float acc[8];
  rankOrderSum<T, W>(buf, n, i, wide, in, rank, nranks, acc);
  store8<T>(buf, n, i, wide, acc);
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
    storeCodes8<W>(encodeLane<W>(v, n, i), p, n, i, k, lane % kWireLanes == 0);
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
    Codes8 in[TPS_MAX_DEVICES];
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < args.nranks && q != args.rank)
        in[q] = loadCodes8<W, false>(WirePayload::at(const_cast<void*>(args.payload[q]), W, n), n, i, k);
    sumInRankOrder<T, W>(buf, n, i, wide, in, args.rank, args.nranks);
  }
}

// ---- the host kernel path on a compressed wire ---------------------------------------------------------
// host_kernels.cuh's protocol (write, publish, wait, reduce, with its slots, flags and sequence numbers),
// with each block's range a whole number of wire blocks: the block's warps encode its range of this rank's
// message into this rank's staging region (the payload of the piece's `count` values), publish, wait for
// the peers, then load every peer's codes of a lane's values at once and sum in rank order every rank's
// decoded payload, this rank's own re-encoded from buf (the codes its peers read). The payload is smaller
// than the message, so it fits the staging stride. A lane of a warp's last step may hold values past the
// block's range (`end`): it takes part in its group's maximum with none, and stores nothing.
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
  const size_t end = min(count, u1 * kWireBlock);  // this block's values end here
  const int lane = tid & 31, warp = tid / 32, warps = blockDim.x / 32;
  const size_t per_warp = 32 / kWireLanes;
  const bool wide = (reinterpret_cast<uintptr_t>(buf) & 15) == 0;
  auto payload = [&](int q) {
    return WirePayload::at(h.stage + (static_cast<size_t>(slot) * h.nranks + q) * h.stage_stride, W, count);
  };
  for (size_t k0 = u0 + warp * per_warp; k0 < u1; k0 += warps * per_warp) {
    const size_t k = k0 + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
    float v[8];
    load8<T>(buf, end, i, wide, v);
    storeCodes8<W>(encodeLane<W>(v, end, i), payload(h.rank), end, i, k, lane % kWireLanes == 0);
  }
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
  for (size_t k0 = u0 + warp * per_warp; k0 < u1; k0 += warps * per_warp) {
    const size_t k = k0 + lane / kWireLanes;
    const size_t i = k * kWireBlock + (lane % kWireLanes) * kWireLaneValues;
    Codes8 in[TPS_MAX_DEVICES];
#pragma unroll
    for (int q = 0; q < TPS_MAX_DEVICES; ++q)
      if (q < h.nranks && q != h.rank) in[q] = loadCodes8<W, true>(payload(q), end, i, k);
    sumInRankOrder<T, W>(buf, end, i, wide, in, h.rank, h.nranks);
  }
  if (tid == 0) h.counters[b] = s;
}

}  // namespace tpscope::detail
