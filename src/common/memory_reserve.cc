// SPDX-License-Identifier: Apache-2.0
// memory_reserve.cc - the reserve, its new-handler and the check between records.
#include "common/memory_reserve.h"

#include <atomic>
#include <new>

namespace tpscope {

namespace {

char* g_reserve = nullptr;
std::atomic<bool> g_spent{false};

// Called by operator new when an allocation fails: the first time, the reserve goes and the allocation
// is retried (it may be inside a destructor, where throwing would end the process); after that, throw.
void onAllocationFailure() {
  if (g_reserve) {
    delete[] g_reserve;
    g_reserve = nullptr;
    g_spent = true;
    return;
  }
  std::set_new_handler(nullptr);
  throw std::bad_alloc();
}

}  // namespace

void holdMemoryReserve() {
  if (g_reserve || g_spent) return;
  g_reserve = new (std::nothrow) char[kMemoryReserveBytes];
  if (g_reserve) std::set_new_handler(onAllocationFailure);
}

void checkMemory() {
  if (g_spent) throw std::bad_alloc();
}

}  // namespace tpscope
