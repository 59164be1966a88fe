// SPDX-License-Identifier: Apache-2.0
// bench/cuda_calls.h - what the benchmark's measuring code (one process, and each --procs rank) shares: a
// failed CUDA or tpscope call becomes a std::runtime_error naming the call (the CLI prints one line and
// exits 1), a graph that destroys itself, and the intervals between timing events.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_raii.h"
#include "tpscope/tpscope.h"

namespace tpscope::cli {

inline void cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}
#define TPS_BENCH_CUDA(call) ::tpscope::cli::cudaOk((call), #call)

inline void tpsOk(tpsResult_t r, const std::string& what) {
  if (r != tpsSuccess) throw std::runtime_error(fmt::format("{}: {}", what, tpsGetErrorString(r)));
}

// Owns an instantiated graph.
struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) (void)cudaGraphExecDestroy(exec);
  }
};

// Waits for marks[n] and returns the n intervals marks[i] -> marks[i + 1], in microseconds / `divisor`.
inline std::vector<double> markIntervalsUs(const std::vector<Event>& marks, int n, double divisor) {
  TPS_BENCH_CUDA(cudaEventSynchronize(marks[n].get()));
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    float ms = 0;
    TPS_BENCH_CUDA(cudaEventElapsedTime(&ms, marks[i].get(), marks[i + 1].get()));
    us.push_back(ms * 1e3 / divisor);
  }
  return us;
}

}  // namespace tpscope::cli
