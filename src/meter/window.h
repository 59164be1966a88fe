// SPDX-License-Identifier: Apache-2.0
// window.h - a window [start, end] from the sources' answers: net bytes, rates, bounds and shares, once
// for every source; and the answers of the sources that read cumulative counters and dmon rates.
//
// Pure functions of recorded data (no clocks, no threads), so all of it is unit-tested.
// Cumulative counters (nvml): between two reads a counter grew linearly. The cumulative value at any
// instant inside the recorded span is the linear interpolation of its two neighbouring reads, and the
// bytes in a window are C(end) - C(start): the reads inside count fully, the two edge intervals are
// prorated by time. Proration is exact for steady traffic; for bursty traffic the truth lies between
// the reads inside the window only (low) and the reads bracketing it (high).
// Net figures: a figure is made net of the own traffic of every source that measured its own (an NVML
// read crosses the link it reads, and so do PM's records), and its bounds widen by their spread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meter/calibrate.h"
#include "meter/meter.h"
#include "meter/source.h"

namespace tpscope::detail {

// One GPU's samples as collected (its counter groups' reads interleaved); t_ns[c] is non-decreasing
// for every counter c, and rows without a value of c are skipped for c.
using Series = std::vector<MeterSample>;

// Whether every counter `info` supports has a value read at or after t (a window ending at t is
// then bracketed on this GPU).
bool readAfter(const Series& s, const MeterGpu& info, int64_t t);

// Interpolated cumulative bytes of counter c at time t; nullopt outside the recorded span.
std::optional<double> cumulativeAt(const Series& s, MeterCounter c, int64_t t);

// Spaces between consecutive PCIe reads of `s` long enough for a 32-bit counter to wrap unseen at
// `ceiling_mbps`, that overlap [start, end], counted per direction: NVML's blind spot in a window.
// Costs the reads around the window (the first pair to count is found by bisection on t_ns).
int wrapGapsIn(const Series& s, int64_t start_ns, int64_t end_ns, std::optional<double> ceiling_mbps);

// ---- the sources' answers ----------------------------------------------------------------------

// Cumulative counter c over [start, end] (requires start <= end): prorated bytes, the bounds, the
// peak, the reads inside; complete when c has a value read at or after end.
SourceFigure counterFigure(const Series& s, MeterCounter c, int64_t start, int64_t end, double peak_span_ms);
// The dmon method's figure: the mean of the readings of GPU position `gpu` and counter c whose midpoint
// lies in [start, end] (a rate; no bytes). A pass over every reading (any order): for one window.
SourceFigure dmonFigure(const std::vector<MeterDmonSample>& dmon, int gpu, MeterCounter c, int64_t start, int64_t end);

// Reads of each kind on GPU position `gpu` whose midpoint lies in [start, end]: the series' rows by
// group, the dmon readings as calls. A pass over both (any order): for one window.
std::array<int64_t, kMeterReadKinds> readsInside(const Series& s, const std::vector<MeterDmonSample>& dmon, int gpu,
                                                 int64_t start, int64_t end);

// Where a read is counted: the midpoint of the call.
inline int64_t readMidNs(int64_t t_before_ns, int64_t t_after_ns) {
  return t_before_ns + (t_after_ns - t_before_ns) / 2;
}

// The midpoints of one GPU's reads of each kind, each kind sorted, so that readsInside() costs a
// bisection per kind instead of a pass over the series (a series holds its groups' rows interleaved as
// their rings were drained, so its rows are not in time order). A sampler keeps one beside each series.
struct ReadIndex {
  std::array<std::vector<int64_t>, kMeterReadKinds> mids;
  // One more read, at its sorted place: a push_back for reads that come in time order, as each
  // group's do (one thread reads a group, one call after the other).
  void add(MeterReadKind kind, int64_t mid_ns);
};
// The series' rows by group (the kinds kPcie and kNvlink).
ReadIndex indexReads(const Series& s);
// The same count as readsInside(s, {}, gpu, start, end) for the series `index` was made of.
std::array<int64_t, kMeterReadKinds> readsInside(const ReadIndex& index, int64_t start, int64_t end);

// Dmon readings in time order (their midpoints never decrease: one thread makes them one call after
// the other, as the dmon source does, and a recording keeps that order): [first, last) holds those
// whose midpoint lies in [start, end], found by bisection, so that a window costs the readings around it.
struct DmonRange {
  const MeterDmonSample *first = nullptr, *last = nullptr;
};
DmonRange dmonReadingsIn(const std::vector<MeterDmonSample>& time_ordered, int64_t start, int64_t end);
// The dmon figure and the dmon calls of GPU position `gpu` over those readings (what dmonFigure and
// readsInside give over every reading).
SourceFigure dmonFigure(DmonRange r, int gpu, MeterCounter c);
int64_t dmonCalls(DmonRange r, int gpu);

// What `reads` reads of each kind added to counter c at the calibrated costs, with the calibration's
// spread; nullopt when a kind that was read has no cost for c.
std::optional<OwnBytes> ownOfReads(const MeterGpuCalibration& cal, int c,
                                   const std::array<int64_t, kMeterReadKinds>& reads);

// ---- once for every source ---------------------------------------------------------------------

// A figure as a window reports it: net of `own` (nullopt: gross), bounds widened by own's spread,
// mean = bytes / duration (a rate source's own mean where it has no bytes), share of the ceiling.
MeterFigure netFigure(const SourceFigure& f, const std::optional<OwnBytes>& own, double duration_s,
                      std::optional<double> ceiling_mbps);

// A window over every GPU from `sources` (the first one's figures fill the cells, the others' stand
// beside them with their ratio to it), each figure net of every source's own traffic in the window.
MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<const Source*>& sources, const std::vector<MeterGpu>& gpus,
                          double peak_span_ms);

// The same from recorded NVML series (and dmon readings beside them where `dmon` is not empty), made
// net at `calibration` where it is calibrated: what a recorded run or a test replays.
MeterWindow computeWindow(const std::string& name, int repetition, int64_t start, int64_t end,
                          const std::vector<Series>& series, const std::vector<MeterGpu>& gpus,
                          const std::vector<MeterDmonSample>& dmon, double peak_span_ms,
                          const MeterCalibration* calibration = nullptr);

// One counter's cell from a recorded series, gross (the counter difference as counted).
MeterCell computeCell(const Series& s, MeterCounter c, int64_t start, int64_t end, double peak_span_ms,
                      std::optional<double> ceiling_mbps);

// The verdict of a quiescing interval from its window. pids[k] lists the processes on GPU k
// (nullopt: could not list); own_pids are ours (this process, an engine's server) and do not count.
QuiesceRecord evaluateQuiesce(const MeterWindow& idle, const std::vector<MeterGpu>& gpus, double threshold_mbps,
                              const std::vector<std::optional<std::vector<unsigned>>>& pids,
                              const std::vector<unsigned>& own_pids);

}  // namespace tpscope::detail
