// SPDX-License-Identifier: Apache-2.0
// async_status.h - the host-mapped status words through which a backend's kernels report errors
// that happen after the call returned (a peer that never arrived: tpsTimeout). One word per rank,
// written by that rank's kernels with reportTimeout() (reduce_ops.cuh), read by the host without
// synchronising.
#pragma once

#include <cstring>

#include "common/checks.h"
#include "common/cuda_raii.h"

namespace tpscope::detail {

class AsyncStatus {
 public:
  tpsResult_t create() {
    TPS_CHECK(PinnedBuffer::create(sizeof(unsigned) * TPS_MAX_DEVICES, &words_));
    std::memset(words_.host(), 0, words_.bytes());
    return tpsSuccess;
  }
  // The words as the kernels on `device` address them.
  tpsResult_t devicePointer(int device, unsigned** out) const {
    void* p = nullptr;
    TPS_CHECK(words_.devicePointer(device, &p));
    *out = static_cast<unsigned*>(p);
    return tpsSuccess;
  }
  // The first error any of `nranks` ranks reported, else tpsSuccess. Each word is read with an atomic
  // load (the GPU writes it behind the host's back; a word is 4-byte aligned, so never torn).
  tpsResult_t error(int nranks) const {
    unsigned* w = static_cast<unsigned*>(words_.host());
    for (int q = 0; q < nranks; ++q)
      if (const unsigned v = __atomic_load_n(w + q, __ATOMIC_ACQUIRE); v != 0) return static_cast<tpsResult_t>(v);
    return tpsSuccess;
  }

 private:
  PinnedBuffer words_;
};

}  // namespace tpscope::detail
