// SPDX-License-Identifier: Apache-2.0
// ceilings.h - per-direction link ceilings, the denominators of every "share of the link" figure.
//
// PCIe: transfer rate per lane x line-code efficiency / 8 bits, times the lane count, in MB/s
// (1 MB = 10^6 bytes). Gen1-2 use 8b/10b, Gen3-5 128b/130b, Gen6 FLIT mode (242/256). So x16 is
// Gen3 15,754, Gen4 31,508, Gen5 63,015 MB/s per direction: the figures nvidia-smi users quote.
// These are raw link ceilings; packet headers mean payload never reaches them (see docs/METHOD.md).
#pragma once

#include <optional>

namespace tpscope {

// Transfer rate in GT/s per lane for PCIe generation `gen` (1..6); nullopt for anything else.
std::optional<double> pcieTransferRateGTs(int gen);
// Per-direction ceiling in MB/s for `gen` and `width` lanes; nullopt when gen is unknown or width < 1.
std::optional<double> pcieCeilingMBps(int gen, int width);
// Per-direction NVLink ceiling in MB/s: `links` active links at `link_rate_mbps` each.
std::optional<double> nvlinkCeilingMBps(int links, double link_rate_mbps);

}  // namespace tpscope
