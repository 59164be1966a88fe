// SPDX-License-Identifier: Apache-2.0
// profile.h - where a forward pass spends its time, op by op, on each GPU (`tpscope tp --profile`).
//
// Every op of a shard records a CUDA event on the shard's stream after itself; an op's time is the
// elapsed time from the previous event. The forward is enqueued behind a spin kernel, so the GPU runs
// it back to back and the figures are GPU time, not launch gaps (eager, one step, after a warm-up).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::workload {

struct OpTime {
  std::string op;
  int calls = 0;
  double us = 0;       // summed over the calls
  uint64_t bytes = 0;  // bytes the calls must read: weights (projections), K and V (attention); 0 otherwise
  double flops = 0;    // arithmetic the calls did where it is the measure (attention), 0 otherwise
};

class StepProfile {
 public:
  explicit StepProfile(int device) : device_(device) {}
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // Records an event after the work enqueued so far on `stream`: the end of op `op` (a string literal).
  tpsResult_t mark(const char* op, uint64_t bytes, cudaStream_t stream, double flops = 0);
  // After the stream has finished: the ops in first-seen order, each with its calls and summed time.
  // The first mark is the start and names no op.
  tpsResult_t collect(std::vector<OpTime>* out) const;

 private:
  struct Mark {
    const char* op;
    uint64_t bytes;
    double flops;
    cudaEvent_t event;
  };
  int device_;
  std::vector<Mark> marks_;
};

}  // namespace tpscope::workload
