// SPDX-License-Identifier: Apache-2.0
// window.h - bytes, rates and bounds for a window [start, end] from cumulative counter samples.
//
// Pure functions of the recorded samples (no clocks, no threads), so all of it is unit-tested.
// The model: between two reads a counter grew linearly. The cumulative value at any instant inside
// the recorded span is the linear interpolation of its two neighbouring reads, and the bytes in a
// window are C(end) - C(start): the reads inside count fully, the two edge intervals are prorated
// by time. Proration is exact for steady traffic; for bursty traffic the truth lies between
// bytes_low (reads inside the window only) and bytes_high (the reads bracketing it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meter/meter.h"

namespace tpscope::detail {

// One GPU's samples as collected (its counter groups' reads interleaved); t_ns[c] is non-decreasing
// for every counter c, and rows without a value of c are skipped for c.
using Series = std::vector<MeterSample>;

// Whether every counter `info` supports has a value read at or after t (a window ending at t is
// then bracketed on this GPU).
bool readAfter(const Series& s, const MeterGpu& info, int64_t t);

// Interpolated cumulative bytes of counter c at time t; nullopt outside the recorded span.
std::optional<double> cumulativeAt(const Series& s, MeterCounter c, int64_t t);

// One GPU, one counter. ceiling_mbps may be nullopt (share N/A). Requires start <= end.
MeterCell computeCell(const Series& s, MeterCounter c, int64_t start, int64_t end, double peak_span_ms,
                      std::optional<double> ceiling_mbps);

// The dmon method for the cell: the mean of the dmon readings whose midpoint lies in [start, end].
void addDmon(MeterCell* cell, const std::vector<MeterDmonSample>& dmon, int gpu, MeterCounter c, int64_t start,
             int64_t end);

// A window over every GPU. series[k] belongs to gpus[k]; dmon may be empty. With a calibration
// (calibrated), each cell is made net of the meter's own reads inside the window (subtractOwn).
MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<Series>& series, const std::vector<MeterGpu>& gpus,
                          const std::vector<MeterDmonSample>& dmon, double peak_span_ms,
                          const MeterCalibration* calibration = nullptr);

// Reads of each kind on GPU position `gpu` whose midpoint lies in [start, end]: the series' rows by
// group, the dmon readings as calls.
std::array<int64_t, kMeterReadKinds> readsInside(const Series& s, const std::vector<MeterDmonSample>& dmon, int gpu,
                                                 int64_t start, int64_t end);

// Makes a cell net of `reads` reads of each kind at the calibrated costs: counted_bytes keeps the
// counter difference, own_bytes what the reads added, bytes/mean/share become net, and the bounds
// widen by the calibration's spread. A cell without bytes, or a kind without a cost for the counter
// while it was read, is left gross (own_bytes stays nullopt).
void subtractOwn(MeterCell* cell, const MeterGpuCalibration& cal, int c,
                 const std::array<int64_t, kMeterReadKinds>& reads, double duration_s,
                 std::optional<double> ceiling_mbps);

// The verdict of a quiescing interval from its window. pids[k] lists the processes on GPU k
// (nullopt: could not list); own_pids are ours (this process, an engine's server) and do not count.
QuiesceRecord evaluateQuiesce(const MeterWindow& idle, const std::vector<MeterGpu>& gpus, double threshold_mbps,
                              const std::vector<std::optional<std::vector<unsigned>>>& pids,
                              const std::vector<unsigned>& own_pids);

}  // namespace tpscope::detail
