// SPDX-License-Identifier: Apache-2.0
// allreduce_wire_override_test - a call's own wire (tpsAllReduceWire), on ranks sharing GPU 0 over the host
// backend. On a communicator of the int8 wire, tpsWireExact gives the exact sum bit for bit (and a gather
// made of a sum over zeros gives back every rank's values), counted under the exact path, where tpsAllReduce
// does not; tpsWireAuto is the communicator's wire; a compressed call wire on an exact communicator gives
// the bits of a communicator configured with it; a wire outside tpsWire_t enqueues nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dtype_values.h"
#include "gpu_test_util.h"
#include "tpscope/tpscope.h"

namespace {

using tpscope::testing::fromFloat;
using tpscope::testing::toFloat;

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x
#define TPS_OK(x) ASSERT_EQ((x), tpsSuccess) << #x

constexpr size_t kCopyThreshold = size_t{1} << 20;  // calls of this many bytes per GPU or more take the copy engines

using Bytes = std::vector<unsigned char>;

// `nranks` ranks on GPU 0, host backend, the communicator on `wire`; a buffer and a stream per rank.
struct Ranks {
  int n = 0;
  tpsComm_t comm = nullptr;
  std::vector<void*> bufs;
  std::vector<cudaStream_t> streams;

  void open(int nranks, tpsWire_t wire) {
    n = nranks;
    std::vector<int> devs(n, 0);
    tpsConfig_t cfg;
    tpsConfigInit(&cfg);
    cfg.backend = tpsBackendHost;
    cfg.shared_devices = 1;
    cfg.host_copy_threshold = kCopyThreshold;
    cfg.wire = wire;
    TPS_OK(tpsCommCreate(&comm, n, devs.data(), &cfg));
    streams.resize(n);
    for (auto& s : streams) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  void load(const std::vector<Bytes>& in) {
    for (void* b : bufs) cudaFree(b);
    bufs.assign(n, nullptr);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaMalloc(&bufs[r], in[r].size()));
      CUDA_OK(cudaMemcpy(bufs[r], in[r].data(), in[r].size(), cudaMemcpyHostToDevice));
    }
    // A copy from pageable memory may return before its DMA lands, and the ranks' streams are
    // non-blocking: without this the call could read part of an input before it arrives.
    CUDA_OK(cudaDeviceSynchronize());
  }
  tpsResult_t call(tpsWire_t wire, size_t count, tpsDataType_t t) {
    return tpsAllReduceWire(comm, tpsBackendAuto, wire, bufs.data(), count, t,
                            reinterpret_cast<const tpsStream_t*>(streams.data()));
  }
  tpsResult_t plainCall(size_t count, tpsDataType_t t) {
    return tpsAllReduce(comm, bufs.data(), count, t, reinterpret_cast<const tpsStream_t*>(streams.data()));
  }
  // Every rank's buffer after its stream has finished, and no asynchronous error.
  void results(size_t bytes, std::vector<Bytes>* out) {
    out->assign(n, Bytes(bytes));
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaStreamSynchronize(streams[r]));
      CUDA_OK(cudaMemcpy((*out)[r].data(), bufs[r], bytes, cudaMemcpyDeviceToHost));
    }
    tpsResult_t async = tpsInternalError;
    TPS_OK(tpsCommGetAsyncError(comm, &async));
    ASSERT_EQ(async, tpsSuccess);
  }
  // Calls counted under the path named `name` since the last reset.
  unsigned long long calls(const char* name) const {
    const int path = tpsGetPathByName(name);
    EXPECT_GE(path, 0) << name;
    std::vector<tpsStatsCell_t> cells(TPS_NUM_SIZE_CLASSES);
    EXPECT_EQ(tpsCommGetPathStats(comm, path, cells.data()), tpsSuccess);
    unsigned long long c = 0;
    for (const auto& cell : cells) c += cell.calls;
    return c;
  }
  unsigned long long allCalls() const {
    unsigned long long c = 0;
    for (int p = 0; p < tpsGetPathCount(); ++p) c += calls(tpsGetPathName(p));
    return c;
  }
  ~Ranks() {
    for (void* b : bufs) cudaFree(b);
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    tpsCommDestroy(comm);
  }
};

// Rank r's message of `count` values of dtype t. Gather-shaped (`gather`): rank r's own slice holds values
// and the rest zeros, as an all-gather built on the sum lays it out; else every value is set on every rank.
// Magnitudes vary by block, so a 64-value block's int8 scale cannot represent most of its values.
Bytes message(int r, int nranks, size_t count, tpsDataType_t t, bool gather, unsigned seed) {
  std::mt19937 rng(seed * 7919 + r);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Bytes out(count * tpsDataTypeSize(t));
  const size_t lo = gather ? count * r / nranks : 0, hi = gather ? count * (r + 1) / nranks : count;
  for (size_t i = 0; i < count; ++i) fromFloat(t, out.data(), i, i >= lo && i < hi ? d(rng) * (1 + i / 64 % 5) : 0.0f);
  return out;
}

