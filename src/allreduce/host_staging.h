// SPDX-License-Identifier: Apache-2.0
// host_staging.h - pinned host memory that every rank of a communicator maps: the host backend's staging
// areas and flags, the one view of host memory its algorithms run on in both process shapes.
#pragma once

#include <memory>
#include <vector>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

struct RankGroup;

struct SharedHost {
  char* host = nullptr;       // this process's address: for copies and the CPU
  std::vector<char*> device;  // [local rank] the address that rank's kernels and stream operations use
  size_t bytes = 0;
};

class HostStaging {
 public:
  virtual ~HostStaging() = default;
  // `bytes` of zero-filled pinned host memory that every rank maps, kept until the staging is destroyed.
  // Collective across processes: every rank asks for the same sizes in the same order, and gets the same
  // status. tpsUnavailable when the memory cannot be had (the log says why).
  virtual tpsResult_t allocate(size_t bytes, SharedHost* out) = 0;
};

// Every rank in this process, on `devices`: cudaHostAlloc'd, portable and mapped.
std::unique_ptr<HostStaging> makeProcessStaging(const std::vector<int>& devices);
// One rank per process: POSIX shared memory that rank 0 creates and every rank's process maps and
// registers with CUDA (readable by the communicator's user only).
std::unique_ptr<HostStaging> makeSharedMemoryStaging(RankGroup& g);

}  // namespace tpscope::detail
