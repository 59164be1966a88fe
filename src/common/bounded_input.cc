// SPDX-License-Identifier: Apache-2.0
// bounded_input.cc - regular files within a size cap, JSON within a depth limit.
#include "common/bounded_input.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace tpscope {

namespace {

// Closes a descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::string byteCount(size_t n) {
  return n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0 ? fmt::format("{} MiB", n >> 20)
                                                              : fmt::format("{} bytes", n);
}

// The 1-based line of byte `pos` of `text`.
size_t lineAt(std::string_view text, size_t pos) {
  size_t line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

// Where the nesting of `text` first goes deeper than max_depth, counting brackets outside strings; npos
// when it does not (the parser found it did, so for text the parser read that far this is exact).
size_t tooDeepAt(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// The number token `token` the parser could not hold (it is too large for a double), located in `text`
// where a value starts (after ':', '[' or ','), with the object key before it where there is one:
// "line 3: \"tok_s\" = 1e999" or "line 1: 1e999".
std::string nonFinite(std::string_view text, const std::string& token) {
  for (size_t at = text.find(token); at != std::string_view::npos; at = text.find(token, at + 1)) {
    size_t p = at;
    while (p > 0 && std::isspace(static_cast<unsigned char>(text[p - 1]))) --p;
    if (p > 0 && text[p - 1] != ':' && text[p - 1] != '[' && text[p - 1] != ',') continue;
    std::string key;
    if (p > 0 && text[p - 1] == ':') {
      size_t end = p - 1;  // just after the key's closing quote, before the ':'
      while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
      if (end > 1 && text[end - 1] == '"') {
        const size_t start = text.rfind('"', end - 2);
        if (start != std::string_view::npos) key = std::string(text.substr(start + 1, end - 2 - start));
      }
    }
    return fmt::format("line {}: {}{} is not a finite number", lineAt(text, at),
                       key.empty() ? "" : "\"" + key + "\" = ", token);
  }
  return fmt::format("{} is not a finite number", token);
}

// The parser's message without its "[json.exception.parse_error.101] " prefix.
std::string parserMessage(const nlohmann::json::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    const size_t end = m.find("] ");
    if (end != std::string::npos) m.erase(0, end + 2);
  }
  return m;
}

struct TooDeep {};
struct TooMany {};

}  // namespace

FileReadError readRegularFile(const std::string& path, size_t max_bytes, std::string* out, std::string* error) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused below.
  Fd f{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) {
    const int err = errno;
    *error = fmt::format("cannot open {}: {}", path, std::strerror(err));
    return err == ENOENT ? FileReadError::kMissing : FileReadError::kUnreadable;
  }
  struct stat st {};
  if (fstat(f.fd, &st) != 0) {
    *error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return FileReadError::kUnreadable;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = fmt::format("{} is not a regular file (a folder, FIFO, device or socket)", path);
    return FileReadError::kNotRegular;
  }
  auto tooLarge = [&] {
    *error = fmt::format("{} is larger than the {} tpscope reads of it", path, byteCount(max_bytes));
    return FileReadError::kTooLarge;
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return tooLarge();
  out->clear();
  out->reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(f.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
      return FileReadError::kUnreadable;
    }
    if (n == 0) break;
    if (out->size() + static_cast<size_t>(n) > max_bytes) return tooLarge();  // it grew while read
    out->append(buf, static_cast<size_t>(n));
  }
  return FileReadError::kNone;
}

// Counts what a document opens and holds on a first pass, so that the parse that builds it needs no
// callback: nlohmann's callback parser rescans a container for discarded values each time one of its
// elements closes, which is quadratic in a container of many objects (an array of 100,000 paths took 2 s).
class JsonLimits : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit JsonLimits(int max_depth) : max_depth_(max_depth) {}
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  // The depth of the array or object being opened (0 for the outermost); one at max_depth would be the
  // (max_depth + 1)-th level.
  bool open() {
    if (depth_++ >= max_depth_) throw TooDeep{};
    return value();
  }
  bool value() {
    if (++values_ > kMaxJsonValues) throw TooMany{};
    return true;
  }
  int max_depth_, depth_ = 0;
  size_t values_ = 0;
};

std::optional<nlohmann::json> parseJsonBounded(std::string_view text, std::string* error, int max_depth) {
  using nlohmann::json;
  try {
    JsonLimits limits(max_depth);
    json::sax_parse(text.begin(), text.end(), &limits);  // a syntax error: the parse below says where
    return json::parse(text.begin(), text.end());
  } catch (const TooDeep&) {
    const size_t at = tooDeepAt(text, max_depth);
    *error = fmt::format("{}arrays and objects nested deeper than {} levels",
                         at == std::string_view::npos ? "" : fmt::format("line {}: ", lineAt(text, at)), max_depth);
  } catch (const TooMany&) {
    *error = fmt::format("more than {} values in one document", kMaxJsonValues);
  } catch (const json::out_of_range& e) {
    // 406: a number literal beyond a double's range, the one way JSON text holds a non-finite number.
    const std::string m = parserMessage(e);
    const size_t first = m.find('\''), last = m.rfind('\'');
    *error = e.id == 406 && first != std::string::npos && last > first
                 ? nonFinite(text, m.substr(first + 1, last - first - 1))
                 : m;
  } catch (const json::exception& e) {
    *error = parserMessage(e);
  }
  return std::nullopt;
}

}  // namespace tpscope
