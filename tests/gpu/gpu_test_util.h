// SPDX-License-Identifier: Apache-2.0
// gpu_test_util.h - hardware gates for GPU tests: skip with a reason when the GPUs are not there.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace tpscope::testing {

// Number of CUDA GPUs (0 when there is no driver); *reason says why when 0.
int gpuCount(std::string* reason = nullptr);

}  // namespace tpscope::testing

// Skips the test, with the reason, unless at least `n` GPUs are visible.
#define TPS_REQUIRE_GPUS(n)                                                       \
  do {                                                                            \
    std::string tps_why_;                                                         \
    int tps_have_ = ::tpscope::testing::gpuCount(&tps_why_);                      \
    if (tps_have_ < (n))                                                          \
      GTEST_SKIP() << "needs " << (n) << " GPU(s), found " << tps_have_           \
                   << (tps_why_.empty() ? std::string() : " (" + tps_why_ + ")"); \
  } while (0)
