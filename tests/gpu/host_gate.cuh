// SPDX-License-Identifier: Apache-2.0
// host_gate.cuh - holds a GPU's stream until the host opens the gate: a one-thread kernel that waits on
// a flag in mapped host memory. The fault tests use it to make one GPU's peer never arrive.
#pragma once

#include <cuda_runtime.h>

namespace tpscope::testing {
namespace {

__global__ void waitForHost(const volatile int* flag) {
  while (*flag == 0) __nanosleep(1000);
}

}  // namespace

class HostGate {
 public:
  HostGate() {
    ok_ = cudaHostAlloc(&flag_, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable) == cudaSuccess;
    if (ok_) *flag_ = 0;
  }
  ~HostGate() {  // opens first: a kernel still waiting (a test that stopped early) ends before the free
    if (flag_) open(), cudaFreeHost(flag_);
  }
  HostGate(const HostGate&) = delete;
  HostGate& operator=(const HostGate&) = delete;
  // Whether the flag was allocated and, after hold(), the kernel launched.
  bool ok() const { return ok_; }
  // Enqueues the waiting kernel on `stream` of `device` (the current device afterwards).
  void hold(int device, cudaStream_t stream) {
    int* dflag = nullptr;
    ok_ = ok_ && cudaSetDevice(device) == cudaSuccess && cudaHostGetDevicePointer(&dflag, flag_, 0) == cudaSuccess;
    if (ok_) waitForHost<<<1, 1, 0, stream>>>(dflag);
    ok_ = ok_ && cudaGetLastError() == cudaSuccess;
  }
  void open() { *reinterpret_cast<volatile int*>(flag_) = 1; }

 private:
  int* flag_ = nullptr;
  bool ok_ = false;
};

}  // namespace tpscope::testing
