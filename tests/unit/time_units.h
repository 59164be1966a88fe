// SPDX-License-Identifier: Apache-2.0
// time_units.h - the unit the meter tests write times in: records carry nanoseconds, the tests think in
// microseconds.
#pragma once

#include <cstdint>

namespace tpscope::testing {

inline constexpr int64_t kUs = 1000;  // nanoseconds in a microsecond

}  // namespace tpscope::testing
