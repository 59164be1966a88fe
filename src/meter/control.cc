// SPDX-License-Identifier: Apache-2.0
// control.cc - the control-pipe protocol, window bookkeeping and the FIFO reader thread.
#include "meter/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/utf8.h"
#include "meter/source.h"

namespace tpscope::detail {

namespace {
constexpr size_t kMaxName = 200;

std::string_view trim(std::string_view s) {
  const char* blanks = " \t\r";
  const size_t a = s.find_first_not_of(blanks);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(blanks) - a + 1);
}
}  // namespace

ControlLine parseControlLine(std::string_view raw) {
  ControlLine out;
  std::string_view line = trim(raw);
  if (line.empty() || line.front() == '#') return out;
  const size_t space = line.find_first_of(" \t");
  const std::string_view verb = line.substr(0, space);
  const std::string_view name = space == std::string_view::npos ? std::string_view{} : trim(line.substr(space));
  out.kind = ControlLine::Kind::kMalformed;
  if (verb != "begin" && verb != "end") {
    out.error = "unknown command '" + std::string(verb.substr(0, 40)) + "' (expected 'begin NAME' or 'end NAME')";
    return out;
  }
  if (name.empty()) {
    out.error = "'" + std::string(verb) + "' needs a window name";
    return out;
  }
  if (name.size() > kMaxName) {
    out.error = "window name longer than " + std::to_string(kMaxName) + " bytes";
    return out;
  }
  for (char ch : name) {
    if (static_cast<unsigned char>(ch) < 0x20) {
      out.error = "window name contains a control character";
      return out;
    }
  }
  if (!isUtf8(name)) {  // names are written into JSON records
    out.error = "window name is not UTF-8";
    return out;
  }
  out.kind = verb == "begin" ? ControlLine::Kind::kBegin : ControlLine::Kind::kEnd;
  out.name = std::string(name);
  return out;
}

void LineSplitter::feed(std::string_view bytes, const std::function<void(const std::string&)>& each) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const std::string_view part = bytes.substr(0, nl);
    if (!dropping_) {
      const size_t room = max_line_ - pending_.size();
      pending_.append(part.substr(0, room));
      if (part.size() > room) {  // cut: hand it over now, drop the rest up to its '\n'
        ++cut_;
        each(pending_);
        pending_.clear();
        dropping_ = true;
      }
    }
    if (nl == std::string_view::npos) return;
    if (!dropping_) each(pending_);
    pending_.clear();
    dropping_ = false;
    bytes.remove_prefix(nl + 1);
  }
}

std::optional<std::string> LineSplitter::finish() {
  std::optional<std::string> last;
  if (!dropping_ && !pending_.empty()) last = std::move(pending_);
  pending_.clear();
  dropping_ = false;
  return last;
}

std::optional<std::string> WindowBook::begin(const std::string& name, int64_t t) {
  if (name.empty()) return "a window needs a name";
  if (open_.count(name)) return "window '" + name + "' is already open";
  open_[name] = t;
  return std::nullopt;
}

std::optional<std::string> WindowBook::end(const std::string& name, int64_t t, ClosedWindow* out) {
  auto it = open_.find(name);
  if (it == open_.end()) return "window '" + name + "' is not open";
  if (t < it->second) return "window '" + name + "' ends before it began";
  *out = close(name, it->second, t);
  open_.erase(it);
  return std::nullopt;
}

std::optional<std::string> WindowBook::add(const std::string& name, int64_t start, int64_t end, ClosedWindow* out) {
  if (name.empty()) return "a window needs a name";
  if (end < start) return "window '" + name + "' ends before it begins";
  *out = close(name, start, end);
  return std::nullopt;
}

std::vector<ClosedWindow> WindowBook::closeAll(int64_t t) {
  std::vector<ClosedWindow> out;
  for (const auto& [name, start] : open_) out.push_back(close(name, start, std::max(t, start)));
  open_.clear();
  return out;
}

ClosedWindow WindowBook::close(const std::string& name, int64_t start, int64_t end) {
  ClosedWindow w;
  w.name = name;
  w.repetition = repetitions_[name]++;
  w.start_ns = start;
  w.end_ns = end;
  return w;
}

ControlPipe::~ControlPipe() { close(); }

bool ControlPipe::open(Callback cb, std::string* error) {
  cb_ = std::move(cb);
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tpscope-meter-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    *error = "cannot create a folder for the control pipe in " + templ + ": " + std::strerror(errno);
    return false;
  }
  dir_ = templ;
  path_ = dir_ + "/control";
  if (mkfifo(path_.c_str(), 0600) != 0) {
    *error = "cannot create the control pipe " + path_ + ": " + std::strerror(errno);
    close();
    return false;
  }
  // O_RDWR on a FIFO (Linux): we are a writer too, so open() does not wait for one and read()
  // never sees EOF when a client closes after its line.
  fd_ = ::open(path_.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0 || pipe2(wake_, O_CLOEXEC) != 0) {
    *error = "cannot open the control pipe " + path_ + ": " + std::strerror(errno);
    close();
    return false;
  }
  thread_ = std::thread([this] { run(); });
  return true;
}

void ControlPipe::run() {
  LineSplitter lines;
  char buf[4096];
  bool finishing = false;
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    // After the wake-up, one more non-blocking pass drains lines already in the FIFO.
    int n = poll(fds, 2, finishing ? 0 : -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (fds[1].revents) finishing = true;
    ssize_t got = 0;
    while ((got = ::read(fd_, buf, sizeof(buf))) > 0) {
      const int64_t t = monotonicNs();
      lines.feed(std::string_view(buf, static_cast<size_t>(got)), [&](const std::string& line) { cb_(line, t); });
    }
    if (finishing && (n == 0 || !(fds[0].revents & POLLIN))) break;
  }
  if (std::optional<std::string> last = lines.finish()) cb_(*last, monotonicNs());  // a last line without '\n'
}

void ControlPipe::close() {
  if (thread_.joinable()) {
    const char x = 'x';
    (void)!::write(wake_[1], &x, 1);
    thread_.join();
  }
  for (int* fd : {&fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
  path_.clear();
  dir_.clear();
}

}  // namespace tpscope::detail
