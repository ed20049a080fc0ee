// The tests' HTTP side of a scrape: a plain socket client that can send a
// request in pieces (or send garbage), a strict reader of the response, and
// a scrape through curl, the real HTTP client Prometheus users reach for,
// where it is installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::metrics_test {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// Connects to host:port (numeric IPv4), sends each of `pieces` in turn with
// `pause` between them, then reads until the server closes (at most
// `limit`). Returns every byte received. Throws std::runtime_error if it
// cannot connect or the server does not close in time.
std::string exchange(const std::string& host, uint16_t port, const std::vector<std::string>& pieces,
                     std::chrono::milliseconds pause = std::chrono::milliseconds(0),
                     std::chrono::milliseconds limit = std::chrono::seconds(15));

// Reads a whole HTTP/1.1 response strictly: status line, CRLF header lines,
// an empty line, and a body of exactly Content-Length bytes. Throws
// std::runtime_error saying what is wrong.
HttpResponse parse_response(const std::string& raw);

// GET http://host:port/path through curl when it is on PATH (through
// exchange() otherwise), parsed by parse_response. *client says which.
HttpResponse http_get(const std::string& host, uint16_t port, const std::string& path,
                      std::string* client = nullptr);

// "HOST:PORT" from the line "... metrics at http://HOST:PORT/metrics" in
// `text`; false if there is none yet.
bool metrics_address(const std::string& text, std::string* host, uint16_t* port);

}  // namespace sluice::metrics_test
