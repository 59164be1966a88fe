// SPDX-License-Identifier: Apache-2.0
// http.h - the few HTTP calls the engines make to a server on this machine (cpp-httplib underneath).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace tpscope::engine {

struct HttpResult {
  int status = 0;     // HTTP status; 0 when no response came (error says why)
  std::string body;   // the whole body (empty for a streamed POST: its data went to the callback)
  std::string error;  // transport failure in words: "connection refused", "read timed out"; "" otherwise
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
};

// The most bytes of a server's answer that are kept (a GET's body, a failed POST's body): its answers
// are a few KB; a larger GET body is a failed request (HttpResult::error), a larger error body is cut.
constexpr size_t kMaxAnswerBytes = size_t{16} << 20;

// GET http://host:port/path, giving up after timeout_s (connect and each read).
HttpResult httpGet(const std::string& host, int port, const std::string& path, double timeout_s);

// POST a JSON body; the response body is handed to on_data as it arrives (return false to stop reading).
// A non-2xx response's body is returned in HttpResult::body instead. read_timeout_s bounds the wait
// for each piece of the response, not the whole request.
HttpResult httpPostStream(const std::string& host, int port, const std::string& path, const std::string& json_body,
                          double read_timeout_s, const std::function<bool(const char* data, size_t size)>& on_data);

// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick); 0 on failure.
int freeLocalPort();
// Whether something accepts connections on host:port, or the port cannot be bound (in use).
bool portInUse(const std::string& host, int port);

}  // namespace tpscope::engine
