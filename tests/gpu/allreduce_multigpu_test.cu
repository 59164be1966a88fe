// SPDX-License-Identifier: Apache-2.0
// allreduce_multigpu_test - every AllReduce backend against a double-precision host reference on 2
// and all visible GPUs: every dtype, odd counts, misaligned buffers, both host paths, CUDA graphs,
// 100,000 back-to-back calls, the spin timeout, and bad input that must enqueue nothing.
#include "allreduce_fixture.cuh"
#include "gpu_test_util.h"

namespace {

int gpus() { return tpscope::testing::gpuCount(); }

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

// Four ranks on two GPUs (ranks 0 and 2 on GPU 0, 1 and 3 on GPU 1, config.shared_devices): the N = 4
// code paths of host and p2p (rank-order sums, slots, flags, two-shot slices of four) on a box with two
// GPUs, with peer links between the ranks of different GPUs. allreduce_shared_gpu_test.cu runs the same
// matrix with the ranks on one GPU.
TEST(AllReduceSharedGpus, P2pFourRanksOnTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendP2p, 4, {0, 1, 0, 1}, &cfg);
}
TEST(AllReduceSharedGpus, HostFourRanksOnTwoGpus) {
  TPS_REQUIRE_GPUS(2);
  const tpsConfig_t cfg = sharedConfig();
  correctness(tpsBackendHost, 4, {0, 1, 0, 1}, &cfg);
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

TEST(AllReduceMultiGpu, GraphReplayHostKernelPath) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendHost, 12345);
}
TEST(AllReduceMultiGpu, GraphReplayHostCopyPath) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendHost, (8u << 20) + 3);
}
TEST(AllReduceMultiGpu, GraphReplayP2pOneShot) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendP2p, 12345);
}
TEST(AllReduceMultiGpu, GraphReplayP2pTwoShot) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendP2p, (8u << 20) + 3);
}
TEST(AllReduceMultiGpu, GraphReplayP2pLL) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendP2p, 8192);
}
TEST(AllReduceMultiGpu, GraphReplayNccl) {
  TPS_REQUIRE_GPUS(2);
  graphReplay({0, 1}, nullptr, tpsBackendNccl, 12345);
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
    CUDA_OK(cudaDeviceSynchronize());  // the upload lands before the streams copy from it
  }
  const int kCalls = 100000;
  for (int k = 0; k < kCalls; ++k) {
    const size_t count = (k % 3 == 2) ? small : big;
    for (int r = 0; r < 2; ++r) {
      CUDA_OK(cudaSetDevice(r));
      CUDA_OK(cudaMemcpyAsync(f.bufs[r], pristine[r], count * 2, cudaMemcpyDeviceToDevice, f.streams[r]));
    }
    ASSERT_EQ(tpsAllReduce(f.comm, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())),
              tpsSuccess)
        << "call " << k;
    for (int r = 0; r < 2; ++r) {
      CUDA_OK(cudaSetDevice(r));
      accumulate<<<8, 256, 0, f.streams[r]>>>(static_cast<const __nv_bfloat16*>(f.bufs[r]), static_cast<float*>(acc[r]),
                                              count);
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

// Missing peer on every path that spins: the host kernel path and the p2p backend's LL one-shot (8 KiB),
// flag one-shot (512 KiB) and two-shot (4 MiB).
TEST(AllReduceMultiGpu, MissingPeerTimesOutInsteadOfHanging) {
  TPS_REQUIRE_GPUS(2);
  missingPeerTimesOut(tpsBackendHost, 4096, {0, 1});
}
TEST(AllReduceMultiGpu, MissingPeerTimesOutP2pLL) {
  TPS_REQUIRE_GPUS(2);
  missingPeerTimesOut(tpsBackendP2p, 4096, {0, 1});
}
TEST(AllReduceMultiGpu, MissingPeerTimesOutP2pOneShot) {
  TPS_REQUIRE_GPUS(2);
  missingPeerTimesOut(tpsBackendP2p, 256u << 10, {0, 1});
}
TEST(AllReduceMultiGpu, MissingPeerTimesOutP2pTwoShot) {
  TPS_REQUIRE_GPUS(2);
  missingPeerTimesOut(tpsBackendP2p, 2u << 20, {0, 1});
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
