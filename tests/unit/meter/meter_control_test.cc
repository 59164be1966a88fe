// SPDX-License-Identifier: Apache-2.0
// meter_control_test - the control-pipe protocol: parsing, window bookkeeping, and the FIFO reader.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <mutex>
#include <thread>

#include "meter/control.h"

namespace tpscope::detail {
namespace {

using Kind = ControlLine::Kind;

TEST(MeterControl, ParsesBeginAndEndWithNamesThatMayHaveSpaces) {
  ControlLine b = parseControlLine("begin prefill");
  EXPECT_EQ(b.kind, Kind::kBegin);
  EXPECT_EQ(b.name, "prefill");
  ControlLine e = parseControlLine("  end   decode step 3 \r");
  EXPECT_EQ(e.kind, Kind::kEnd);
  EXPECT_EQ(e.name, "decode step 3");
  EXPECT_EQ(parseControlLine("begin\tx").name, "x");
}

TEST(MeterControl, BlankLinesAndCommentsAreIgnored) {
  EXPECT_EQ(parseControlLine("").kind, Kind::kIgnore);
  EXPECT_EQ(parseControlLine("   ").kind, Kind::kIgnore);
  EXPECT_EQ(parseControlLine("# a note").kind, Kind::kIgnore);
}

TEST(MeterControl, MalformedLinesSayWhatIsWrong) {
  struct Case {
    std::string line, expect;
  } cases[] = {
      {"start x", "unknown command 'start'"},
      {"BEGIN x", "unknown command 'BEGIN'"},
      {"begin", "'begin' needs a window name"},
      {"end   ", "'end' needs a window name"},
      {"begin " + std::string(201, 'n'), "longer than 200"},
      {std::string("begin a\x01b"), "control character"},
  };
  for (const Case& c : cases) {
    ControlLine l = parseControlLine(c.line);
    EXPECT_EQ(l.kind, Kind::kMalformed) << c.line;
    EXPECT_NE(l.error.find(c.expect), std::string::npos) << l.error;
  }
}

TEST(MeterControl, BookPairsBeginsWithEndsAndCountsRepetitions) {
  WindowBook book;
  ClosedWindow w;
  EXPECT_FALSE(book.begin("a", 10));
  EXPECT_FALSE(book.begin("b", 15));  // overlapping windows of different names are fine
  EXPECT_TRUE(book.begin("a", 12));   // already open
  EXPECT_FALSE(book.end("a", 20, &w));
  EXPECT_EQ(w.name, "a");
  EXPECT_EQ(w.start_ns, 10);
  EXPECT_EQ(w.end_ns, 20);
  EXPECT_EQ(w.repetition, 0);
  EXPECT_TRUE(book.end("a", 25, &w));  // not open any more
  EXPECT_FALSE(book.begin("a", 30));
  EXPECT_FALSE(book.end("a", 40, &w));
  EXPECT_EQ(w.repetition, 1);
  EXPECT_TRUE(book.begin("", 1));
  EXPECT_TRUE(book.add("z", 10, 5, &w));  // ends before it begins
  std::vector<ClosedWindow> rest = book.closeAll(50);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].name, "b");
  EXPECT_EQ(rest[0].end_ns, 50);
  EXPECT_EQ(book.openCount(), 0u);
}

TEST(MeterControl, PipeDeliversLinesFromSeparateWritersInOrder) {
  ControlPipe pipe;
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<int64_t> times;
  std::string error;
  ASSERT_TRUE(pipe.open(
      [&](const std::string& l, int64_t t) {
        std::lock_guard<std::mutex> lock(mu);
        lines.push_back(l);
        times.push_back(t);
      },
      &error))
      << error;
  ASSERT_FALSE(pipe.path().empty());
  // Each writer opens, writes and closes, like `echo begin x > $TPSCOPE_METER_PIPE`.
  auto write = [&](const std::string& text) {
    int fd = ::open(pipe.path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  };
  write("begin a\n");
  write("end a\nbegin b\n");  // two lines in one write
  write("end ");              // a line split across writes
  write("b\n");
  write("no newline at the end");
  const std::string path = pipe.path();
  pipe.close();  // drains what is left, including the unterminated last line
  EXPECT_EQ(lines, (std::vector<std::string>{"begin a", "end a", "begin b", "end b", "no newline at the end"}));
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i], times[i - 1]);
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the FIFO is removed on close";
}

TEST(MeterControl, AnOverlongLineIsCutAndReportedNotBuffered) {
  ControlPipe pipe;
  std::vector<std::string> lines;
  std::string error;
  ASSERT_TRUE(pipe.open([&](const std::string& l, int64_t) { lines.push_back(l); }, &error));
  int fd = ::open(pipe.path().c_str(), O_WRONLY);
  std::string big = "begin " + std::string(10000, 'x');
  std::thread writer([&] { (void)!::write(fd, big.data(), big.size()); });
  writer.join();
  ::close(fd);
  pipe.close();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(parseControlLine(lines[0]).kind, Kind::kMalformed);
}

// Found by fuzz/meter/control_fuzz.cc: the rest of an overlong line read as a line of its own (here it
// opened a window nobody wrote), and whether a line was cut depended on where the reads fell.
TEST(MeterControl, TheRestOfAnOverlongLineIsNoLineOfItsOwn) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto each = [&](const std::string& l) { lines.push_back(l); };
  s.feed(std::string(4096, 'x') + std::string(4096, 'y'), each);  // two reads of the FIFO's size
  s.feed("begin z\nend a\n", each);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(4096, 'x'));
  EXPECT_EQ(lines[1], "end a");
  EXPECT_FALSE(s.finish());
  EXPECT_EQ(s.cutLines(), 1u);
}

// Found by fuzz/meter/control_fuzz.cc: a name that is not UTF-8 was accepted, and the JSON writer of
// `tpscope meter --format json` (and of the run folder) throws on it.
TEST(MeterControl, ANameThatIsNotUtf8IsMalformed) {
  const ControlLine c = parseControlLine(std::string("begin pre") + '\xff' + "fill");
  EXPECT_EQ(c.kind, Kind::kMalformed);
  EXPECT_EQ(c.error, "window name is not UTF-8");
  EXPECT_EQ(parseControlLine("begin d\xc3\xa9j\xc3\xa0").kind, Kind::kBegin);
}

TEST(MeterControl, LinesDoNotDependOnHowTheReadsFall) {
  const std::string bytes = "begin " + std::string(4200, 'x') + "\nend x\n";  // the fuzzer's seed, its first read 4096
  for (size_t first : {size_t{1}, size_t{4096}, bytes.size()}) {
    LineSplitter s;
    std::vector<std::string> lines;
    auto each = [&](const std::string& l) { lines.push_back(l); };
    s.feed(std::string_view(bytes).substr(0, first), each);
    s.feed(std::string_view(bytes).substr(first), each);
    ASSERT_EQ(lines.size(), 2u) << first;
    EXPECT_EQ(lines[0].size(), kMaxControlLine) << first;
    EXPECT_EQ(lines[1], "end x") << first;
  }
}

}  // namespace
}  // namespace tpscope::detail
