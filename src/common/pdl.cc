// SPDX-License-Identifier: Apache-2.0
// pdl.cc - whether programmatic dependent launch is used on the current device (pdl.cuh).
#include <cuda_runtime.h>

#include <mutex>

namespace tpscope {

bool pdlEnabled() {
  static std::once_flag once;
  static int capable[64] = {};  // per device ordinal: 1 when compute capability >= 9.0
  std::call_once(once, [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    for (int d = 0; d < count && d < 64; ++d) {
      int major = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess) capable[d] = major >= 9;
    }
    (void)cudaGetLastError();
  });
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  return capable[device] != 0;
}

}  // namespace tpscope
