// SPDX-License-Identifier: Apache-2.0
// bench/check.cc - inputs from (seed, rank, index) and the host reference check, spread over CPU threads.
#include "bench/check.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "allreduce/wire.h"

namespace tpscope::cli {

namespace {

// splitmix64's finaliser: a good 64-bit mix, cheap enough for 10^8 elements.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Runs fn(begin, end, thread) over [0, n) on up to hardware_concurrency threads, at least `grain` items a
// thread. Below 1M elements one thread is faster than starting more.
template <typename Fn>
void parallelFor(size_t n, Fn fn, size_t grain = size_t{1} << 20) {
  const size_t threads = std::clamp<size_t>(n / grain, 1, std::max(1u, std::thread::hardware_concurrency()));
  if (threads == 1) return fn(size_t{0}, n, size_t{0});
  std::vector<std::thread> pool;
  const size_t step = (n + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([=] { fn(std::min(n, t * step), std::min(n, (t + 1) * step), t); });
  for (auto& th : pool) th.join();
}

double unitRoundoff(tpsDataType_t t) {
  switch (t) {
    case tpsBfloat16: return std::ldexp(1.0, -8);
    case tpsFloat16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

double benchInputValue(uint64_t seed, int rank, size_t index) {
  const uint64_t h = mix(mix(seed ^ (static_cast<uint64_t>(rank) << 56)) ^ index);
  const double k = static_cast<double>(64 + h % 192);
  return (h >> 63) ? -k / 64.0 : k / 64.0;
}

void fillBenchInput(uint64_t seed, int rank, tpsDataType_t dtype, size_t count, void* dst) {
  parallelFor(count, [&](size_t b, size_t e, size_t) {
    for (size_t i = b; i < e; ++i) {
      const float v = static_cast<float>(benchInputValue(seed, rank, i));
      if (dtype == tpsFloat32) static_cast<float*>(dst)[i] = v;
      if (dtype == tpsFloat16) static_cast<__half*>(dst)[i] = __float2half_rn(v);
      if (dtype == tpsBfloat16) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
    }
  });
}

double decodeElement(tpsDataType_t dtype, const void* data, size_t i) {
  switch (dtype) {
    case tpsFloat16: return __half2float(static_cast<const __half*>(data)[i]);
    case tpsBfloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

double benchTolerance(tpsDataType_t dtype, int nranks, double sum_abs) {
  const double ku = (nranks - 1) * unitRoundoff(dtype);
  return ku / (1 - ku) * sum_abs;
}

namespace {

// Element i's reference (the sum in double over `nranks` ranks) and its tolerance.
void referenceAt(uint64_t seed, tpsDataType_t dtype, int nranks, size_t i, double* ref, double* tol) {
  double sum = 0, sum_abs = 0;
  for (int r = 0; r < nranks; ++r) {
    const double x = benchInputValue(seed, r, i);
    sum += x;
    sum_abs += std::fabs(x);
  }
  *ref = sum;
  *tol = benchTolerance(dtype, nranks, sum_abs);
}

}  // namespace

uint64_t countOutOfTolerance(uint64_t seed, tpsDataType_t dtype, size_t count, int nranks, const void* result) {
  std::vector<uint64_t> part(std::max(1u, std::thread::hardware_concurrency()));
  parallelFor(count, [&](size_t b, size_t e, size_t t) {
    uint64_t bad = 0;
    for (size_t i = b; i < e; ++i) {
      double ref = 0, tol = 0;
      referenceAt(seed, dtype, nranks, i, &ref, &tol);
      bad += !(std::fabs(decodeElement(dtype, result, i) - ref) <= tol);  // NaN fails too
    }
    part[t] = bad;
  });
  uint64_t total = 0;
  for (uint64_t v : part) total += v;
  return total;
}

namespace {

// Elements the check takes at once: a whole number of wire blocks, so that a piece's blocks are the
// message's blocks (the codec's blocks start at element 0), and few enough to keep its buffers small.
constexpr size_t kPiece = size_t{1} << 16;
static_assert(kPiece % detail::kWireBlock == 0, "a piece is a whole number of wire blocks");

struct CheckPart {
  CheckCounts counts;
  double err2 = 0, ref2 = 0, max_err = 0;  // rank 0's error against the exact sum
  bool nan = false;                        // rank 0's result has a NaN where the exact sum is finite
};

}  // namespace

CheckCounts checkResults(uint64_t seed, tpsDataType_t dtype, size_t count, const std::vector<const void*>& results,
                         detail::WireCode wire, bool sum_on_wire) {
  const int n = static_cast<int>(results.size());
  const size_t elem = tpsDataTypeSize(dtype);
  const bool lossy = wire != detail::WireCode::kExact;
  const size_t pieces = (count + kPiece - 1) / kPiece;
  std::vector<CheckPart> part(std::max(1u, std::thread::hardware_concurrency()));
  parallelFor(
      pieces,
      [&](size_t b, size_t e, size_t t) {
        CheckPart p;
        std::vector<float> x(lossy ? kPiece : 0);
        std::vector<uint8_t> payload(lossy ? detail::wirePayloadBytes(wire, kPiece) : 0);
        std::vector<float> carried(lossy ? static_cast<size_t>(n) * kPiece : 0);  // [rank][i]: what the wire carried
        std::vector<float> resent(sum_on_wire ? kPiece : 0);  // the float sum of `carried`, carried once more
        for (size_t piece = b; piece < e; ++piece) {
          const size_t i0 = piece * kPiece, len = std::min(kPiece, count - i0);
          for (int r = 0; r < n && lossy; ++r) {
            for (size_t i = 0; i < len; ++i) x[i] = static_cast<float>(benchInputValue(seed, r, i0 + i));
            detail::encodeMessage(wire, x.data(), len, payload.data());
            detail::decodeMessage(wire, payload.data(), len, carried.data() + r * kPiece);
          }
          if (lossy && sum_on_wire) {
            for (size_t i = 0; i < len; ++i) {
              float s = 0.0f;
              for (int r = 0; r < n; ++r) s += carried[r * kPiece + i];
              x[i] = s;
            }
            detail::encodeMessage(wire, x.data(), len, payload.data());
            detail::decodeMessage(wire, payload.data(), len, resent.data());
          }
          for (size_t i = 0; i < len; ++i) {
            double exact = 0, exact_abs = 0, sent = 0, sent_abs = 0;
            for (int r = 0; r < n; ++r) {
              const double v = benchInputValue(seed, r, i0 + i);
              exact += v;
              exact_abs += std::fabs(v);
              if (lossy) {
                const double c = carried[r * kPiece + i];
                sent += c;
                sent_abs += std::fabs(c);
              }
            }
            const double ref = !lossy ? exact : sum_on_wire ? resent[i] : sent;
            // A sum carried once more is the reference exactly, but for its one rounding to the type,
            // which may exceed the sum's own bound where the wire rounded the sum up.
            const double tol = benchTolerance(dtype, n, lossy ? sent_abs : exact_abs) +
                               (sum_on_wire ? unitRoundoff(dtype) * std::fabs(ref) : 0.0);
            const auto* first = static_cast<const unsigned char*>(results[0]) + (i0 + i) * elem;
            for (int r = 0; r < n; ++r) {
              const bool bad = !(std::fabs(decodeElement(dtype, results[r], i0 + i) - ref) <= tol);  // NaN fails too
              const bool differs =
                  r > 0 && std::memcmp(static_cast<const unsigned char*>(results[r]) + (i0 + i) * elem, first, elem);
              p.counts.out_of_tolerance += bad;
              p.counts.not_identical += differs;
              p.counts.wrong += bad || differs;
            }
            const double err = decodeElement(dtype, results[0], i0 + i) - exact;
            if (std::isnan(err)) p.nan = true;
            p.err2 += err * err;
            p.ref2 += exact * exact;
            p.max_err = std::max(p.max_err, std::fabs(err));
          }
        }
        part[t] = p;
      },
      (size_t{1} << 20) / kPiece);
  CheckCounts total;
  double err2 = 0, ref2 = 0, max_err = 0;
  bool nan = false;
  for (const CheckPart& p : part) {
    total.out_of_tolerance += p.counts.out_of_tolerance;
    total.not_identical += p.counts.not_identical;
    total.wrong += p.counts.wrong;
    err2 += p.err2;
    ref2 += p.ref2;
    max_err = std::max(max_err, p.max_err);
    nan = nan || p.nan;
  }
  if (count > 0 && ref2 > 0) {
    total.rel_rms = nan ? std::nan("") : std::sqrt(err2 / ref2);
    total.rel_max = nan ? std::nan("") : max_err / std::sqrt(ref2 / static_cast<double>(count));
  }
  return total;
}

}  // namespace tpscope::cli
