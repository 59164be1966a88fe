// SPDX-License-Identifier: Apache-2.0
// checks.h - error propagation inside the library (modelled on NCCL's checks.h).
//
//   TPS_CUDA_CHECK(call)  on failure logs the call text, the CUDA error name and file:line, clears the
//                         sticky last error and returns tpsCudaError.
//   TPS_CHECK(call)       propagates a non-success tpsResult_t with a one-line trace at INFO.
//   TPS_EXPECT(cond, code, fmt, ...)  argument validation: logs the message at WARN and returns code.
// All three are for functions that return tpsResult_t.
#pragma once

#include <cuda_runtime_api.h>

#include "common/log.h"
#include "tpscope/tpscope.h"

#define TPS_CUDA_CHECK(call)                                                                                      \
  do {                                                                                                            \
    cudaError_t tps_err_ = (call);                                                                                \
    if (tps_err_ != cudaSuccess) {                                                                                \
      (void)cudaGetLastError();                                                                                   \
      TPS_LOG_WARN("CUDA failure '{}' {} ({})", #call, cudaGetErrorName(tps_err_), cudaGetErrorString(tps_err_)); \
      return tpsCudaError;                                                                                        \
    }                                                                                                             \
  } while (0)

#define TPS_CHECK(call)                                                                    \
  do {                                                                                     \
    tpsResult_t tps_res_ = (call);                                                         \
    if (tps_res_ != tpsSuccess) {                                                          \
      TPS_LOG_INFO("-> {} ({})", static_cast<int>(tps_res_), tpsGetErrorString(tps_res_)); \
      return tps_res_;                                                                     \
    }                                                                                      \
  } while (0)

#define TPS_EXPECT(cond, code, ...) \
  do {                              \
    if (!(cond)) {                  \
      TPS_LOG_WARN(__VA_ARGS__);    \
      return (code);                \
    }                               \
  } while (0)

// After a kernel launch: a launch error (bad configuration, no kernel image) is reported here.
#define TPS_CUDA_CHECK_LAUNCH() TPS_CUDA_CHECK(cudaGetLastError())
