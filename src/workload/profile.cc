// SPDX-License-Identifier: Apache-2.0
// profile.cc - per-op CUDA events of one forward pass, summed by op.
#include "workload/profile.h"

#include <cstring>

#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::workload {

StepProfile::~StepProfile() {
  DeviceGuard on(device_);
  for (const Mark& m : marks_) (void)cudaEventDestroy(m.event);
}

tpsResult_t StepProfile::mark(const char* op, uint64_t bytes, cudaStream_t stream, double flops) {
  DeviceGuard on(device_);
  cudaEvent_t e = nullptr;
  TPS_CUDA_CHECK(cudaEventCreate(&e));
  marks_.push_back({op, bytes, flops, e});
  TPS_CUDA_CHECK(cudaEventRecord(e, stream));
  return tpsSuccess;
}

tpsResult_t StepProfile::collect(std::vector<OpTime>* out) const {
  out->clear();
  DeviceGuard on(device_);
  for (size_t i = 1; i < marks_.size(); ++i) {
    float ms = 0;
    TPS_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i - 1].event, marks_[i].event));
    OpTime* row = nullptr;
    for (OpTime& r : *out)
      if (r.op == marks_[i].op) row = &r;
    if (!row) {
      out->push_back(OpTime{marks_[i].op});
      row = &out->back();
    }
    ++row->calls;
    row->us += 1e3 * ms;
    row->bytes += marks_[i].bytes;
    row->flops += marks_[i].flops;
  }
  return tpsSuccess;
}

}  // namespace tpscope::workload
