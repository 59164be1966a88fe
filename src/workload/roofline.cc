// SPDX-License-Identifier: Apache-2.0
// roofline.cc - measured device copy bandwidth.
#include "workload/roofline.h"

#include <algorithm>

#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::workload {

tpsResult_t measureCopyBandwidth(int device, double* gbps) {
  constexpr size_t kBytes = 1ull << 30;
  DeviceGuard on(device);
  DeviceBuffer a, b;
  Stream s;
  Event start, stop;
  TPS_CHECK(DeviceBuffer::create(device, kBytes, &a));
  TPS_CHECK(DeviceBuffer::create(device, kBytes, &b));
  TPS_CHECK(Stream::create(device, &s));
  TPS_CHECK(Event::create(device, &start));
  TPS_CHECK(Event::create(device, &stop));
  TPS_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice, s.get()));
  float best_ms = 1e30f;
  for (int i = 0; i < 5; ++i) {
    TPS_CUDA_CHECK(cudaEventRecord(start.get(), s.get()));
    TPS_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice, s.get()));
    TPS_CUDA_CHECK(cudaEventRecord(stop.get(), s.get()));
    TPS_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    TPS_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    best_ms = std::min(best_ms, ms);
  }
  *gbps = 2.0 * kBytes / (best_ms * 1e-3) / 1e9;
  return tpsSuccess;
}

}  // namespace tpscope::workload
