// SPDX-License-Identifier: Apache-2.0
// stream_memops.cc - stream memory operations through the runtime's driver entry points.
#include "common/stream_memops.h"

#include <cuda.h>

#include <mutex>

#include "common/checks.h"

namespace tpscope {

namespace {

using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct MemOps {
  WriteFn write = nullptr;
};

// The entry point of the CUDA 12 interface (the _v2 function behind cuStreamWriteValue32 in cuda.h).
const MemOps& memOps() {
  static MemOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    void* write = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      ops.write = reinterpret_cast<WriteFn>(write);
    (void)cudaGetLastError();
  });
  return ops;
}

}  // namespace

bool streamMemOpsAvailable() { return memOps().write != nullptr; }

tpsResult_t streamWrite(cudaStream_t stream, void* device_address, uint32_t value) {
  const MemOps& ops = memOps();
  TPS_EXPECT(ops.write != nullptr, tpsUnavailable, "cuStreamWriteValue32 is not available from this driver");
  const CUresult r = ops.write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_address), value,
                               CU_STREAM_WRITE_VALUE_DEFAULT);
  TPS_EXPECT(r == CUDA_SUCCESS, tpsCudaError, "cuStreamWriteValue32 failed (CUresult {})", static_cast<int>(r));
  return tpsSuccess;
}

}  // namespace tpscope
