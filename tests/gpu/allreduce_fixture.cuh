// SPDX-License-Identifier: Apache-2.0
// allreduce_fixture.cuh - the AllReduce tests' ranks, deterministic data, double-precision reference and
// the correctness matrix and missing-peer check they run, on distinct GPUs or on ranks sharing one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dtype_values.h"
#include "host_gate.cuh"
#include "tpscope/tpscope.h"

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x
#define TPS_OK(x) ASSERT_EQ((x), tpsSuccess) << #x

using tpscope::testing::fromFloat;
using tpscope::testing::toFloat;
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
  // Rank r on GPU d[r] (a GPU may appear twice when cfg says shared_devices).
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
      // A pageable upload may still be in flight when cudaMemcpy returns, and the calls' streams are
      // non-blocking: without this a rank could send part of its input before it lands.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
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
      EXPECT_EQ(std::memcmp(out[0].data(), out[r].data(), count * es), 0)
          << what << ": GPU" << r << " differs from GPU0";
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

// Runs the correctness matrix for one backend on n GPUs, or on the ranks of `devs` when given (a GPU
// may carry several ranks when `cfg` says shared_devices).
void correctness(tpsBackend_t backend, int n, const std::vector<int>& devs = {}, const tpsConfig_t* cfg = nullptr) {
  Fixture f;
  if (devs.empty())
    f.setUp(n, cfg);
  else
    f.setUp(devs, cfg);
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
        ASSERT_EQ(tpsAllReduceWith(f.comm, backend, f.bufs.data(), count, t,
                                   reinterpret_cast<tpsStream_t*>(f.streams.data())),
                  tpsSuccess);
        f.sync();
        std::string what = std::string(tpsBackendName(backend)) + " N=" + std::to_string(n) + " " + tpsDataTypeName(t) +
                           " count=" + std::to_string(count) + " offset=" + std::to_string(offset);
        f.check(t, count, what.c_str());
      }
    }
  }
  tpsResult_t async = tpsInternalError;
  EXPECT_EQ(tpsCommGetAsyncError(f.comm, &async), tpsSuccess);
  EXPECT_EQ(async, tpsSuccess);
  f.tearDown();
}

// Calls captured in one CUDA graph over the ranks of `devs` and replayed: the sequence numbers live in
// device memory, so replays advance them; inputs are reset inside the graph so every replay must give
// the same answer.
void graphReplay(const std::vector<int>& devs, const tpsConfig_t* cfg, tpsBackend_t backend, size_t count) {
  Fixture f;
  f.setUp(devs, cfg);
  f.fill(tpsBfloat16, count, 0, 5);
  const size_t bytes = count * 2;
  const int n = static_cast<int>(devs.size());
  std::vector<void*> pristine(n);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaMalloc(&pristine[r], bytes));
    CUDA_OK(cudaMemcpy(pristine[r], f.input[r].data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize());  // the upload lands before the streams copy from it
  }
  // Capture on stream 0; the others join through an event so one graph spans every rank.
  std::vector<cudaEvent_t> join(n);
  cudaEvent_t fork;
  CUDA_OK(cudaSetDevice(devs[0]));
  CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaEventCreateWithFlags(&join[r], cudaEventDisableTiming));
  }
  CUDA_OK(cudaSetDevice(devs[0]));
  CUDA_OK(cudaStreamBeginCapture(f.streams[0], cudaStreamCaptureModeRelaxed));
  CUDA_OK(cudaEventRecord(fork, f.streams[0]));
  for (int r = 1; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaStreamWaitEvent(f.streams[r], fork, 0));
  }
  for (int it = 0; it < 3; ++it) {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(devs[r]));
      CUDA_OK(cudaMemcpyAsync(f.bufs[r], pristine[r], bytes, cudaMemcpyDeviceToDevice, f.streams[r]));
    }
    TPS_OK(tpsAllReduceWith(f.comm, backend, f.bufs.data(), count, tpsBfloat16,
                            reinterpret_cast<tpsStream_t*>(f.streams.data())));
  }
  for (int r = 1; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaEventRecord(join[r], f.streams[r]));
    CUDA_OK(cudaSetDevice(devs[0]));
    CUDA_OK(cudaStreamWaitEvent(f.streams[0], join[r], 0));
  }
  CUDA_OK(cudaSetDevice(devs[0]));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamEndCapture(f.streams[0], &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 20; ++rep) CUDA_OK(cudaGraphLaunch(exec, f.streams[0]));
  f.sync();
  f.check(
      tpsBfloat16, count,
      (std::string("graph ") + tpsBackendName(backend) + " N=" + std::to_string(n) + " count=" + std::to_string(count))
          .c_str());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(devs[r]);
    cudaEventDestroy(join[r]);
    cudaFree(pristine[r]);
  }
  f.tearDown();
}

