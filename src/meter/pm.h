// SPDX-License-Identifier: Apache-2.0
// pm.h - the PM-sampling counter source: the GPU counts PCIe bytes itself, one record per sampling
// interval (10 us - 1 ms), on its own clock.
//
// Pieces, each a plain function or class of recorded data (no threads, no hardware), unit-tested:
//   PmRecord         one decoded sample as the source returns it: the source clock, bytes per
//                    direction (CUPTI: pcie__read_bytes.sum = bytes the GPU receives = PCIe RX,
//                    pcie__write_bytes.sum = bytes it sends = PCIe TX).
//   ClockMap         the source clock -> the meter's monotonic clock, measured once at start.
//   PmSeriesBuilder  maps and appends records, drops the first record of the session (it starts
//                    before the configuration and ends at the start), and marks holes: a gap
//                    between two records (pmGapNs), or an overflow or failed decode, after which the
//                    session has nothing more (the hole runs to the end of time).
//   computePm        the bytes of a window: records inside count fully, the two edge records are
//                    prorated by time; the truth lies between the records inside only (low) and
//                    every record touching the window (high). A hole touching the window, or a
//                    window not covered by records, makes the figure incomplete.
// The sampler's own traffic (the records it writes to host memory, its decode calls) is a steady
// rate, measured at start over quiet intervals (pmQuietRate) and subtracted per window.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meter/meter.h"

namespace tpscope::detail {

// Direction index of PM bytes: [0] = PCIe TX (the GPU sends), [1] = PCIe RX (the GPU receives),
// the order of MeterCounter::kPcieTx / kPcieRx.
constexpr int kPmTx = 0, kPmRx = 1;

struct PmRecord {
  int64_t start_ns = 0, end_ns = 0;  // the source's clock (CUPTI: CLOCK_REALTIME nanoseconds)
  std::array<double, 2> bytes{};     // [kPmTx], [kPmRx]
};

// What one decode returned. overflow / error: the session ended (CUPTI refuses every later decode
// after an overflow); the records before it are still good.
struct PmBatch {
  std::vector<PmRecord> records;
  bool overflow = false;
  std::string error;  // empty: fine
};

// One GPU's PM session. decode() is called from one thread only.
class PmReader {
 public:
  virtual ~PmReader() = default;
  // The source clock now (CLOCK_REALTIME for CUPTI), read right beside monotonicNs() by ClockMap.
  virtual int64_t sourceNow() const = 0;
  // Starts sampling; false with *reason when it cannot.
  virtual bool start(std::string* reason) = 0;
  // Appends every record completed since the last call.
  virtual void decode(PmBatch* out) = 0;
  // Stops sampling (records completed before the call can still be decoded once more).
  virtual void stop() = 0;
};

// source clock - monotonic clock, measured once: the tightest of `tries` bracketed readings.
struct ClockMap {
  int64_t offset_ns = 0;
  int64_t toMonotonic(int64_t source_ns) const { return source_ns - offset_ns; }
  static ClockMap measure(const std::function<int64_t()>& source_now, const std::function<int64_t()>& monotonic_now,
                          int tries = 7);
};

// An interval without records: [from_ns, to_ns) in the monotonic clock; to_ns = INT64_MAX when
// the session ended there (overflow, failed decode).
struct PmHole {
  int64_t from_ns = 0, to_ns = 0;
  std::string why;  // "gap", "overflow", or the source's error
};

struct PmSeries {
  std::vector<MeterRecord> samples;  // monotonic clock, in time order
  std::vector<PmHole> holes;         // in time order, not overlapping (appendRecord, PmSeriesBuilder)
  bool ended = false;                // an overflow or a failed decode ended the session
};

// Records are back to back: a space between two longer than half an interval (and than 1 us, what the
// clock mapping may round) is a gap. The one rule for the series, the step records and the plots.
inline int64_t pmGapNs(int64_t interval_us) { return std::max<int64_t>(1000, interval_us * 500); }

// Appends one record already in the meter's clock, after the series' last: never overlapping it (a ns
// of rounding), and with a hole before it when the space since the last is longer than gap_ns.
void appendRecord(const MeterRecord& r, int64_t gap_ns, PmSeries* out);
// Records already in the meter's clock (a recorded step, a window's records) as a series, their gaps
// marked by the same rule.
PmSeries pmSeriesOf(const std::vector<MeterRecord>& records, int64_t gap_ns);

class PmSeriesBuilder {
 public:
  // gap_ns: a space between two records longer than this is a hole (pmGapNs).
  PmSeriesBuilder(int gpu, ClockMap map, int64_t gap_ns) : gpu_(gpu), map_(map), gap_ns_(gap_ns) {}
  void append(const PmBatch& batch, PmSeries* out);
  int64_t dropped() const { return dropped_; }  // records dropped (the session's first)

 private:
  int gpu_;
  ClockMap map_;
  int64_t gap_ns_;
  bool first_seen_ = false;
  int64_t dropped_ = 0;
};

// One direction of one GPU over one window.
struct PmFigure {
  double bytes = 0;          // prorated
  double low = 0, high = 0;  // records inside only / every record touching the window
  double edge_bytes = 0;     // max(bytes - low, high - bytes): the edge bound
  int samples = 0;           // records touching the window
  bool complete = false;     // covered by records, no hole touching it
  std::string why;           // what made it incomplete ("" when complete)
};
// `what` names the span in the reasons ("no PM records over the window").
PmFigure computePm(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns, const char* what = "the window");

// The median rate (bytes/s per direction) of the records over `slices` equal slices of [from, to];
// nullopt for a direction when the slices are not covered.
std::array<std::optional<double>, 2> pmQuietRate(const PmSeries& s, int64_t from_ns, int64_t to_ns, int slices = 5);

// The highest counted rate (MB/s) over any run of consecutive records inside [start, end] that spans
// at least peak_span_ms; nullopt when no run inside is that long.
std::optional<double> pmPeakMBps(const PmSeries& s, int dir, int64_t start_ns, int64_t end_ns, double peak_span_ms);

}  // namespace tpscope::detail
