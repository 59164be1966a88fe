// SPDX-License-Identifier: Apache-2.0
// allreduce_multigpu_test - every AllReduce backend against a double-precision host reference on 2
// and all visible GPUs: every dtype, odd counts, misaligned buffers, both host paths, CUDA graphs,
// 100,000 back-to-back calls, the spin timeout, and bad input that must enqueue nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "host_gate.cuh"
#include "tpscope/tpscope.h"

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x
#define TPS_OK(x) ASSERT_EQ((x), tpsSuccess) << #x

// Host-side conversions matching the device's round-to-nearest-even.
float toFloat(tpsDataType_t t, const void* p, size_t i) {
  if (t == tpsFloat32) return static_cast<const float*>(p)[i];
  if (t == tpsFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void fromFloat(tpsDataType_t t, void* p, size_t i, float v) {
  if (t == tpsFloat32) static_cast<float*>(p)[i] = v;
  else if (t == tpsFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}
double relTol(tpsDataType_t t) { return t == tpsFloat32 ? 1e-6 : t == tpsFloat16 ? 1.0 / 1024 : 1.0 / 128; }

// N GPUs with a stream and a buffer each; data deterministic from (seed, rank, index).
struct Fixture {
  std::vector<int> devs;
  std::vector<cudaStream_t> streams;
  std::vector<void*> alloc, bufs;
  std::vector<std::vector<unsigned char>> input;
  tpsComm_t comm = nullptr;

  void setUp(int n, const tpsConfig_t* cfg = nullptr) {
    std::vector<int> d;
    for (int i = 0; i < n; ++i) d.push_back(i);
    setUp(d, cfg);
  }
  // Rank r on GPU d[r] (a GPU may appear twice under TPSCOPE_TEST_SHARED_DEVICES=1).
  void setUp(const std::vector<int>& d, const tpsConfig_t* cfg = nullptr) {
    devs = d;
    streams.resize(d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_EQ(cudaSetDevice(d[i]), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking), cudaSuccess);
    }
    ASSERT_EQ(tpsCommCreate(&comm, static_cast<int>(d.size()), devs.data(), cfg), tpsSuccess);
  }
  void fill(tpsDataType_t t, size_t count, size_t offset_elems, unsigned seed) {
    for (size_t i = 0; i < alloc.size(); ++i) {
      cudaSetDevice(devs[i]);
      cudaFree(alloc[i]);
    }
    const size_t es = tpsDataTypeSize(t);
    alloc.assign(devs.size(), nullptr);
    bufs.assign(devs.size(), nullptr);
    input.assign(devs.size(), std::vector<unsigned char>(count * es));
    for (size_t r = 0; r < devs.size(); ++r) {
      std::mt19937 rng(seed * 131 + r);
      std::uniform_real_distribution<float> d(-1.f, 1.f);
      for (size_t i = 0; i < count; ++i) fromFloat(t, input[r].data(), i, d(rng));
      ASSERT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&alloc[r], (count + offset_elems) * es + 64), cudaSuccess);
      bufs[r] = static_cast<char*>(alloc[r]) + offset_elems * es;
      ASSERT_EQ(cudaMemcpy(bufs[r], input[r].data(), count * es, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void sync() {
    for (size_t r = 0; r < devs.size(); ++r) {
      ASSERT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
    }
  }
  // Every element within tolerance of the double reference; every GPU bit-identical to GPU 0.
  void check(tpsDataType_t t, size_t count, const char* what) {
    const size_t es = tpsDataTypeSize(t);
    std::vector<std::vector<unsigned char>> out(devs.size(), std::vector<unsigned char>(count * es));
    for (size_t r = 0; r < devs.size(); ++r) {
      ASSERT_EQ(cudaSetDevice(devs[r]), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(out[r].data(), bufs[r], count * es, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    size_t wrong = 0, first = count;
    for (size_t i = 0; i < count; ++i) {
      double ref = 0, mag = 0;
      for (size_t r = 0; r < devs.size(); ++r) {
        ref += toFloat(t, input[r].data(), i);
        mag += std::fabs(toFloat(t, input[r].data(), i));
      }
      double got = toFloat(t, out[0].data(), i);
      if (!(std::fabs(got - ref) <= relTol(t) * mag + 1e-30)) {
        if (first == count) first = i;
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " wrong, first at " << first;
    for (size_t r = 1; r < devs.size(); ++r)
      EXPECT_EQ(std::memcmp(out[0].data(), out[r].data(), count * es), 0) << what << ": GPU" << r << " differs from GPU0";
  }
  void tearDown() {
    if (comm) tpsCommDestroy(comm);
    for (size_t r = 0; r < alloc.size(); ++r) {
      cudaSetDevice(devs[r]);
      cudaFree(alloc[r]);
    }
    for (size_t r = 0; r < streams.size(); ++r) {
      cudaSetDevice(devs[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
};

int gpus() { return tpscope::testing::gpuCount(); }

// Runs the correctness matrix for one backend on n GPUs, or on the ranks of `devs` when given.
void correctness(tpsBackend_t backend, int n, const std::vector<int>& devs = {}) {
  Fixture f;
  if (devs.empty())
    f.setUp(n);
  else
    f.setUp(devs);
  ASSERT_NE(f.comm, nullptr);
  // 8, 4096 and 1 << 16 elements are whole 8-byte words: the p2p backend's LL one-shot takes them.
  const size_t counts[] = {1, 7, 8, 4096, 4097, 1u << 16, 65536 + 3, (1u << 20) + 1, (20u << 20) + 5};
  const tpsDataType_t types[] = {tpsFloat32, tpsFloat16, tpsBfloat16};
  unsigned seed = 1;
  for (tpsDataType_t t : types) {
    for (size_t count : counts) {
      for (size_t offset : {size_t{0}, size_t{1}}) {
        if (offset && count > (1u << 20) + 1) continue;  // misaligned large: covered at 1 Mi + 1
        f.fill(t, count, offset, seed++);
        ASSERT_EQ(tpsAllReduceWith(f.comm, backend, f.bufs.data(), count, t, reinterpret_cast<tpsStream_t*>(f.streams.data())),
                  tpsSuccess);
        f.sync();
        std::string what = std::string(tpsBackendName(backend)) + " N=" + std::to_string(n) + " " +
                           tpsDataTypeName(t) + " count=" + std::to_string(count) + " offset=" + std::to_string(offset);
        f.check(t, count, what.c_str());
      }
    }
  }
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(f.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
  f.tearDown();
}

TEST(AllReduceMultiGpu, HostBackendTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  correctness(tpsBackendHost, 2);
}
TEST(AllReduceMultiGpu, NcclBackendTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  correctness(tpsBackendNccl, 2);
}
TEST(AllReduceMultiGpu, P2pBackendTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  int access = 0;
  cudaDeviceCanAccessPeer(&access, 0, 1);
  if (!access) GTEST_SKIP() << "GPU0 has no peer access to GPU1";
  correctness(tpsBackendP2p, 2);
}
TEST(AllReduceMultiGpu, P2pBackendAllGpus) {
  TPS_REQUIRE_GPUS(3);
  correctness(tpsBackendP2p, std::min(gpus(), 8));
}
TEST(AllReduceMultiGpu, HostBackendAllGpus) {
  TPS_REQUIRE_GPUS(3);
  correctness(tpsBackendHost, std::min(gpus(), 8));
}
TEST(AllReduceMultiGpu, NcclBackendAllGpus) {
  TPS_REQUIRE_GPUS(3);
  correctness(tpsBackendNccl, std::min(gpus(), 8));
}

// Four ranks on two GPUs (ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1): the N = 4 code paths of host and
// p2p (rank-order sums, slots, flags, two-shot slices of four) on a box with two GPUs, until a 4-GPU
// machine runs the AllGpus tests above. Disabled in the plain run: the ctest entry AllReduceSharedGpus
// runs them with TPSCOPE_TEST_SHARED_DEVICES=1 (ranks may share a GPU) and TPSCOPE_P2P_BLOCKS=32 (two
// ranks' two-shot grids must be resident on one GPU together: 82 registers x 512 threads is one block
// per SM).
TEST(AllReduceSharedGpus, DISABLED_P2pFourRanksOnTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  correctness(tpsBackendP2p, 4, {0, 1, 0, 1});
}
TEST(AllReduceSharedGpus, DISABLED_HostFourRanksOnTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  correctness(tpsBackendHost, 4, {0, 1, 0, 1});
}

// Both host paths on the same data, forced by the threshold, and a copy-engine chunk that does not
// divide the message.
TEST(AllReduceMultiGpu, HostCopyEnginePathWithOddChunks) {
  TPS_REQUIRE_GPUS(2);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendHost;
  cfg.host_copy_threshold = 64 << 10;
  cfg.host_chunk_bytes = 3 << 18;  // 768 KiB
  Fixture f;
  f.setUp(2, &cfg);
  for (size_t count : {size_t{64 << 10}, size_t{(3u << 20) + 11}, size_t{(40u << 20) + 3}}) {
    f.fill(tpsBfloat16, count, 0, 77);
    TPS_OK(tpsAllReduce(f.comm, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())));
    f.sync();
    f.check(tpsBfloat16, count, "host copy path");
  }
  tpsStats_t st;
  TPS_OK(tpsCommGetStats(f.comm, &st));
  unsigned long long copy_calls = 0, kernel_calls = 0;
  for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) {
    copy_calls += st.cells[tpsPathHostCopyEngine][c].calls;
    kernel_calls += st.cells[tpsPathHostKernel][c].calls;
  }
  EXPECT_EQ(copy_calls, 3u);
  EXPECT_EQ(kernel_calls, 0u);
  f.tearDown();
}

// Calls captured in a CUDA graph and replayed: the sequence numbers live in device memory, so replays
// advance them; inputs are reset inside the graph so every replay must give the same answer.
void graphReplay(tpsBackend_t backend, size_t count) {
  Fixture f;
  f.setUp(2);
  f.fill(tpsBfloat16, count, 0, 5);
  const size_t bytes = count * 2;
  std::vector<void*> pristine(2);
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMalloc(&pristine[r], bytes));
    CUDA_OK(cudaMemcpy(pristine[r], f.input[r].data(), bytes, cudaMemcpyHostToDevice));
  }
  // Capture on stream 0; stream 1 joins through an event so one graph spans both GPUs.
  cudaEvent_t fork, join;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamBeginCapture(f.streams[0], cudaStreamCaptureModeRelaxed));
  CUDA_OK(cudaEventRecord(fork, f.streams[0]));
  CUDA_OK(cudaStreamWaitEvent(f.streams[1], fork, 0));
  for (int it = 0; it < 3; ++it) {
    for (int r = 0; r < 2; ++r) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemcpyAsync(f.bufs[r], pristine[r], bytes, cudaMemcpyDeviceToDevice, f.streams[r]));
    }
    TPS_OK(tpsAllReduceWith(f.comm, backend, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())));
  }
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaEventRecord(join, f.streams[1]));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamWaitEvent(f.streams[0], join, 0));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamEndCapture(f.streams[0], &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 20; ++rep) CUDA_OK(cudaGraphLaunch(exec, f.streams[0]));
  f.sync();
  f.check(tpsBfloat16, count, (std::string("graph ") + tpsBackendName(backend)).c_str());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(r);
    cudaFree(pristine[r]);
  }
  f.tearDown();
}

TEST(AllReduceMultiGpu, GraphReplayHostKernelPath) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendHost, 12345);
}
TEST(AllReduceMultiGpu, GraphReplayHostCopyPath) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendHost, (8u << 20) + 3);
}
TEST(AllReduceMultiGpu, GraphReplayP2pOneShot) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendP2p, 12345);
}
TEST(AllReduceMultiGpu, GraphReplayP2pTwoShot) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendP2p, (8u << 20) + 3);
}
TEST(AllReduceMultiGpu, GraphReplayP2pLL) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendP2p, 8192);
}
TEST(AllReduceMultiGpu, GraphReplayNccl) {
  TPS_REQUIRE_GPUS(2);
  graphReplay(tpsBackendNccl, 12345);
}

