// SPDX-License-Identifier: Apache-2.0
// bench/tune.h - `tpscope bench allreduce --tune`: measures the host backend's tunables on this box
// (copy-engine chunk, kernel-path blocks, kernel/copy-engine crossover) and writes the tuning file
// that every communicator reads (src/allreduce/tuning.h), and the pinned copy rate it is judged by.
// bench/crossover.h then adds the "auto" table (the fastest backend per size) to the same file.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace tpscope::cli {

// Pinned-memory copy rate of GPU `device` in GB/s (1e9 B/s): median of `reps` copies of `bytes`,
// timed with CUDA events; `to_host` picks D2H, else H2D. Negative on a CUDA error.
double pinnedCopyRateGBps(int device, bool to_host, size_t bytes, int reps = 5);

struct TuneResult {
  size_t host_copy_threshold = 0;
  size_t host_chunk_bytes = 0;
  int host_blocks = 0;
  std::string path;  // where the file was written
};

// Runs the measurements on `devices`, prints a '#'-commented table of every candidate to `out`, and
// writes the tuning file. Returns 0, or 1 with a one-line error on stderr.
int runHostTune(const std::vector<int>& devices, std::FILE* out, TuneResult* result);

}  // namespace tpscope::cli
