// The registry's HTTP endpoint for Prometheus: GET /metrics answers the text
// exposition format (JobMetrics); it is driven by the registry's own poll
// loop, so a scrape reads the registry's state without a lock.
//
// A deliberately small HTTP/1.1 responder: one request per connection, then
// the connection closes (Connection: close). It reads the request head in as
// many pieces as the client sends it, answers GET and HEAD of /metrics (a
// query string is ignored) with 200, any other path with 404, any other
// method with 405, and anything that is not an HTTP/1.x request head (or one
// longer than 8 KiB) with 400. A client that has not sent a whole head within
// 5 s gets 408. At most 32 connections are open; a new one beyond that
// closes the oldest. Nothing a client sends can stop it or the registry.
//
// Thread safety: none; the registry's thread owns it.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sluice::control {

class MetricsHttp {
 public:
  using Clock = std::chrono::steady_clock;
  // Makes the exposition text; called once per scrape.
  using Render = std::function<std::string()>;

  // Binds and listens on host:port (port 0: any free port); throws
  // Error(kResource) naming the address on failure.
  MetricsHttp(const std::string& host, uint16_t port, Render render);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  uint16_t port() const { return port_; }
  // "host:port" ("[v6]:port").
  std::string address() const;

  // Appends the descriptors to wait for; on_poll() gets them back, with
  // their revents, in the same order.
  void add_pollfds(std::vector<pollfd>* fds);
  void on_poll(const pollfd* fds, Clock::time_point now);
  // When on_poll() must run again even if no descriptor is ready.
  Clock::time_point next_deadline() const;

 private:
  struct Conn;
  void accept_all(Clock::time_point now);
  void on_readable(Conn& c, Clock::time_point now);
  void respond(Conn& c, const std::string& head_text, Clock::time_point now);
  void answer(Conn& c, int status, const char* reason, const std::string& content_type,
              const std::string& body, bool head_only, const std::string& extra_headers,
              Clock::time_point now);
  void flush(Conn& c);

  std::string host_;
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  Render render_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::vector<uint64_t> polled_;  // connection ids in the order add_pollfds() listed them
};

}  // namespace sluice::control