__global__ void accumulate(const __nv_bfloat16* in, float* acc, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    acc[i] += __bfloat162float(in[i]);
}

// 100,000 back-to-back small calls with two alternating sizes; after each call the result is added
// into a float accumulator, so a call that read a stale slot would show in the final sums. Inputs are
// small integers, so every sum is exact.
void hundredThousandCalls(tpsBackend_t backend) {
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = backend;
  Fixture f;
  f.setUp(2, &cfg);
  const size_t big = 8192, small = 1237;  // 16 KiB and an odd count
  std::vector<void*> pristine(2), acc(2);
  std::vector<std::vector<__nv_bfloat16>> host(2, std::vector<__nv_bfloat16>(big));
  f.fill(tpsBfloat16, big, 0, 1);
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < big; ++i) host[r][i] = __float2bfloat16_rn(static_cast<float>((i * 7 + r * 3) % 11));
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMalloc(&pristine[r], big * 2));
    CUDA_OK(cudaMalloc(&acc[r], big * 4));
    CUDA_OK(cudaMemset(acc[r], 0, big * 4));
    CUDA_OK(cudaMemcpy(pristine[r], host[r].data(), big * 2, cudaMemcpyHostToDevice));
  }
  const int kCalls = 100000;
  for (int k = 0; k < kCalls; ++k) {
    const size_t count = (k % 3 == 2) ? small : big;
    for (int r = 0; r < 2; ++r) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemcpyAsync(f.bufs[r], pristine[r], count * 2, cudaMemcpyDeviceToDevice, f.streams[r]));
    }
    ASSERT_EQ(tpsAllReduce(f.comm, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())),
              tpsSuccess) << "call " << k;
    for (int r = 0; r < 2; ++r) {
      CUDA_OK(cudaSetDevice(r));
      accumulate<<<8, 256, 0, f.streams[r]>>>(static_cast<const __nv_bfloat16*>(f.bufs[r]), static_cast<float*>(acc[r]), count);
    }
  }
  f.sync();
  const double n_small = kCalls / 3, n_big = kCalls - n_small;
  for (int r = 0; r < 2; ++r) {
    std::vector<float> got(big);
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMemcpy(got.data(), acc[r], big * 4, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < big; ++i) {
      const double v = __bfloat162float(host[0][i]) + __bfloat162float(host[1][i]);
      const double want = v * (i < small ? n_big + n_small : n_big);
      if (got[i] != want) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "GPU" << r;
    cudaFree(pristine[r]);
    cudaFree(acc[r]);
  }
  tpsResult_t async;
  TPS_OK(tpsCommGetAsyncError(f.comm, &async));
  EXPECT_EQ(async, tpsSuccess);
  f.tearDown();
}

