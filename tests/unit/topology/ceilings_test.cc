// SPDX-License-Identifier: Apache-2.0
// ceilings_test - unit tests for src/topology/ceilings.cc.
#include "topology/ceilings.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tpscope {
namespace {

TEST(Ceilings, PcieX16MatchesTheFiguresUsersQuote) {
  EXPECT_EQ(std::lround(*pcieCeilingMBps(3, 16)), 15754);
  EXPECT_EQ(std::lround(*pcieCeilingMBps(4, 16)), 31508);
  EXPECT_EQ(std::lround(*pcieCeilingMBps(5, 16)), 63015);
}

TEST(Ceilings, PcieOlderGenerationsUse8b10b) {
  EXPECT_DOUBLE_EQ(*pcieCeilingMBps(1, 16), 4000.0);  // 2.5 GT/s x 0.8 / 8 = 250 MB/s per lane
  EXPECT_DOUBLE_EQ(*pcieCeilingMBps(2, 16), 8000.0);
}

TEST(Ceilings, PcieScalesWithWidth) {
  EXPECT_DOUBLE_EQ(*pcieCeilingMBps(4, 8) * 2, *pcieCeilingMBps(4, 16));
  EXPECT_DOUBLE_EQ(*pcieCeilingMBps(5, 1) * 16, *pcieCeilingMBps(5, 16));
}

TEST(Ceilings, Gen6UsesFlitEfficiency) { EXPECT_NEAR(*pcieCeilingMBps(6, 16), 121000.0, 1.0); }

TEST(Ceilings, UnknownGenerationOrWidthIsNotAvailable) {
  EXPECT_FALSE(pcieCeilingMBps(0, 16).has_value());
  EXPECT_FALSE(pcieCeilingMBps(7, 16).has_value());
  EXPECT_FALSE(pcieCeilingMBps(4, 0).has_value());
  EXPECT_FALSE(pcieTransferRateGTs(-1).has_value());
}

TEST(Ceilings, NvlinkIsLinksTimesRate) {
  EXPECT_DOUBLE_EQ(*nvlinkCeilingMBps(18, 26562.0), 478116.0);
  EXPECT_DOUBLE_EQ(*nvlinkCeilingMBps(2, 25781.0), 51562.0);
  EXPECT_FALSE(nvlinkCeilingMBps(0, 26562.0).has_value());
  EXPECT_FALSE(nvlinkCeilingMBps(18, 0.0).has_value());
}

}  // namespace
}  // namespace tpscope
