// SPDX-License-Identifier: Apache-2.0
// control_fuzz.cc - the control pipe (src/meter/control.h): bytes as a FIFO delivers them, in reads of
// any size, cut into lines (LineSplitter), each line parsed (parseControlLine) and booked (WindowBook).
//
// Input: the first byte seeds the read sizes, the rest is what writers put into the FIFO.
// Contract: the lines do not depend on how the reads cut the bytes and are exactly the '\n'-separated
// pieces, each cut to kMaxControlLine; a begin/end names 1-200 bytes without control characters or
// outer blanks, is UTF-8 (it is written into JSON records) and "VERB NAME" parses back to the same; every
// window begun is closed once.
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "meter/control.h"

using tpscope::detail::ClosedWindow;
using tpscope::detail::ControlLine;
using tpscope::detail::kMaxControlLine;

namespace {

// What the lines must be: the pieces between '\n's, cut; an empty piece after the last '\n' is no line.
std::vector<std::string> expectedLines(std::string_view bytes) {
  std::vector<std::string> out;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    out.emplace_back(bytes.substr(0, std::min(nl, kMaxControlLine)));
    if (nl == std::string_view::npos) break;
    bytes.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t seed = data[0] | 1u;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  tpscope::detail::LineSplitter splitter;
  std::vector<std::string> lines;
  auto each = [&](const std::string& l) { lines.push_back(l); };
  for (size_t at = 0; at < bytes.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min<size_t>(bytes.size() - at, 1 + (seed >> 16) % 5000);
    splitter.feed(bytes.substr(at, n), each);
    at += n;
  }
  if (std::optional<std::string> last = splitter.finish()) lines.push_back(*last);
  FUZZ_CHECK(lines == expectedLines(bytes));

  tpscope::detail::WindowBook book;
  int64_t t = 0, opened = 0, closed = 0;
  for (const std::string& l : lines) {
    const ControlLine c = tpscope::detail::parseControlLine(l);
    ++t;
    if (c.kind == ControlLine::Kind::kMalformed) {
      FUZZ_CHECK(!c.error.empty());
      continue;
    }
    if (c.kind == ControlLine::Kind::kIgnore) continue;
    FUZZ_CHECK(!c.name.empty() && c.name.size() <= 200);
    FUZZ_CHECK(c.name.front() != ' ' && c.name.front() != '\t' && c.name.back() != ' ' && c.name.back() != '\t');
    for (char ch : c.name) FUZZ_CHECK(static_cast<unsigned char>(ch) >= 0x20);
    FUZZ_CHECK(tpscope::fuzz::dumpsAsJson(c.name));
    const bool begin = c.kind == ControlLine::Kind::kBegin;
    const ControlLine again = tpscope::detail::parseControlLine((begin ? "begin " : "end ") + c.name);
    FUZZ_CHECK(again.kind == c.kind && again.name == c.name);
    if (begin) {
      if (!book.begin(c.name, t)) ++opened;
    } else {
      ClosedWindow w;
      if (!book.end(c.name, t, &w)) {
        FUZZ_CHECK(w.name == c.name && w.start_ns <= w.end_ns);
        ++closed;
      }
    }
  }
  closed += static_cast<int64_t>(book.closeAll(t + 1).size());
  FUZZ_CHECK(opened == closed && book.openCount() == 0);
  return 0;
}
