// SPDX-License-Identifier: Apache-2.0
// ceilings.cc - PCIe and NVLink ceiling arithmetic.
#include "topology/ceilings.h"

namespace tpscope {

namespace {
// Line-code efficiency per generation: payload bits per transmitted bit.
std::optional<double> encodingEfficiency(int gen) {
  switch (gen) {
    case 1:
    case 2: return 8.0 / 10.0;
    case 3:
    case 4:
    case 5: return 128.0 / 130.0;
    case 6: return 242.0 / 256.0;  // FLIT mode: 242 payload bytes in each 256-byte flit
    default: return std::nullopt;
  }
}
}  // namespace

std::optional<double> pcieTransferRateGTs(int gen) {
  static const double kRates[] = {0.0, 2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  if (gen < 1 || gen > 6) return std::nullopt;
  return kRates[gen];
}

std::optional<double> pcieCeilingMBps(int gen, int width) {
  std::optional<double> rate = pcieTransferRateGTs(gen);
  std::optional<double> eff = encodingEfficiency(gen);
  if (!rate || !eff || width < 1) return std::nullopt;
  return *rate * 1000.0 * *eff / 8.0 * width;  // GT/s -> Mbit/s per lane -> MB/s, times lanes
}

std::optional<double> nvlinkCeilingMBps(int links, double link_rate_mbps) {
  if (links < 1 || !(link_rate_mbps > 0.0)) return std::nullopt;
  return links * link_rate_mbps;
}

}  // namespace tpscope
