// SPDX-License-Identifier: Apache-2.0
// allreduce_fused_multigpu_test - tpsAllReduceAddRmsNorm: the p2p kernel against the unfused sequence
// computed on the host (the new residual bit for bit, the norm within a bf16 step, every GPU
// identical), with residual_out apart and aliasing the partials, the shapes it declines with nothing
// enqueued, and bad input.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bf16_multigpu.h"
#include "gpu_test_util.h"
#include "tpscope/tpscope.h"

namespace {

using tpscope::testing::bf;
using tpscope::testing::Bf;
using tpscope::testing::f;
using tpscope::testing::Gpus;
using tpscope::testing::PerGpu;
using tpscope::testing::same;

TEST(AllReduceFusedMultiGpu, P2pMatchesTheUnfusedSequence) {
  TPS_REQUIRE_GPUS(2);
  const int n = std::min(tpscope::testing::gpuCount(), 8);
  Gpus g(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float eps = 1e-5f;
  // Decode shapes (1 and 8 tokens of the 8b and 32b hidden sizes), a tiny row, 3 x 256 (one block per
  // row), and rows wider than one block reaches (8192), which spread over the LL grid.
  int shape = 0;
  for (auto [rows, width] :
       {std::pair<size_t, size_t>{1, 4096}, {8, 4096}, {3, 5120}, {2, 8}, {3, 256}, {1, 16384}, {2, 12288}}) {
    const bool alias = shape++ % 2 == 1;  // residual_out = partial on every other shape, as tpscope tp does
    const size_t count = rows * width;
    PerGpu partial(n, count), residual(n, count), out(n, count), weight(n, width), normed(n, count);
    for (int i = 0; i < n; ++i)
      for (auto& v : partial.host[i]) v = bf(u(rng));
    for (auto& v : residual.host[0]) v = bf(4 * u(rng));
    for (auto& v : weight.host[0]) v = bf(1 + 0.1f * u(rng));
    for (int i = 1; i < n; ++i) residual.host[i] = residual.host[0], weight.host[i] = weight.host[0];
    partial.up(), residual.up(), weight.up(), normed.up(), out.up();
    const std::vector<const void*> w(weight.dev.begin(), weight.dev.end());
    const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
    PerGpu& dst = alias ? partial : out;
    ASSERT_EQ(tpsAllReduceAddRmsNorm(g.comm, tpsBackendP2p, partial.dev.data(), rin.data(), dst.dev.data(), w.data(),
                                     normed.dev.data(), rows, width, eps, tpsBfloat16, g.s()),
              tpsSuccess)
        << rows << " x " << width;
    g.sync();
    // The unfused sequence on the host: the sum in rank order, rounded; the residual add, rounded; the norm.
    std::vector<Bf> res(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      float acc = 0;
      for (int r = 0; r < n; ++r) acc += f(partial.host[r][i]);
      res[i] = bf(f(residual.host[0][i]) + f(bf(acc)));
    }
    for (size_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (size_t c = 0; c < width; ++c) ss += double(f(res[r * width + c])) * f(res[r * width + c]);
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / width) + eps);
      for (size_t c = 0; c < width; ++c) want[r * width + c] = bf(f(res[r * width + c]) * inv * f(weight.host[0][c]));
    }
    const std::string what = std::to_string(rows) + " x " + std::to_string(width) + " on " + std::to_string(n) +
                             (alias ? " GPUs, residual_out = partial" : " GPUs");
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(same(dst.down(i), res)) << what << ": GPU " << i << " residual_out";
      EXPECT_TRUE(same(residual.down(i), residual.host[i])) << what << ": GPU " << i << " residual_in was written";
      const std::vector<Bf> got = normed.down(i);
      double worst = 0;
      for (size_t k = 0; k < count; ++k)
        worst = std::max(worst, std::abs(double(f(got[k])) - f(want[k])) / std::max(1.0, std::abs(double(f(want[k])))));
      EXPECT_LE(worst, 1.0 / 128) << what << ": GPU " << i << " normed";
      EXPECT_TRUE(same(got, normed.down(0))) << what << ": GPU " << i << " differs from GPU 0";
    }
  }
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(g.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
}

