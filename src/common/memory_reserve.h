// SPDX-License-Identifier: Apache-2.0
// memory_reserve.h - running out of memory ends in one error line, not an abort.
//
// An allocation that fails throws std::bad_alloc, which the CLI turns into one line and exit 1. But some
// allocations happen where nothing may throw: nlohmann frees a JSON document through a stack of its
// values, so freeing a document allocates, inside a destructor, and a std::bad_alloc there ends the
// process (std::terminate). So a reserve is held back: the first allocation that fails gets it (the
// new-handler frees it and the allocation is retried) and goes on, whatever it was, and the reader next
// at a point where throwing is safe (checkMemory(), between two records) throws std::bad_alloc. The
// reserve is larger than freeing the largest document bounded_input.h lets in needs.
#pragma once

#include <cstddef>

namespace tpscope {

constexpr size_t kMemoryReserveBytes = size_t{64} << 20;

// Takes the reserve (address space only: it is never touched) and installs the new-handler that gives
// it up. Idempotent. A process that never calls it keeps the standard behaviour.
void holdMemoryReserve();
// Throws std::bad_alloc when an allocation has failed since holdMemoryReserve() (and took the reserve).
void checkMemory();

}  // namespace tpscope
