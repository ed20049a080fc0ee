#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <regex>
#include <stdexcept>
#include <thread>

#include "process.h"

namespace sluice::metrics_test {

using Clock = std::chrono::steady_clock;

std::string exchange(const std::string& host, uint16_t port, const std::vector<std::string>& pieces,
                     std::chrono::milliseconds pause, std::chrono::milliseconds limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (fd < 0 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port) + ": " + why);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0 && pause.count() > 0) std::this_thread::sleep_for(pause);
    // A server that already answered and closed may reset the rest: fine.
    (void)!::send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL);
  }
  std::string got;
  const auto until = Clock::now() + limit;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      ::close(fd);
      throw std::runtime_error("the server did not close the connection within " +
                               std::to_string(limit.count()) + " ms; got so far: " + got);
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EOF, or a reset after the response
  }
  ::close(fd);
  return got;
}

HttpResponse parse_response(const std::string& raw) {
  HttpResponse r;
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos)
    throw std::runtime_error("no end of the response head: " + raw);
  const std::string head = raw.substr(0, head_end);
  static const std::regex status_line(R"(HTTP/1\.1 ([1-5][0-9][0-9]) [^\r\n]*)");
  const size_t first_end = head.find("\r\n");
  const std::string first = head.substr(0, first_end);
  std::smatch m;
  if (!std::regex_match(first, m, status_line))
    throw std::runtime_error("bad status line: " + first);
  r.status = std::stoi(m[1]);
  for (size_t at = first_end; at != std::string::npos && at < head.size();) {
    const size_t from = at + 2;
    const size_t next = head.find("\r\n", from);
    const std::string line =
        head.substr(from, next == std::string::npos ? std::string::npos : next - from);
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon == 0)
      throw std::runtime_error("bad header line: " + line);
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (!r.headers.emplace(name, value).second)
      throw std::runtime_error("header repeated: " + name);
    at = next;
  }
  r.body = raw.substr(head_end + 4);
  auto length = r.headers.find("content-length");
  if (length == r.headers.end()) throw std::runtime_error("no Content-Length");
  if (std::stoull(length->second) != r.body.size()) {
    throw std::runtime_error("Content-Length " + length->second + " but " +
                             std::to_string(r.body.size()) + " bytes of body");
  }
  return r;
}

HttpResponse http_get(const std::string& host, uint16_t port, const std::string& path,
                      std::string* client) {
  std::string error;
  int status = 0;
  const std::optional<std::string> curl = proc::find_program("curl", &error, &status);
  const std::string url = "http://" + host + ":" + std::to_string(port) + path;
  if (curl) {
    if (client != nullptr) *client = "curl";
    // -i: the response head too; --http1.1: what the registry speaks.
    const proc::ProcessResult r = proc::run_process(
        {*curl, "--silent", "--show-error", "--include", "--http1.1", "--max-time", "15", url}, {},
        std::chrono::seconds(30));
    if (r.exit_code != 0) throw std::runtime_error("curl " + url + " failed: " + r.output);
    return parse_response(r.output);
  }
  if (client != nullptr) *client = "socket";
  return parse_response(exchange(host, port,
                                 {"GET " + path + " HTTP/1.1\r\nHost: " + host + ":" +
                                  std::to_string(port) + "\r\nUser-Agent: sluice-test\r\n\r\n"}));
}

bool metrics_address(const std::string& text, std::string* host, uint16_t* port) {
  static const std::regex re(R"(metrics at http://([0-9.]+):([0-9]+)/metrics)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return false;
  *host = m[1];
  *port = static_cast<uint16_t>(std::stoul(m[2]));
  return true;
}

}  // namespace sluice::metrics_test