// The exact sum: the values summed in float in rank order, rounded once to t (the exact wire's result).
Bytes exactSum(const std::vector<Bytes>& in, size_t count, tpsDataType_t t) {
  Bytes out(count * tpsDataTypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    float s = 0.0f;
    for (const Bytes& r : in) s += toFloat(t, r.data(), i);
    fromFloat(t, out.data(), i, s);
  }
  return out;
}

size_t differing(const Bytes& a, const Bytes& b, tpsDataType_t t) {
  const size_t es = tpsDataTypeSize(t);
  size_t n = 0;
  for (size_t i = 0; i < a.size() / es; ++i) n += std::memcmp(a.data() + i * es, b.data() + i * es, es) != 0;
  return n;
}

struct Case {
  int nranks;
  tpsDataType_t dtype;
  size_t count;
  bool gather;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int n : {2, 3})
    for (tpsDataType_t t : {tpsFloat32, tpsFloat16, tpsBfloat16})
      for (bool gather : {true, false}) {
        for (size_t count : {size_t{1}, size_t{63}, size_t{4097}, (size_t{1} << 16) + 3})
          v.push_back({n, t, count, gather});
        v.push_back({n, t, (kCopyThreshold * 3 + 5) / tpsDataTypeSize(t), gather});  // copy engines
      }
  return v;
}

std::string describe(const Case& c) {
  return std::string(tpsDataTypeName(c.dtype)) + " N=" + std::to_string(c.nranks) +
         " count=" + std::to_string(c.count) + (c.gather ? " gather-shaped" : " sum");
}