TEST(AllReduceMultiGpu, HundredThousandSmallCallsNeverConfuseSequences) {
  TPS_REQUIRE_GPUS(2);
  hundredThousandCalls(tpsBackendHost);
}
// The p2p backend alternates its LL one-shot (16 KiB) and its flag one-shot (an odd byte count).
TEST(AllReduceMultiGpu, HundredThousandP2pCallsNeverConfuseSequences) {
  TPS_REQUIRE_GPUS(2);
  int access = 0;
  cudaDeviceCanAccessPeer(&access, 0, 1);
  if (!access) GTEST_SKIP() << "GPU0 has no peer access to GPU1";
  hundredThousandCalls(tpsBackendP2p);
}

// GPU1's stream is held behind a kernel that waits for the host, so GPU0 calls and its peer never
// arrives within the timeout: GPU0's kernel must give up, the error must reach the host as tpsTimeout,
// and the process must stay usable.
TEST(AllReduceMultiGpu, MissingPeerTimesOutInsteadOfHanging) {
  TPS_REQUIRE_GPUS(2);
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = tpsBackendHost;
  cfg.spin_timeout_ms = 500;
  Fixture f;
  f.setUp(2, &cfg);
  f.fill(tpsBfloat16, 4096, 0, 3);
  tpscope::testing::HostGate gate;
  gate.hold(1, f.streams[1]);
  ASSERT_TRUE(gate.ok());
  const auto t0 = std::chrono::steady_clock::now();
  TPS_OK(tpsAllReduce(f.comm, f.bufs.data(), 4096, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaStreamSynchronize(f.streams[0]));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.4);
  EXPECT_LT(waited, 5.0);
  tpsResult_t async = tpsSuccess;
  TPS_OK(tpsCommGetAsyncError(f.comm, &async));
  EXPECT_EQ(async, tpsTimeout);
  EXPECT_STREQ(tpsGetErrorString(async), "timeout");
  // Release GPU1: it finds GPU0's published data and finishes; nothing hangs.
  gate.open();
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaStreamSynchronize(f.streams[1]));
  // The communicator refuses further work; a new one works.
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 4096, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())),
            tpsInvalidUsage);
  f.tearDown();
  Fixture g;
  g.setUp(2, &cfg);
  g.fill(tpsBfloat16, 4096, 0, 4);
  TPS_OK(tpsAllReduce(g.comm, g.bufs.data(), 4096, tpsBfloat16, reinterpret_cast<tpsStream_t*>(g.streams.data())));
  g.sync();
  g.check(tpsBfloat16, 4096, "after timeout, new communicator");
  g.tearDown();
}

