// SPDX-License-Identifier: Apache-2.0
// unwrap.h - turns a wrapping hardware counter into a 64-bit running total.
//
// NVML's PCIe byte counters (fields 197/198) are 32-bit and wrap every ~68 ms at Gen5 line rate
// (2^32 B / 63 GB/s). Between two reads the counter advanced by (now - last) mod 2^bits, which is
// right as long as it wrapped at most once: the sampler reads every few ms, and a gap longer than
// the wrap period is counted in MeterCadence::wrap_gaps so a result that may be short is flagged.
#pragma once

#include <cstdint>

namespace tpscope::detail {

class Unwrapper {
 public:
  Unwrapper() : Unwrapper(64) {}  // not explicit: arrays of them are value-initialised ({})
  explicit Unwrapper(int bits) : mask_(bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1) {}
  // The total advanced since the first value pushed (0 for the first).
  uint64_t push(uint64_t raw) {
    raw &= mask_;
    if (has_) total_ += (raw - last_) & mask_;
    last_ = raw;
    has_ = true;
    return total_;
  }
  uint64_t total() const { return total_; }

 private:
  uint64_t mask_;
  uint64_t last_ = 0, total_ = 0;
  bool has_ = false;
};

}  // namespace tpscope::detail
