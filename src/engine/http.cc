// SPDX-License-Identifier: Apache-2.0
// http.cc - cpp-httplib's client, one connection per call (the calls are seconds apart).
#include "engine/http.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

namespace tpscope::engine {

namespace {

void timeouts(httplib::Client& c, double read_s) {
  const auto us = [](double s) { return std::chrono::microseconds(static_cast<int64_t>(s * 1e6)); };
  c.set_connection_timeout(us(std::min(read_s, 5.0)));
  c.set_read_timeout(us(read_s));
  c.set_write_timeout(us(std::min(read_s, 30.0)));
}

HttpResult fromResult(const httplib::Result& r) {
  HttpResult out;
  if (!r) {
    out.error = httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  return out;
}

}  // namespace

HttpResult httpGet(const std::string& host, int port, const std::string& path, double timeout_s) {
  httplib::Client c(host, port);
  timeouts(c, timeout_s);
  c.set_payload_max_length(kMaxAnswerBytes);
  return fromResult(c.Get(path));
}

HttpResult httpPostStream(const std::string& host, int port, const std::string& path, const std::string& json_body,
                          double read_timeout_s, const std::function<bool(const char*, size_t)>& on_data) {
  httplib::Client c(host, port);
  timeouts(c, read_timeout_s);
  // The status is known before the body: stream only a 2xx body, keep an error's body to report it.
  std::string error_body;
  bool streaming = true;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = json_body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    streaming = res.status >= 200 && res.status < 300;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, size_t, size_t) {
    if (!streaming) {
      error_body.append(data, std::min(size, kMaxAnswerBytes - std::min(kMaxAnswerBytes, error_body.size())));
      return true;
    }
    return on_data(data, size);
  };
  HttpResult out = fromResult(c.send(req));
  if (!streaming) out.body = error_body;
  return out;
}

int freeLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool portInUse(const std::string& host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool taken = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0;
  close(fd);
  return taken;
}

}  // namespace tpscope::engine
