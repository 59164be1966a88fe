// SPDX-License-Identifier: Apache-2.0
// sse_fuzz.cc - llama-server's streamed /completion (src/engine/llama_server.h CompletionStream).
//
// Input: the first byte seeds the read sizes, the rest is the response body as the server streams it.
// Contract: the counts do not depend on how the reads cut the stream; tokens >= token events >= 0, the
// first event's tokens are among them, and the first edge is not after the last.
#include <string>

#include "engine/llama_server.h"
#include "fuzz_util.h"

using tpscope::engine::Completion;
using tpscope::engine::CompletionStream;

namespace {

struct Result {
  Completion c;
  bool stopped;
  std::string error;
};

Result stream(std::string_view body, uint32_t seed) {
  int64_t t = 0;
  CompletionStream s([&t] { return ++t; });
  for (size_t at = 0; at < body.size();) {
    size_t n = body.size() - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      n = std::min<size_t>(n, 1 + (seed >> 16) % 300);
    }
    s.feed(body.substr(at, n));
    at += n;
  }
  return {s.completion(), s.stopped(), s.error()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const Result whole = stream(body, 0), cut = stream(body, data[0] | 1u);
  const Completion& c = whole.c;
  FUZZ_CHECK(c.token_events >= 0 && c.tokens >= c.token_events);
  FUZZ_CHECK(c.first_tokens <= c.tokens && c.first_ns <= c.last_ns);
  FUZZ_CHECK((c.token_events == 0) == (c.tokens == 0));
  FUZZ_CHECK(cut.c.tokens == c.tokens && cut.c.first_tokens == c.first_tokens && cut.c.token_events == c.token_events);
  FUZZ_CHECK(cut.c.first_ns == c.first_ns && cut.c.last_ns == c.last_ns && cut.c.timings == c.timings);
  FUZZ_CHECK(cut.stopped == whole.stopped && cut.error == whole.error);
  return 0;
}