// A configuration that lets ranks share a GPU (tpsConfig_t.shared_devices).
tpsConfig_t sharedConfig() {
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.shared_devices = 1;
  return cfg;
}

// What a timed-out call may take beyond the spin timeout: the copies the call had enqueued (64 MiB of
// them at most here) and the scheduling of the host thread.
constexpr double kTimeoutSlackS = 0.25;

// Rank 1's stream is held behind a kernel that waits for the host, so rank 0 calls and its peer never
// arrives within the timeout: rank 0's kernel must give up, the error must reach the host as
// tpsTimeout, and the process must stay usable. `count` bf16 elements pick the path (host: kernel or
// copy engines; p2p: LL one-shot, flag one-shot or two-shot by size); `devs` are the ranks' GPUs.
void missingPeerTimesOut(tpsBackend_t backend, size_t count, const std::vector<int>& devs, bool shared = false) {
  tpsConfig_t cfg;
  tpsConfigInit(&cfg);
  cfg.backend = backend;
  cfg.spin_timeout_ms = 500;
  cfg.shared_devices = shared ? 1 : 0;
  const std::string what = std::string(tpsBackendName(backend)) + " count=" + std::to_string(count);
  Fixture f;
  f.setUp(devs, &cfg);
  ASSERT_NE(f.comm, nullptr);
  f.fill(tpsBfloat16, count, 0, 3);
  tpscope::testing::HostGate gate;
  gate.hold(devs[1], f.streams[1]);
  ASSERT_TRUE(gate.ok());
  const auto t0 = std::chrono::steady_clock::now();
  TPS_OK(tpsAllReduce(f.comm, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())));
  CUDA_OK(cudaSetDevice(devs[0]));
  CUDA_OK(cudaStreamSynchronize(f.streams[0]));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timeout  ] %s N=%zu: tpsTimeout after %.3f s (spin timeout %.3f s)\n", what.c_str(), devs.size(),
              waited, cfg.spin_timeout_ms / 1e3);
  std::fflush(stdout);
  EXPECT_GE(waited, 0.4) << what;
  EXPECT_LT(waited, cfg.spin_timeout_ms / 1e3 + kTimeoutSlackS) << what;
  tpsResult_t async = tpsSuccess;
  TPS_OK(tpsCommGetAsyncError(f.comm, &async));
  EXPECT_EQ(async, tpsTimeout) << what;
  EXPECT_STREQ(tpsGetErrorString(async), "timeout");
  // Release rank 1: it finds rank 0's published data and finishes, or gives up waiting in its turn;
  // nothing hangs.
  gate.open();
  CUDA_OK(cudaSetDevice(devs[1]));
  CUDA_OK(cudaStreamSynchronize(f.streams[1]));
  // The communicator refuses further work; a new one works.
  EXPECT_EQ(tpsAllReduce(f.comm, f.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(f.streams.data())),
            tpsInvalidUsage)
      << what;
  f.tearDown();
  Fixture g;
  g.setUp(devs, &cfg);
  g.fill(tpsBfloat16, count, 0, 4);
  TPS_OK(tpsAllReduce(g.comm, g.bufs.data(), count, tpsBfloat16, reinterpret_cast<tpsStream_t*>(g.streams.data())));
  g.sync();
  g.check(tpsBfloat16, count, ("after timeout, new communicator: " + what).c_str());
  g.tearDown();
}

}  // namespace
