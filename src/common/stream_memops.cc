// SPDX-License-Identifier: Apache-2.0
// stream_memops.cc - stream memory operations through the runtime's driver entry points.
#include "common/stream_memops.h"

#include <cuda.h>

#include <mutex>

#include "common/checks.h"

namespace tpscope {

namespace {

using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct MemOps {
  WaitFn wait = nullptr;
  WriteFn write = nullptr;
};

// The entry points of the CUDA 12 interface (the _v2 functions behind cuStreamWaitValue32 in cuda.h).
const MemOps& memOps() {
  static MemOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    void* wait = nullptr;
    void* write = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess &&
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      ops.wait = reinterpret_cast<WaitFn>(wait);
      ops.write = reinterpret_cast<WriteFn>(write);
    }
    (void)cudaGetLastError();
  });
  return ops;
}

}  // namespace

bool streamMemOpsAvailable() { return memOps().wait != nullptr && memOps().write != nullptr; }

tpsResult_t streamWaitAtLeast(cudaStream_t stream, void* device_address, uint32_t value) {
  const MemOps& ops = memOps();
  TPS_EXPECT(ops.wait != nullptr, tpsUnavailable, "cuStreamWaitValue32 is not available from this driver");
  const CUresult r = ops.wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_address), value,
                              CU_STREAM_WAIT_VALUE_GEQ);
  TPS_EXPECT(r == CUDA_SUCCESS, tpsCudaError, "cuStreamWaitValue32 failed (CUresult {})", static_cast<int>(r));
  return tpsSuccess;
}

tpsResult_t streamWrite(cudaStream_t stream, void* device_address, uint32_t value) {
  const MemOps& ops = memOps();
  TPS_EXPECT(ops.write != nullptr, tpsUnavailable, "cuStreamWriteValue32 is not available from this driver");
  const CUresult r = ops.write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_address), value,
                               CU_STREAM_WRITE_VALUE_DEFAULT);
  TPS_EXPECT(r == CUDA_SUCCESS, tpsCudaError, "cuStreamWriteValue32 failed (CUresult {})", static_cast<int>(r));
  return tpsSuccess;
}

}  // namespace tpscope
