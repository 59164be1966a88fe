// SPDX-License-Identifier: Apache-2.0
// bf16_multigpu.h - helpers for the multi-GPU tests of bf16 kernels: a communicator with one stream per
// GPU (Gpus), one bf16 array per GPU with host copies (PerGpu), bf16 conversions and a bitwise compare.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::testing {

using Bf = __nv_bfloat16;

struct Gpus {
  int n = 0;
  std::vector<cudaStream_t> streams;
  tpsComm_t comm = nullptr;
  explicit Gpus(int count, const tpsConfig_t* config = nullptr) : n(count), streams(count) {
    std::vector<int> devs;
    for (int i = 0; i < n; ++i) {
      devs.push_back(i);
      cudaSetDevice(i);
      cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking);
    }
    EXPECT_EQ(tpsCommCreate(&comm, n, devs.data(), config), tpsSuccess);
  }
  ~Gpus() {
    tpsCommDestroy(comm);
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaStreamDestroy(streams[i]);
    }
  }
  const tpsStream_t* s() const { return reinterpret_cast<const tpsStream_t*>(streams.data()); }
  void sync() {
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaStreamSynchronize(streams[i]);
    }
  }
};

// One bf16 array per GPU, copied in and out.
struct PerGpu {
  std::vector<void*> dev;
  std::vector<std::vector<Bf>> host;
  PerGpu(int n, size_t count) : dev(n), host(n, std::vector<Bf>(count)) {
    for (int i = 0; i < n; ++i) {
      cudaSetDevice(i);
      cudaMalloc(&dev[i], count * sizeof(Bf));
    }
  }
  ~PerGpu() {
    for (size_t i = 0; i < dev.size(); ++i) {
      cudaSetDevice(static_cast<int>(i));
      cudaFree(dev[i]);
    }
  }
  void up() {
    for (size_t i = 0; i < dev.size(); ++i)
      cudaMemcpy(dev[i], host[i].data(), host[i].size() * sizeof(Bf), cudaMemcpyHostToDevice);
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
