// SPDX-License-Identifier: Apache-2.0
// control.h - window marks: the bookkeeping of open windows, and the control pipe protocol.
//
// Protocol (one line each, UTF-8, '\n'-terminated, written to the FIFO named by TPSCOPE_METER_PIPE):
//   begin NAME     opens window NAME at the moment tpscope reads the line
//   end NAME       closes it
// NAME is the rest of the line with surrounding blanks removed (1-200 bytes of UTF-8, spaces allowed).
// Blank lines and lines starting with '#' are ignored. Anything else is a malformed line: a
// warning on stderr, never a crash. A writer that opens, writes one line and closes (`echo begin x
// > "$TPSCOPE_METER_PIPE"`) is fine: tpscope holds the FIFO open itself, so it never sees EOF.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tpscope::detail {

struct ControlLine {
  enum class Kind { kBegin, kEnd, kIgnore, kMalformed } kind = Kind::kIgnore;
  std::string name;   // for kBegin / kEnd
  std::string error;  // for kMalformed: what is wrong, in words
};
ControlLine parseControlLine(std::string_view line);

// A window that has been closed.
struct ClosedWindow {
  std::string name;
  int repetition = 0;
  int64_t start_ns = 0, end_ns = 0;
};

// Open windows by name. Not thread-safe: the owner locks.
class WindowBook {
 public:
  // Error text when `name` is empty or already open.
  std::optional<std::string> begin(const std::string& name, int64_t t);
  // Error text when `name` is not open, or t precedes its start.
  std::optional<std::string> end(const std::string& name, int64_t t, ClosedWindow* out);
  // A window given whole (start, end); error text when end < start or the name is empty.
  std::optional<std::string> add(const std::string& name, int64_t start, int64_t end, ClosedWindow* out);
  // Closes every open window at t (in name order).
  std::vector<ClosedWindow> closeAll(int64_t t);
  size_t openCount() const { return open_.size(); }

 private:
  ClosedWindow close(const std::string& name, int64_t start, int64_t end);
  std::map<std::string, int64_t> open_;
  std::map<std::string, int> repetitions_;
};

// The longest line the control pipe hands over whole; longer ones are cut to it (and read as malformed).
constexpr size_t kMaxControlLine = 4096;

// Bytes as lines, the same however the reads cut them: each '\n' ends a line (not part of it; empty
// lines are lines). A line longer than `max_line` bytes is handed over cut to that length as soon as
// it is that long, and the rest of it, up to its '\n', is dropped, so no part of an overlong line reads
// as a line of its own. Holds at most max_line bytes between calls. The control pipe reads its FIFO
// this way; the engines read a server's event stream this way.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line = kMaxControlLine) : max_line_(max_line) {}
  // Hands each line that `bytes` completes (or cuts) to `each`, in order.
  void feed(std::string_view bytes, const std::function<void(const std::string&)>& each);
  // The last line when the bytes ended without a '\n' (nullopt when there is none); starts afresh.
  std::optional<std::string> finish();
  size_t cutLines() const { return cut_; }  // lines handed over cut so far

 private:
  size_t max_line_;
  std::string pending_;
  bool dropping_ = false;  // inside an overlong line already handed over
  size_t cut_ = 0;
};

// A FIFO in a fresh private folder, read by a thread that hands each line (LineSplitter) to a callback
// with the monotonic time it was read.
class ControlPipe {
 public:
  using Callback = std::function<void(const std::string& line, int64_t t_ns)>;
  ControlPipe() = default;
  ~ControlPipe();
  ControlPipe(const ControlPipe&) = delete;
  ControlPipe& operator=(const ControlPipe&) = delete;
  // Creates the FIFO and starts the reader. false with *error on failure.
  bool open(Callback cb, std::string* error);
  // Reads what is left in the FIFO, stops the reader, removes the FIFO and its folder.
  void close();
  const std::string& path() const { return path_; }

 private:
  void run();
  Callback cb_;
  std::string dir_, path_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};  // a self-pipe that tells the reader to finish
  std::thread thread_;
};

}  // namespace tpscope::detail