// On an int8 communicator: tpsWireExact's result is the exact sum on every rank (a gather's is every rank's
// own values), counted under the exact path; the communicator's own wire (tpsAllReduce, and tpsWireAuto)
// is not exact on a message of several blocks, and is counted under the int8 path.
TEST(AllReduceWireOverride, ExactCallOnAnInt8CommunicatorIsTheExactSum) {
  TPS_REQUIRE_GPUS(1);
  unsigned seed = 1;
  for (const Case& c : cases()) {
    const std::string what = describe(c);
    Ranks ranks;
    ranks.open(c.nranks, tpsWireInt8);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<Bytes> in;
    for (int r = 0; r < c.nranks; ++r) in.push_back(message(r, c.nranks, c.count, c.dtype, c.gather, seed));
    ++seed;
    const Bytes want = exactSum(in, c.count, c.dtype);
    const size_t bytes = want.size();
    const bool copy = bytes >= kCopyThreshold;
    const char* exact_path = copy ? "host-copy" : "host-kernel";
    const char* int8_path = copy ? "host-copy+int8" : "host-kernel+int8";

    ranks.load(in);
    TPS_OK(ranks.call(tpsWireExact, c.count, c.dtype));
    std::vector<Bytes> out;
    ranks.results(bytes, &out);
    if (::testing::Test::HasFatalFailure()) return;
    for (int r = 0; r < c.nranks; ++r)
      EXPECT_EQ(differing(out[r], want, c.dtype), 0u) << what << ": rank " << r << " is not the exact sum";
    if (c.gather)  // the gathered slices are the ranks' own bits
      for (int r = 0; r < c.nranks; ++r) {
        const size_t es = tpsDataTypeSize(c.dtype), lo = c.count * r / c.nranks, hi = c.count * (r + 1) / c.nranks;
        EXPECT_EQ(std::memcmp(out[0].data() + lo * es, in[r].data() + lo * es, (hi - lo) * es), 0)
            << what << ": rank " << r << "'s slice did not come back unchanged";
      }
    EXPECT_EQ(ranks.calls(exact_path), 1u) << what;
    EXPECT_EQ(ranks.calls(int8_path), 0u) << what;

    // The communicator's own wire, by tpsAllReduce and by tpsWireAuto: int8, the same bits both ways.
    std::vector<Bytes> lossy[2];
    for (int k = 0; k < 2; ++k) {
      ranks.load(in);
      TPS_OK(k == 0 ? ranks.plainCall(c.count, c.dtype) : ranks.call(tpsWireAuto, c.count, c.dtype));
      ranks.results(bytes, &lossy[k]);
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_EQ(differing(lossy[0][0], lossy[1][0], c.dtype), 0u) << what << ": tpsWireAuto is not the communicator's";
    for (int r = 1; r < c.nranks; ++r) EXPECT_EQ(differing(lossy[0][r], lossy[0][0], c.dtype), 0u) << what;
    // Thousands of values, most of them off their block's int8 grid; a 16-bit dtype's rounding hides the
    // error of some, never of most.
    if (c.count >= 4097)
      EXPECT_GT(differing(lossy[0][0], want, c.dtype), c.count / 10) << what << ": the int8 wire gave the exact sum";
    EXPECT_EQ(ranks.calls(exact_path), 1u) << what;
    EXPECT_EQ(ranks.calls(int8_path), 2u) << what;
  }
}

// On an exact communicator, a compressed call wire gives the bits of a communicator configured with it and
// is counted under its path; tpsWireAuto stays exact; bf16 on a 16-bit dtype runs exact, as the config's
// bf16 does.
TEST(AllReduceWireOverride, CompressedCallWireRunsAsTheConfigs) {
  TPS_REQUIRE_GPUS(1);
  for (tpsDataType_t t : {tpsFloat32, tpsBfloat16}) {
    const size_t count = 3 * 4096 + 17;
    std::vector<Bytes> in;
    for (int r = 0; r < 2; ++r) in.push_back(message(r, 2, count, t, false, 40 + t));
    const Bytes want = exactSum(in, count, t);
    const size_t bytes = want.size();
    for (tpsWire_t w : {tpsWireBf16, tpsWireInt8, tpsWireFp8, tpsWireInt4}) {
      const std::string what = std::string(tpsDataTypeName(t)) + " wire " + std::to_string(w);
      // bf16 carries float32 only: for a 16-bit dtype both the config's and the call's run exact.
      const bool runs_exact = w == tpsWireBf16 && t != tpsFloat32;
      std::vector<Bytes> configured, called, automatic;
      {
        Ranks ranks;
        ranks.open(2, w);
        if (::testing::Test::HasFatalFailure()) return;
        ranks.load(in);
        TPS_OK(ranks.plainCall(count, t));
        ranks.results(bytes, &configured);
      }
      Ranks ranks;
      ranks.open(2, tpsWireExact);
      if (::testing::Test::HasFatalFailure()) return;
      ranks.load(in);
      TPS_OK(ranks.call(w, count, t));
      ranks.results(bytes, &called);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(differing(called[0], configured[0], t), 0u) << what << ": the call's wire is not the config's";
      EXPECT_EQ(differing(called[1], called[0], t), 0u) << what;
      const std::string path = runs_exact ? "host-kernel"
                                          : std::string("host-kernel+") + (w == tpsWireBf16   ? "bf16"
                                                                           : w == tpsWireInt8 ? "int8"
                                                                           : w == tpsWireFp8  ? "fp8"
                                                                                              : "int4");
      EXPECT_EQ(ranks.calls(path.c_str()), 1u) << what;
      if (runs_exact)
        EXPECT_EQ(differing(called[0], want, t), 0u) << what;
      else
        EXPECT_GT(differing(called[0], want, t), 0u) << what << ": a compressed call wire gave the exact sum";
      ranks.load(in);
      TPS_OK(ranks.call(tpsWireAuto, count, t));
      ranks.results(bytes, &automatic);
      if (::testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(differing(automatic[0], want, t), 0u) << what << ": tpsWireAuto on an exact communicator";
    }
  }
}

// A wire outside tpsWire_t: tpsInvalidArgument, nothing enqueued, nothing counted; the next call works.
TEST(AllReduceWireOverride, WireOutsideTheEnumIsRefusedBeforeAnyWork) {
  TPS_REQUIRE_GPUS(1);
  Ranks ranks;
  ranks.open(2, tpsWireInt8);
  if (::testing::Test::HasFatalFailure()) return;
  const size_t count = 4097;
  std::vector<Bytes> in;
  for (int r = 0; r < 2; ++r) in.push_back(message(r, 2, count, tpsFloat32, false, 77));
  ranks.load(in);
  for (int bad : {-1, static_cast<int>(tpsNumWires), 99})
    EXPECT_EQ(ranks.call(static_cast<tpsWire_t>(bad), count, tpsFloat32), tpsInvalidArgument) << bad;
  std::vector<Bytes> out;
  ranks.results(count * 4, &out);
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(out[r], in[r]) << "rank " << r << "'s buffer changed";
  EXPECT_EQ(ranks.allCalls(), 0u);
  TPS_OK(ranks.call(tpsWireExact, count, tpsFloat32));
  ranks.results(count * 4, &out);
  EXPECT_EQ(differing(out[0], exactSum(in, count, tpsFloat32), tpsFloat32), 0u);
}

}  // namespace
