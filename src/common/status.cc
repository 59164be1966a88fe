// SPDX-License-Identifier: Apache-2.0
// status.cc - tpsGetErrorString and the version string of the C API.
#include "tpscope/tpscope.h"
#include "tpscope/version.h"

extern "C" const char* tpsGetErrorString(tpsResult_t result) {
  switch (result) {
    case tpsSuccess: return "no error";
    case tpsCudaError: return "CUDA error";
    case tpsSystemError: return "system error";
    case tpsInternalError: return "internal error";
    case tpsInvalidArgument: return "invalid argument";
    case tpsInvalidUsage: return "invalid usage";
    case tpsTimeout: return "timeout";
    case tpsUnavailable: return "unavailable";
    case tpsNcclError: return "NCCL error";
    case tpsNumResults: break;
  }
  return "unknown status code";
}

extern "C" const char* tpsGetVersion(void) { return TPSCOPE_VERSION_STRING; }
