// SPDX-License-Identifier: Apache-2.0
// nccl_types.h - tpscope's element types as NCCL's, for the nccl backend and the bench's nccl-symm column.
#pragma once

#include <nccl.h>

#include "tpscope/tpscope.h"

namespace tpscope::detail {

inline ncclDataType_t ncclTypeOf(tpsDataType_t t) {
  switch (t) {
    case tpsFloat16: return ncclFloat16;
    case tpsBfloat16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}

}  // namespace tpscope::detail
