// SPDX-License-Identifier: Apache-2.0
// allreduce_push_multigpu_test - pushed reductions (commPushChannel, allreduce/push.cuh,
// allReducePushedAddRmsNorm): a test kernel pushes the partials word by word, and the pushed call
// must give bit for bit what the unpushed fused call gives on the same partials, on every GPU,
// alternating with ordinary LL calls on the same communicator, eagerly and over many graph replays;
// a peer that never pushes is a tpsTimeout; bad input is refused with nothing enqueued.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "allreduce/push.cuh"
#include "bf16_multigpu.h"
#include "gpu_test_util.h"
#include "host_gate.cuh"
#include "tpscope/tpscope.h"

namespace {

using tpscope::detail::allReducePushedAddRmsNorm;
using tpscope::detail::commPushChannel;
using tpscope::detail::PushChannel;
using tpscope::testing::bf;
using tpscope::testing::Bf;
using tpscope::testing::f;
using tpscope::testing::Gpus;
using tpscope::testing::PerGpu;
using tpscope::testing::same;

// The producer a projection would be: every word of `rows` x `width` pushed once, in any order.
__global__ void pushPartial(PushChannel ch, const Bf* partial, int rows, int width) {
  const int words = rows * width / 4;
  for (int w = blockIdx.x * blockDim.x + threadIdx.x; w < words; w += gridDim.x * blockDim.x)
    tpscope::detail::pushWord(ch, w / (width / 4), w, reinterpret_cast<const uint2*>(partial)[w]);
}

std::vector<PushChannel> channels(const Gpus& g) {
  std::vector<PushChannel> ch(g.n);
  for (int i = 0; i < g.n; ++i) EXPECT_EQ(commPushChannel(g.comm, i, &ch[i]), tpsSuccess) << "GPU " << i;
  return ch;
}

void push(const Gpus& g, const std::vector<PushChannel>& ch, const PerGpu& partial, size_t rows, size_t width) {
  for (int i = 0; i < g.n; ++i) {
    cudaSetDevice(g.devs[i]);
    pushPartial<<<8, 128, 0, g.streams[i]>>>(ch[i], static_cast<const Bf*>(partial.dev[i]), static_cast<int>(rows),
                                             static_cast<int>(width));
  }
}

// The pushed call against the unpushed one (tpsAllReduceAddRmsNorm, the same by-row kernel sending its
// own lines) on the same inputs: residual and norm bit for bit, on every GPU; between the shapes an
// ordinary LL AllReduce advances the same sequence numbers.
void pushedEqualsUnpushed(const Gpus& g) {
  const int n = g.n;
  const std::vector<PushChannel> ch = channels(g);
  ASSERT_EQ(ch[0].nranks, n);
  ASSERT_GE(ch[0].max_rows, 8);
  ASSERT_GE(ch[0].max_width, 8192);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float eps = 1e-5f;
  for (auto [rows, width] : {std::pair<size_t, size_t>{1, 4096}, {8, 4096}, {3, 5120}, {2, 8}, {4, 8192}}) {
    const size_t count = rows * width;
    PerGpu partial(g, count), residual(g, count), mine(g, count), theirs(g, count), weight(g, width);
    PerGpu normed_mine(g, count), normed_theirs(g, count), other(g, 1000);
    for (int i = 0; i < n; ++i) {
      for (auto& v : partial.host[i]) v = bf(u(rng));
      for (auto& v : other.host[i]) v = bf(u(rng));
    }
    for (auto& v : residual.host[0]) v = bf(4 * u(rng));
    for (auto& v : weight.host[0]) v = bf(1 + 0.1f * u(rng));
    for (int i = 1; i < n; ++i) residual.host[i] = residual.host[0], weight.host[i] = weight.host[0];
    for (PerGpu* p : {&partial, &residual, &weight, &other}) p->up();
    const std::vector<const void*> w(weight.dev.begin(), weight.dev.end());
    const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
    const std::string what = std::to_string(rows) + " x " + std::to_string(width) + " on " + std::to_string(n);
    ASSERT_EQ(tpsAllReduceWith(g.comm, tpsBackendP2p, other.dev.data(), 1000, tpsBfloat16, g.s()), tpsSuccess);
    push(g, ch, partial, rows, width);
    ASSERT_EQ(allReducePushedAddRmsNorm(g.comm, partial.dev.data(), rin.data(), mine.dev.data(), w.data(),
                                        normed_mine.dev.data(), rows, width, eps, tpsBfloat16, g.s()),
              tpsSuccess)
        << what;
    ASSERT_EQ(tpsAllReduceAddRmsNorm(g.comm, tpsBackendP2p, partial.dev.data(), rin.data(), theirs.dev.data(), w.data(),
                                     normed_theirs.dev.data(), rows, width, eps, tpsBfloat16, g.s()),
              tpsSuccess)
        << what;
    g.sync();
    std::vector<Bf> res(count);  // the residual, computed on the host: the sum in rank order, then the add
    for (size_t i = 0; i < count; ++i) {
      float acc = 0;
      for (int r = 0; r < n; ++r) acc += f(partial.host[r][i]);
      res[i] = bf(f(residual.host[0][i]) + f(bf(acc)));
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(same(mine.down(i), res)) << what << ": GPU " << i << " residual";
      EXPECT_TRUE(same(theirs.down(i), res)) << what << ": GPU " << i << " residual (unpushed)";
      EXPECT_TRUE(same(normed_mine.down(i), normed_theirs.down(i))) << what << ": GPU " << i << " norm";
      EXPECT_TRUE(same(normed_mine.down(i), normed_mine.down(0))) << what << ": GPU " << i << " differs from GPU 0";
      EXPECT_TRUE(same(other.down(i), other.down(0))) << what << ": GPU " << i << " ordinary call";
    }
  }
  // The add alone, the residual updated in place.
  const size_t rows = 2, width = 4096, count = rows * width;
  PerGpu partial(g, count), residual(g, count);
  for (int i = 0; i < n; ++i)
    for (auto& v : partial.host[i]) v = bf(u(rng));
  for (auto& v : residual.host[0]) v = bf(u(rng));
  for (int i = 1; i < n; ++i) residual.host[i] = residual.host[0];
  partial.up(), residual.up();
  const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
  push(g, ch, partial, rows, width);
  ASSERT_EQ(allReducePushedAddRmsNorm(g.comm, partial.dev.data(), rin.data(), residual.dev.data(), nullptr, nullptr,
                                      rows, width, eps, tpsBfloat16, g.s()),
            tpsSuccess);
  g.sync();
  for (int i = 0; i < n; ++i) {
    const std::vector<Bf> got = residual.down(i);
    for (size_t k = 0; k < count; ++k) {
      float acc = 0;
      for (int r = 0; r < n; ++r) acc += f(partial.host[r][k]);
      ASSERT_EQ(f(got[k]), f(bf(f(residual.host[0][k]) + f(bf(acc))))) << "add alone: GPU " << i << " element " << k;
    }
  }
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(g.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
  // Accounted on the p2p LL path: per shape an ordinary, a pushed and a fused call; then the add.
  tpsStats_t st;
  ASSERT_EQ(tpsCommGetStats(g.comm, &st), tpsSuccess);
  unsigned long long calls = 0;
  for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) calls += st.cells[tpsPathP2pLL][c].calls;
  EXPECT_EQ(calls, 5u * 3 + 1);
}

TEST(AllReducePushMultiGpu, PushedEqualsTheUnpushedCall) {
  TPS_REQUIRE_GPUS(2);
  const Gpus g(std::min(tpscope::testing::gpuCount(), 8));
  pushedEqualsUnpushed(g);
}

// Four ranks on two GPUs (config.shared_devices), as AllReduceSharedGpus in allreduce_multigpu_test.cu:
// the pushed path's N = 4 sums and line slots.
TEST(AllReduceSharedGpus, PushedFourRanksOnTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.shared_devices = 1;
  const Gpus g(std::vector<int>{0, 1, 0, 1}, &cfg);
  pushedEqualsUnpushed(g);
}

// 2,000 graph replays of {ordinary LL call, push, pushed call, push, pushed call}: the sequence numbers
// and the two line slots never confuse two calls (each replay's results are checked at the end and
// must equal the first eager run's, which equals the unpushed call's).
TEST(AllReducePushMultiGpu, GraphReplaysNeverConfuseCalls) {
  TPS_REQUIRE_GPUS(2);
  const int n = std::min(tpscope::testing::gpuCount(), 8);
  Gpus g(n);
  const std::vector<PushChannel> ch = channels(g);
  const size_t rows = 1, width = 4096, count = rows * width;
  PerGpu a(g, count), b(g, count), residual(g, count), out_a(g, count), out_b(g, count), weight(g, width);
  PerGpu normed_a(g, count), normed_b(g, count), zeros(g, 512);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < count; ++k) a.host[i][k] = bf(u(rng)), b.host[i][k] = bf(u(rng));
  for (auto& v : residual.host[0]) v = bf(u(rng));
  for (auto& v : weight.host[0]) v = bf(1 + 0.1f * u(rng));
  for (int i = 1; i < n; ++i) residual.host[i] = residual.host[0], weight.host[i] = weight.host[0];
  for (int i = 0; i < n; ++i)
    for (auto& v : zeros.host[i]) v = bf(0.0f);
  for (PerGpu* p : {&a, &b, &residual, &weight, &zeros}) p->up();
  const std::vector<const void*> w(weight.dev.begin(), weight.dev.end());
  const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
  auto step = [&] {
    EXPECT_EQ(tpsAllReduceWith(g.comm, tpsBackendP2p, zeros.dev.data(), 512, tpsBfloat16, g.s()), tpsSuccess);
    push(g, ch, a, rows, width);
    EXPECT_EQ(allReducePushedAddRmsNorm(g.comm, a.dev.data(), rin.data(), out_a.dev.data(), w.data(),
                                        normed_a.dev.data(), rows, width, 1e-5f, tpsBfloat16, g.s()),
              tpsSuccess);
    push(g, ch, b, rows, width);
    EXPECT_EQ(allReducePushedAddRmsNorm(g.comm, b.dev.data(), rin.data(), out_b.dev.data(), w.data(),
                                        normed_b.dev.data(), rows, width, 1e-5f, tpsBfloat16, g.s()),
              tpsSuccess);
  };
  step();
  g.sync();
  std::vector<std::vector<Bf>> want_a, want_b;
  for (int i = 0; i < n; ++i) want_a.push_back(normed_a.down(i)), want_b.push_back(normed_b.down(i));
  for (int i = 0; i < n; ++i) ASSERT_TRUE(same(want_a[i], want_a[0]) && same(want_b[i], want_b[0])) << "GPU " << i;
  // Capture: GPU 0's stream forks to the others through events, as tpscope tp does.
  std::vector<cudaEvent_t> fork(n), join(n);
  for (int i = 0; i < n; ++i) {
    cudaSetDevice(i);
    cudaEventCreateWithFlags(&fork[i], cudaEventDisableTiming);
    cudaEventCreateWithFlags(&join[i], cudaEventDisableTiming);
  }
  cudaSetDevice(0);
  ASSERT_EQ(cudaStreamBeginCapture(g.streams[0], cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaEventRecord(fork[0], g.streams[0]);
  for (int i = 1; i < n; ++i) cudaStreamWaitEvent(g.streams[i], fork[0], 0);
  step();
  for (int i = 1; i < n; ++i) {
    cudaSetDevice(i);
    cudaEventRecord(join[i], g.streams[i]);
    cudaSetDevice(0);
    cudaStreamWaitEvent(g.streams[0], join[i], 0);
  }
  cudaSetDevice(0);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(g.streams[0], &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // The outputs poisoned (all bits set: a bf16 NaN) so that only replays that ran can restore them.
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(cudaSetDevice(g.devs[i]), cudaSuccess);
    ASSERT_EQ(cudaMemset(normed_a.dev[i], 0xff, count * sizeof(Bf)), cudaSuccess);
    ASSERT_EQ(cudaMemset(normed_b.dev[i], 0xff, count * sizeof(Bf)), cudaSuccess);
    ASSERT_FALSE(same(normed_a.down(i), want_a[0])) << "GPU " << i << ": poisoning changed nothing";
  }
  ASSERT_EQ(cudaSetDevice(g.devs[0]), cudaSuccess);
  for (int it = 0; it < 2000; ++it) ASSERT_EQ(cudaGraphLaunch(exec, g.streams[0]), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(g.streams[0]), cudaSuccess);
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(g.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(same(normed_a.down(i), want_a[0])) << "GPU " << i << " after the replays (a)";
    EXPECT_TRUE(same(normed_b.down(i), want_b[0])) << "GPU " << i << " after the replays (b)";
    EXPECT_TRUE(same(zeros.down(i), zeros.host[i])) << "GPU " << i << " ordinary call";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (int i = 0; i < n; ++i) cudaEventDestroy(fork[i]), cudaEventDestroy(join[i]);
}

// GPU 1 is held behind a kernel that waits for the host, so it pushes nothing: GPU 0's pushed call must
// give up within the timeout and report tpsTimeout.
TEST(AllReducePushMultiGpu, PeerThatNeverPushesTimesOut) {
  TPS_REQUIRE_GPUS(2);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendP2p;
  cfg.spin_timeout_ms = 500;
  Gpus g(2, &cfg);
  const std::vector<PushChannel> ch = channels(g);
  const size_t rows = 1, width = 4096;
  PerGpu partial(2, width), residual(2, width), out(2, width);
  for (PerGpu* p : {&partial, &residual}) p->up();
  tpscope::testing::HostGate gate;
  gate.hold(1, g.streams[1]);
  ASSERT_TRUE(gate.ok());
  const auto t0 = std::chrono::steady_clock::now();
  push(g, ch, partial, rows, width);
  const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
  ASSERT_EQ(allReducePushedAddRmsNorm(g.comm, partial.dev.data(), rin.data(), out.dev.data(), nullptr, nullptr, rows,
                                      width, 1e-5f, tpsBfloat16, g.s()),
            tpsSuccess);
  cudaSetDevice(0);
  ASSERT_EQ(cudaStreamSynchronize(g.streams[0]), cudaSuccess);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.4);
  EXPECT_LT(waited, 5.0);
  tpsResult_t async = tpsSuccess;
  EXPECT_EQ(tpsCommGetAsyncError(g.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsTimeout);
  gate.open();  // GPU 1 then finds GPU 0's lines and finishes
  g.sync();
  EXPECT_EQ(allReducePushedAddRmsNorm(g.comm, partial.dev.data(), rin.data(), out.dev.data(), nullptr, nullptr, rows,
                                      width, 1e-5f, tpsBfloat16, g.s()),
            tpsInvalidUsage);
}

// Bad input: tpsInvalidArgument (or tpsUnavailable without a p2p backend), nothing enqueued.
TEST(AllReducePushMultiGpu, RefusesBadInputAndEnqueuesNothing) {
  TPS_REQUIRE_GPUS(2);
  Gpus g(2);
  PushChannel ch;
  EXPECT_EQ(commPushChannel(nullptr, 0, &ch), tpsInvalidArgument);
  EXPECT_EQ(commPushChannel(g.comm, 0, nullptr), tpsInvalidArgument);
  EXPECT_EQ(commPushChannel(g.comm, 2, &ch), tpsInvalidArgument);
  EXPECT_EQ(commPushChannel(g.comm, -1, &ch), tpsInvalidArgument);
  ASSERT_EQ(commPushChannel(g.comm, 1, &ch), tpsSuccess);
  EXPECT_EQ(ch.rank, 1);
  const size_t width = 64, big_rows = static_cast<size_t>(ch.max_rows) + 1;
  PerGpu partial(2, big_rows * width), residual(2, big_rows * width), out(2, big_rows * width);
  for (int i = 0; i < 2; ++i)
    for (size_t k = 0; k < out.host[i].size(); ++k) out.host[i][k] = bf(3.0f), partial.host[i][k] = bf(1.0f);
  for (PerGpu* p : {&partial, &residual, &out}) p->up();
  const std::vector<const void*> rin(residual.dev.begin(), residual.dev.end());
  auto call = [&](size_t rows, size_t wd, tpsDataType_t t, const void* const* in) {
    return allReducePushedAddRmsNorm(g.comm, partial.dev.data(), in, out.dev.data(), nullptr, nullptr, rows, wd, 1e-5f,
                                     t, g.s());
  };
  EXPECT_EQ(call(big_rows, width, tpsBfloat16, rin.data()), tpsInvalidArgument);  // more rows than the channel
  EXPECT_EQ(call(1, 6, tpsBfloat16, rin.data()), tpsInvalidArgument);             // width % 4
  EXPECT_EQ(call(1, width, tpsFloat16, rin.data()), tpsInvalidArgument);          // bf16 only
  EXPECT_EQ(call(0, width, tpsBfloat16, rin.data()), tpsInvalidArgument);
  EXPECT_EQ(call(1, width, tpsBfloat16, nullptr), tpsInvalidArgument);
  const void* one_null[2] = {rin[0], nullptr};
  EXPECT_EQ(call(1, width, tpsBfloat16, one_null), tpsInvalidArgument);
  g.sync();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(same(out.down(i), out.host[i])) << "GPU " << i << ": a refused call wrote";
  tpsStats_t st;
  ASSERT_EQ(tpsCommGetStats(g.comm, &st), tpsSuccess);
  for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) EXPECT_EQ(st.cells[tpsPathP2pLL][c].calls, 0u);
  // A communicator without the p2p backend has no channel and takes no pushed call.
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendHost;
  Gpus h(2, &cfg);
  EXPECT_EQ(commPushChannel(h.comm, 0, &ch), tpsUnavailable);
  EXPECT_EQ(allReducePushedAddRmsNorm(h.comm, partial.dev.data(), rin.data(), out.dev.data(), nullptr, nullptr, 1,
                                      width, 1e-5f, tpsBfloat16, h.s()),
            tpsUnavailable);
}

}  // namespace
