// SPDX-License-Identifier: Apache-2.0
// gpu_test_util.cc - GPU counting for the hardware gates.
#include "gpu_test_util.h"

#include "topology/topology.h"

namespace tpscope::testing {

int gpuCount(std::string* reason) {
  int n = 0;
  std::string why;
  if (cudaDeviceCount(&n, &why) != tpsSuccess) n = 0;
  if (reason) *reason = why;
  return n;
}

}  // namespace tpscope::testing
