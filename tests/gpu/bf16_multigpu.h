// SPDX-License-Identifier: Apache-2.0
// bf16_multigpu.h - helpers for the multi-GPU tests of bf16 kernels: a communicator with one stream per
// GPU (Gpus), one bf16 array per GPU with host copies (PerGpu), bf16 conversions and a bitwise compare.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::testing {

using Bf = __nv_bfloat16;

struct Gpus {
  int n = 0;
  std::vector<cudaStream_t> streams;
  tpsComm_t comm = nullptr;
  std::vector<int> devs;  // rank r's GPU
  explicit Gpus(int count, const tpsConfig_t* config = nullptr) : Gpus(firstGpus(count), config) {}
  // Rank r on GPU devices[r] (a GPU may appear twice when config says shared_devices).
  explicit Gpus(std::vector<int> devices, const tpsConfig_t* config = nullptr)
      : n(static_cast<int>(devices.size())), streams(devices.size()), devs(std::move(devices)) {
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    }
    EXPECT_EQ(tpsCommCreate(&comm, n, devs.data(), config), tpsSuccess);
  }
  ~Gpus() {
    tpsCommDestroy(comm);
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      cudaStreamDestroy(streams[i]);
    }
  }
  static std::vector<int> firstGpus(int count) {
    std::vector<int> d(count);
    for (int i = 0; i < count; ++i) d[i] = i;
    return d;
  }
  const tpsStream_t* s() const { return reinterpret_cast<const tpsStream_t*>(streams.data()); }
  void sync() const {
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      cudaStreamSynchronize(streams[i]);
    }
  }
};

// One bf16 array per rank, on the rank's GPU, copied in and out.
struct PerGpu {
  std::vector<int> gpu;
  std::vector<void*> dev;
  std::vector<std::vector<Bf>> host;
  PerGpu(int n, size_t count) : PerGpu(Gpus::firstGpus(n), count) {}
  PerGpu(const Gpus& g, size_t count) : PerGpu(g.devs, count) {}
  PerGpu(std::vector<int> gpus, size_t count)
      : gpu(std::move(gpus)), dev(gpu.size()), host(gpu.size(), std::vector<Bf>(count)) {
    for (size_t i = 0; i < gpu.size(); ++i) {
      cudaSetDevice(gpu[i]);
      cudaMalloc(&dev[i], count * sizeof(Bf));
    }
  }
  ~PerGpu() {
    for (size_t i = 0; i < dev.size(); ++i) {
      cudaSetDevice(gpu[i]);
      cudaFree(dev[i]);
    }
  }
  void up() {
    int current = 0;
    cudaGetDevice(&current);
    for (size_t i = 0; i < dev.size(); ++i) {
      cudaSetDevice(gpu[i]);
      cudaMemcpy(dev[i], host[i].data(), host[i].size() * sizeof(Bf), cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();  // a pageable upload may still be in flight; the calls' streams are non-blocking
    }
    cudaSetDevice(current);
  }
  std::vector<Bf> down(int i) const {
    std::vector<Bf> out(host[i].size());
    cudaMemcpy(out.data(), dev[i], out.size() * sizeof(Bf), cudaMemcpyDeviceToHost);
    return out;
  }
};

inline float f(Bf v) { return __bfloat162float(v); }
inline Bf bf(float v) { return __float2bfloat16_rn(v); }
inline bool same(const std::vector<Bf>& a, const std::vector<Bf>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Bf)) == 0;
}

}  // namespace tpscope::testing