// Bad input: a clear status, nothing enqueued (buffers and statistics unchanged).
TEST(AllReduceMultiGpu, BadInputEnqueuesNothing) {
  TPS_REQUIRE_GPUS(2);
  Fixture f;
  f.setUp(2);
  f.fill(tpsFloat32, 1000, 0, 9);
  auto streams = reinterpret_cast<tpsStream_t*>(f.streams.data());
  void* swapped[2] = {f.bufs[1], f.bufs[0]};
  void* with_null[2] = {f.bufs[0], nullptr};
  std::vector<float> host_mem(1000);
  void* host_ptr[2] = {f.bufs[0], host_mem.data()};
  tpsStream_t swapped_streams[2] = {streams[1], streams[0]};
  tpsStream_t default_streams[2] = {nullptr, nullptr};
  EXPECT_EQ(tpsAllReduce(f.comm, nullptr, 1000, tpsFloat32, streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 1000, tpsFloat32, nullptr), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, with_null, 1000, tpsFloat32, streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 0, tpsFloat32, streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 1000, static_cast<tpsDataType_t>(5), streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, swapped, 1000, tpsFloat32, streams), tpsInvalidArgument);  // buffer on the wrong GPU
  EXPECT_EQ(tpsAllReduce(f.comm, host_ptr, 1000, tpsFloat32, streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 1000, tpsFloat32, swapped_streams), tpsInvalidArgument);
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), 1000, tpsFloat32, default_streams), tpsInvalidArgument);
  int same[2] = {0, 0};
  tpsComm_t other = nullptr;
  EXPECT_EQ(tpsCommCreate(&other, 2, same, nullptr), tpsInvalidArgument);
  int missing[2] = {0, gpus()};
  EXPECT_EQ(tpsCommCreate(&other, 2, missing, nullptr), tpsInvalidArgument);
  f.sync();
  tpsStats_t st;
  TPS_OK(tpsCommGetStats(f.comm, &st));
  for (int p = 0; p < tpsNumPaths; ++p)
    for (int c = 0; c < TPS_NUM_SIZE_CLASSES; ++c) EXPECT_EQ(st.cells[p][c].calls, 0u);
  std::vector<float> out(1000);
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaMemcpy(out.data(), f.bufs[r], 4000, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(out.data(), f.input[r].data(), 4000), 0) << "GPU" << r << " buffer was touched";
  }
  f.tearDown();
}