// No weight: the reduction and the residual add alone, the residual updated in place (residual_out =
// residual_in, as folded decode steps call it), bit for bit the unfused sum and add on every GPU.
TEST(AllReduceFusedMultiGpu, P2pAddsInPlaceWithoutANorm) {
  TPS_REQUIRE_GPUS(2);
  const int n = std::min(tpscope::testing::gpuCount(), 8);
  Gpus g(n);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto [rows, width] : {std::pair<size_t, size_t>{1, 4096}, {4, 5120}, {3, 256}}) {
    const size_t count = rows * width;
    PerGpu partial(n, count), residual(n, count);
    for (int i = 0; i < n; ++i)
      for (auto& v : partial.host[i]) v = bf(u(rng));
    for (auto& v : residual.host[0]) v = bf(4 * u(rng));
    for (int i = 1; i < n; ++i) residual.host[i] = residual.host[0];
    partial.up(), residual.up();
    const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
    ASSERT_EQ(tpsAllReduceAddRmsNorm(g.comm, tpsBackendP2p, partial.dev.data(), rin.data(), residual.dev.data(),
                                     nullptr, nullptr, rows, width, 1e-5f, tpsBfloat16, g.s()),
              tpsSuccess)
        << rows << " x " << width;
    g.sync();
    std::vector<Bf> want(count);
    for (size_t i = 0; i < count; ++i) {
      float acc = 0;
      for (int r = 0; r < n; ++r) acc += f(partial.host[r][i]);
      want[i] = bf(f(residual.host[0][i]) + f(bf(acc)));
    }
    for (int i = 0; i < n; ++i)
      EXPECT_TRUE(same(residual.down(i), want)) << rows << " x " << width << ": GPU " << i << " residual";
  }
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(g.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
}

// Shapes and backends without the fused kernel: tpsUnavailable, buffers untouched. Bad input: tpsInvalidArgument.
TEST(AllReduceFusedMultiGpu, DeclinesWhatItCannotFuseAndRefusesBadInput) {
  TPS_REQUIRE_GPUS(2);
  Gpus g(2);
  const size_t rows = 65, width = 8, count = rows * width;  // 65 rows: more than the LL grid's 64 blocks
  PerGpu partial(2, count), residual(2, count), out(2, count), weight(2, width), normed(2, count);
  for (int i = 0; i < 2; ++i) {
    for (auto& v : partial.host[i]) v = bf(1.0f);
    for (auto& v : residual.host[i]) v = bf(2.0f);
    for (auto& v : weight.host[i]) v = bf(1.0f);
  }
  partial.up(), residual.up(), weight.up(), normed.up(), out.up();
  const std::vector<const void*> w(weight.dev.begin(), weight.dev.end());
  const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
  auto call = [&](tpsBackend_t b, size_t r, size_t wd, tpsDataType_t t, const void* const* in, void* const* o) {
    return tpsAllReduceAddRmsNorm(g.comm, b, partial.dev.data(), in, o, w.data(), normed.dev.data(), r, wd, 1e-5f, t,
                                  g.s());
  };
  const void* const* in = rin.data();
  void* const* o = out.dev.data();
  EXPECT_EQ(call(tpsBackendP2p, rows, width, tpsBfloat16, in, o), tpsUnavailable);
  EXPECT_EQ(call(tpsBackendHost, 1, width, tpsBfloat16, in, o), tpsUnavailable);
  EXPECT_EQ(call(tpsBackendNccl, 1, width, tpsBfloat16, in, o), tpsUnavailable);
  EXPECT_EQ(call(tpsBackendP2p, 1, width, tpsFloat16, in, o), tpsUnavailable);
  EXPECT_EQ(call(tpsBackendP2p, 1, 6, tpsBfloat16, in, o), tpsUnavailable);                        // width % 4
  EXPECT_EQ(call(tpsBackendP2p, 1, width, tpsBfloat16, in, residual.dev.data()), tpsUnavailable);  // in place
  void* null_out[2] = {out.dev[0], nullptr};
  EXPECT_EQ(call(tpsBackendP2p, 1, width, tpsBfloat16, in, null_out), tpsInvalidArgument);
  EXPECT_EQ(call(tpsBackendP2p, 0, width, tpsBfloat16, in, o), tpsInvalidArgument);
  g.sync();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(same(partial.down(i), partial.host[i])) << "GPU " << i << ": a declined call changed the partials";
    EXPECT_TRUE(same(out.down(i), out.host[i])) << "GPU " << i << ": a declined call wrote residual_out";
  }
  // A shape it takes runs, and a plain AllReduce of the same partials afterwards still agrees.
  ASSERT_EQ(call(tpsBackendP2p, 4, width, tpsBfloat16, in, o), tpsSuccess);
  ASSERT_EQ(tpsAllReduceWith(g.comm, tpsBackendP2p, partial.dev.data(), count, tpsBfloat16, g.s()), tpsSuccess);
  g.sync();
  const std::vector<Bf> a = partial.down(0), b = partial.down(1);
  EXPECT_TRUE(same(a, b));
  EXPECT_EQ(f(a[0]), 2.0f);            // 1 + 1: the fused call left the partials as they were
  EXPECT_EQ(f(out.down(0)[0]), 4.0f);  // 2 + the fused sum 2
  EXPECT_EQ(f(normed.down(1)[0]), 1.0f);
}

}  // namespace
