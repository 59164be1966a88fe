// SPDX-License-Identifier: Apache-2.0
// roofline.h - the memory roofline of a decode step: weight bytes over the GPU's measured copy rate.
#pragma once

#include "tpscope/tpscope.h"

namespace tpscope::workload {

// Device-to-device cudaMemcpyAsync of 1 GiB on `device`, 1 warm-up and 5 timed copies (CUDA events);
// *gbps is the best copy's bytes read plus bytes written per second (10^9 B/s), the rate a kernel that
// streams memory can reach. Needs 2 GiB free; tpsCudaError otherwise.
tpsResult_t measureCopyBandwidth(int device, double* gbps);

}  // namespace tpscope::workload
