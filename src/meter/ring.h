// SPDX-License-Identifier: Apache-2.0
// ring.h - a fixed single-producer single-consumer ring: the sampler thread pushes, the collector pops.
//
// Nothing allocates after construction and neither side blocks: a full ring drops the new element
// and counts it (the sampler must never wait on the collector). The consumer side may be called
// from different threads as long as those calls are serialised by a mutex (the meter holds its
// own around every drain), which also orders their relaxed accesses to tail_.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace tpscope::detail {

template <typename T>
class SpscRing {
 public:
  explicit SpscRing(size_t capacity_pow2) : slots_(capacity_pow2), mask_(capacity_pow2 - 1) {}

  // Producer only. Returns false (and counts a drop) when full.
  bool push(const T& v) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    // acquire pairs with the consumer's release of tail_: the slot we overwrite has been read.
    if (head - tail_.load(std::memory_order_acquire) > mask_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    slots_[head & mask_] = v;
    // release publishes the slot's contents before the new head becomes visible to the consumer.
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer only. Calls f(element) for everything pushed so far; returns how many.
  template <typename F>
  size_t drain(F&& f) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);  // pairs with push's release
    for (uint64_t i = tail; i != head; ++i) f(slots_[i & mask_]);
    tail_.store(head, std::memory_order_release);  // the slots may now be reused
    return static_cast<size_t>(head - tail);
  }

  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  std::vector<T> slots_;
  const uint64_t mask_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::atomic<int64_t> dropped_{0};
};

}  // namespace tpscope::detail
