// SPDX-License-Identifier: Apache-2.0
// allreduce_wire_test - the compressed wires on ranks sharing GPU 0: every rank ends with the same bits,
// and those bits are the CPU model's (each rank's message encoded and decoded as wire.h's reference does,
// summed in rank order in float, rounded once), for 2, 3 and 4 ranks, every dtype, lengths around a block,
// the kernel path and the copy engines, a misaligned buffer, zero blocks, subnormals, +-Inf and NaN (which
// come out as on the exact wire). The path the statistics name is the wire's. The p2p two-shot's wires
// likewise, against their own model (each slice summed by its owner, the sum encoded once more).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "allreduce/p2p_algo.h"
#include "allreduce/wire.h"
#include "dtype_values.h"
#include "gpu_test_util.h"
#include "tpscope/tpscope.h"

namespace {

using tpscope::detail::decodeMessage;
using tpscope::detail::encodeMessage;
using tpscope::detail::kP2pTwoShotPiece;
using tpscope::detail::kWireBlock;
using tpscope::detail::wireBlocks;
using tpscope::detail::WireCode;
using tpscope::detail::wireName;
using tpscope::detail::wirePayloadBytes;
using tpscope::testing::fromFloat;
using tpscope::testing::toFloat;

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x
#define TPS_OK(x) ASSERT_EQ((x), tpsSuccess) << #x

// Rank r's message: normal values of a few magnitudes, a zero block, a block of subnormals (float32 only:
// 16-bit types have their own), and special values at fixed places: NaN on rank 0 at 5, +Inf on rank 1
// and -Inf on rank 2 at 70 (NaN in the sum with three ranks or more), -Inf on every rank at 71.
std::vector<float> message(int r, size_t n, unsigned seed) {
  std::mt19937 rng(seed * 977 + r);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = d(rng) * (i % 128 < 64 ? 1.0f : 37.0f);
  for (size_t i = 128; i < std::min<size_t>(n, 192); ++i) x[i] = 0.0f;
  for (size_t i = 192; i < std::min<size_t>(n, 256); ++i)
    x[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>((i * 7 + r) % 50) * (i % 2 ? 1.f : -1.f);
  const float inf = std::numeric_limits<float>::infinity();
  if (n > 5 && r == 0) x[5] = std::numeric_limits<float>::quiet_NaN();
  if (n > 70 && r == 1) x[70] = inf;
  if (n > 70 && r == 2) x[70] = -inf;
  if (n > 71) x[71] = -inf;
  return x;
}

bool sameBits(tpsDataType_t t, const void* a, const void* b, size_t i) {
  const float x = toFloat(t, a, i), y = toFloat(t, b, i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  const size_t es = tpsDataTypeSize(t);
  return std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es, es) == 0;
}

// The CPU model of one call: each rank's message (as dtype t) encoded and decoded in pieces of `piece`
// values (the GPU encodes each piece or round on its own), summed in rank order in float, rounded to t.
std::vector<unsigned char> model(WireCode w, tpsDataType_t t, const std::vector<std::vector<unsigned char>>& in,
                                 size_t n, size_t piece) {
  const size_t es = tpsDataTypeSize(t);
  std::vector<float> sum(n, 0.0f);
  for (const auto& rank : in)
    for (size_t off = 0; off < n; off += piece) {
      const size_t cnt = std::min(piece, n - off);
      std::vector<float> x(cnt), y(cnt);
      for (size_t i = 0; i < cnt; ++i) x[i] = toFloat(t, rank.data(), off + i);
      std::vector<uint8_t> payload(wirePayloadBytes(w, cnt));
      encodeMessage(w, x.data(), cnt, payload.data());
      decodeMessage(w, payload.data(), cnt, y.data());
      for (size_t i = 0; i < cnt; ++i) sum[off + i] += y[i];
    }
  std::vector<unsigned char> out(n * es);
  for (size_t i = 0; i < n; ++i) fromFloat(t, out.data(), i, sum[i]);
  return out;
}

// One message of n floats through wire w and back, as a peer decodes it.
std::vector<float> throughWire(WireCode w, const std::vector<float>& x) {
  std::vector<uint8_t> payload(wirePayloadBytes(w, x.size()));
  std::vector<float> y(x.size());
  encodeMessage(w, x.data(), x.size(), payload.data());
  decodeMessage(w, payload.data(), x.size(), y.data());
  return y;
}

// The CPU model of a p2p two-shot call on a wire: each piece cut into N slices of the same whole number of
// wire blocks; each slice the rank-order float sum of every rank's slice through the wire, then the sum
// through the wire once more (what its owner sends every peer), rounded to t.
std::vector<unsigned char> twoShotModel(WireCode w, tpsDataType_t t, const std::vector<std::vector<unsigned char>>& in,
                                        size_t n) {
  const size_t es = tpsDataTypeSize(t), nranks = in.size(), unit = nranks * kWireBlock;
  const size_t piece = kP2pTwoShotPiece / es / unit * unit;
  std::vector<unsigned char> out(n * es);
  for (size_t off = 0; off < n; off += piece) {
    const size_t cnt = std::min(piece, n - off);
    const size_t sv = (wireBlocks(cnt) + nranks - 1) / nranks * kWireBlock;
    for (size_t q = 0; q < nranks; ++q) {
      const size_t a = std::min(cnt, q * sv), len = std::min(cnt, a + sv) - a;
      if (len == 0) continue;
      std::vector<float> sum(len, 0.0f), x(len);
      for (const auto& rank : in) {
        for (size_t i = 0; i < len; ++i) x[i] = toFloat(t, rank.data(), off + a + i);
        const std::vector<float> y = throughWire(w, x);
        for (size_t i = 0; i < len; ++i) sum[i] += y[i];
      }
      const std::vector<float> z = throughWire(w, sum);
      for (size_t i = 0; i < len; ++i) fromFloat(t, out.data(), off + a + i, z[i]);
    }
  }
  return out;
}

struct WireCase {
  WireCode wire;
  tpsDataType_t dtype;
  size_t count;
  size_t offset;     // elements from an aligned allocation
  std::string path;  // the path the statistics must name
};

void runCase(int nranks, const WireCase& c, unsigned seed) {
  const std::string what = std::string(wireName(c.wire)) + " " + tpsDataTypeName(c.dtype) +
                           " N=" + std::to_string(nranks) + " count=" + std::to_string(c.count) +
                           " offset=" + std::to_string(c.offset);
  std::vector<int> devs(nranks, 0);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  const bool p2p = c.path.find("p2p") == 0;
  cfg.backend = p2p ? tpsBackendP2p : tpsBackendHost;
  cfg.shared_devices = 1;
  cfg.wire = static_cast<tpsWire_t>(c.wire);
  tpsComm_t comm = nullptr;
  TPS_OK(tpsCommCreate(&comm, nranks, devs.data(), &cfg));
  const size_t es = tpsDataTypeSize(c.dtype);
  std::vector<std::vector<unsigned char>> in(nranks, std::vector<unsigned char>(c.count * es));
  std::vector<void*> alloc(nranks), bufs(nranks);
  std::vector<cudaStream_t> streams(nranks);
  for (int r = 0; r < nranks; ++r) {
    const std::vector<float> x = message(r, c.count, seed);
    for (size_t i = 0; i < c.count; ++i) fromFloat(c.dtype, in[r].data(), i, x[i]);
    CUDA_OK(cudaMalloc(&alloc[r], (c.count + c.offset) * es));
    bufs[r] = static_cast<char*>(alloc[r]) + c.offset * es;
    CUDA_OK(cudaMemcpy(bufs[r], in[r].data(), c.count * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  // A copy from pageable memory may return before its DMA lands, and the streams are non-blocking: the
  // inputs must be in place before the call, or a rank encodes part of a stale buffer for its peers and
  // then re-encodes the landed one for itself (the ranks differ, and it is the test's race, not the wire's).
  CUDA_OK(cudaDeviceSynchronize());
  TPS_OK(tpsAllReduce(comm, bufs.data(), c.count, c.dtype, reinterpret_cast<tpsStream_t*>(streams.data())));
  for (int r = 0; r < nranks; ++r) CUDA_OK(cudaStreamSynchronize(streams[r]));
  tpsResult_t async = tpsInternalError;
  TPS_OK(tpsCommGetAsyncError(comm, &async));
  EXPECT_EQ(async, tpsSuccess) << what;
  std::vector<std::vector<unsigned char>> out(nranks, std::vector<unsigned char>(c.count * es));
  for (int r = 0; r < nranks; ++r) CUDA_OK(cudaMemcpy(out[r].data(), bufs[r], c.count * es, cudaMemcpyDeviceToHost));
  // Every rank the same bits.
  for (int r = 1; r < nranks; ++r)
    EXPECT_EQ(std::memcmp(out[0].data(), out[r].data(), c.count * es), 0) << what << ": rank " << r << " differs";
  // The CPU model's bits; NaN where the exact wire gives NaN, -Inf where every rank had -Inf.
  const tpsConfig_t resolved = [&] {
    tpsConfig_t x;
    tpsCommGetConfig(comm, &x);
    return x;
  }();
  const bool copy = c.path.find("host-copy") == 0;
  const size_t piece = copy ? (size_t{32} << 20) / es : (std::min<size_t>(resolved.host_copy_threshold, 4u << 20)) / es;
  const std::vector<unsigned char> want =
      p2p ? twoShotModel(c.wire, c.dtype, in, c.count) : model(c.wire, c.dtype, in, c.count, piece);
  size_t wrong = 0, first = c.count;
  for (size_t i = 0; i < c.count; ++i)
    if (!sameBits(c.dtype, out[0].data(), want.data(), i)) {
      if (first == c.count) first = i;
      ++wrong;
    }
  EXPECT_EQ(wrong, 0u) << what << ": differs from the CPU model at " << wrong << " elements, first " << first
                       << " (got " << (first < c.count ? toFloat(c.dtype, out[0].data(), first) : 0.f) << ", model "
                       << (first < c.count ? toFloat(c.dtype, want.data(), first) : 0.f) << ")";
  if (c.count > 71) {
    EXPECT_TRUE(std::isnan(toFloat(c.dtype, out[0].data(), 5))) << what << ": a NaN is hidden";
    EXPECT_EQ(toFloat(c.dtype, out[0].data(), 71), -std::numeric_limits<float>::infinity()) << what;
    if (nranks >= 3) EXPECT_TRUE(std::isnan(toFloat(c.dtype, out[0].data(), 70))) << what << ": +Inf + -Inf";
  }
  // The statistics name the wire's path.
  const int path = tpsGetPathByName(c.path.c_str());
  ASSERT_GE(path, 0) << c.path;
  std::vector<tpsStatsCell_t> cells(TPS_NUM_SIZE_CLASSES);
  TPS_OK(tpsCommGetPathStats(comm, path, cells.data()));
  unsigned long long calls = 0;
  for (const auto& cell : cells) calls += cell.calls;
  EXPECT_EQ(calls, 1u) << what << ": the call did not go by " << c.path;
  for (int r = 0; r < nranks; ++r) {
    cudaFree(alloc[r]);
    cudaStreamDestroy(streams[r]);
  }
  tpsCommDestroy(comm);
}

std::vector<WireCase> cases() {
  std::vector<WireCase> v;
  const WireCode lossy[] = {WireCode::kBf16, WireCode::kInt8, WireCode::kFp8, WireCode::kInt4};
  for (WireCode w : lossy)
    for (tpsDataType_t t : {tpsFloat32, tpsFloat16, tpsBfloat16}) {
      if (w == WireCode::kBf16 && t != tpsFloat32) continue;
      const std::string k = std::string("host-kernel+") + wireName(w);
      const std::string cp = std::string("host-copy+") + wireName(w);
      for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4097}, (size_t{1} << 16) + 3})
        v.push_back({w, t, n, 0, k});
      v.push_back({w, t, 4097, 1, k});                                           // misaligned
      v.push_back({w, t, ((size_t{6} << 20) + 5) / tpsDataTypeSize(t), 0, cp});  // copy engines, two chunks+
      // p2p two-shot, from its sizes up: slices ending inside a wire block, a misaligned buffer.
      const std::string ts = std::string("p2p-twoshot+") + wireName(w);
      const size_t over = (size_t{1} << 20) / tpsDataTypeSize(t);
      for (size_t extra : {size_t{1}, size_t{65}, size_t{4097}}) v.push_back({w, t, over + extra, 0, ts});
      v.push_back({w, t, over + 4097, 1, ts});
    }
  return v;
}

TEST(AllReduceWires, RankIdenticalAndTheModelsBits) {
  TPS_REQUIRE_GPUS(1);
  unsigned seed = 1;
  const std::vector<WireCase> all = cases();
  for (int n : {2, 3, 4})
    for (const WireCase& c : all) {
      runCase(n, c, seed++);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// Three rounds of the copy engines on int8 (the payload of each 32 MiB round of the message).
TEST(AllReduceWires, CopyEngineRounds) {
  TPS_REQUIRE_GPUS(1);
  runCase(2, {WireCode::kInt8, tpsBfloat16, (size_t{80} << 20) / 2 + 7, 0, "host-copy+int8"}, 99);
}

// Two launches of the p2p two-shot on fp8 (a 64 MiB piece, then the rest), three ranks.
TEST(AllReduceWires, P2pTwoShotPieces) {
  TPS_REQUIRE_GPUS(1);
  runCase(3, {WireCode::kFp8, tpsBfloat16, (size_t{72} << 20) / 2 + 7, 0, "p2p-twoshot+fp8"}, 98);
}

}  // namespace