TEST(AllReduceMultiGpu, UnknownBackendInEnvironmentIsAnError) {
  TPS_REQUIRE_GPUS(2);
  setenv("TPSCOPE_ALLREDUCE", "internal", 1);
  tpsComm_t c = nullptr;
  int devs[2] = {0, 1};
  EXPECT_EQ(tpsCommCreate(&c, 2, devs, nullptr), tpsInvalidArgument);
  setenv("TPSCOPE_ALLREDUCE", "host", 1);
  ASSERT_EQ(tpsCommCreate(&c, 2, devs, nullptr), tpsSuccess);
  unsetenv("TPSCOPE_ALLREDUCE");
  tpsCommDestroy(c);
}

TEST(AllReduceMultiGpu, StatisticsAccountPerPathAndSize) {
  TPS_REQUIRE_GPUS(2);
  Fixture f;
  f.setUp(2);
  f.fill(tpsBfloat16, 8192, 0, 2);
  auto streams = reinterpret_cast<tpsStream_t*>(f.streams.data());
  TPS_OK(tpsAllReduceWith(f.comm, tpsBackendHost, f.bufs.data(), 8192, tpsBfloat16, streams));
  TPS_OK(tpsAllReduceWith(f.comm, tpsBackendNccl, f.bufs.data(), 8192, tpsBfloat16, streams));
  f.sync();
  tpsStats_t st;
  TPS_OK(tpsCommGetStats(f.comm, &st));
  const tpsStatsCell_t& h = st.cells[tpsPathHostKernel][0];
  EXPECT_EQ(h.calls, 1u);
  EXPECT_EQ(h.payload_bytes, 16384u);
  EXPECT_EQ(h.tx_bytes[0], 16384u);
  EXPECT_EQ(h.rx_bytes[1], 16384u);
  EXPECT_EQ(st.cells[tpsPathNccl][0].calls, 1u);
  EXPECT_EQ(st.cells[tpsPathNccl][0].tx_bytes[0], 16384u);  // ring: 2(N-1)/N x size = size for N=2
  TPS_OK(tpsCommResetStats(f.comm));
  TPS_OK(tpsCommGetStats(f.comm, &st));
  EXPECT_EQ(st.cells[tpsPathHostKernel][0].calls, 0u);
  f.tearDown();
}

}  // namespace
