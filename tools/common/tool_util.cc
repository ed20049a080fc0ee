#include "tool_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>

#include "common/env.h"
#include "common/log.h"
#include "sluice/errors.h"

namespace sluice::tool {

std::string random_secret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(ErrorCode::kResource,
                  std::string("cannot generate a job secret: getrandom failed: ") +
                      std::strerror(errno) + "; pass one with --secret or SLUICE_SECRET");
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

bool parse_int(std::string_view text, int64_t min, int64_t max, int64_t* out) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || ptr != last || value < min || value > max) return false;
  *out = value;
  return true;
}

ToolEnvironment read_environment() {
  ToolEnvironment env;
  env.options = ClusterOptions::from_env();
  env.secret = detail::env::get("SLUICE_SECRET").value_or("");
  log::set_level(env.options.log_level);
  return env;
}

void split_host_port(const std::string& text, const char* what, uint16_t default_port,
                     std::string* host, uint16_t* port) {
  std::string h = text;
  std::string p;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || (close + 1 < text.size() && text[close + 1] != ':')) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + " '" + text + "' is not [IPV6] or [IPV6]:PORT");
    }
    h = text.substr(1, close - 1);
    has_port = close + 1 < text.size();
    if (has_port) p = text.substr(close + 2);
  } else if (size_t colon = text.find(':');
             colon != std::string::npos && text.find(':', colon + 1) == std::string::npos) {
    // Exactly one ':' is HOST:PORT; more than one is a bare IPv6 address.
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    has_port = true;
  }
  if (h.empty()) {
    throw Error(
        ErrorCode::kInvalidArgument,
        std::string(what) + " '" + text + "' names no host; give e.g. 10.0.0.1 or 10.0.0.1:29600");
  }
  int64_t port_value = default_port;
  if (has_port && !parse_int(p, 0, 65535, &port_value)) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " '" + text + "': port '" + p +
                                                 "' is not a number between 0 and 65535");
  }
  *host = h;
  *port = static_cast<uint16_t>(port_value);
}

std::string metrics_host_port(const std::string& text, std::string* host, uint16_t* port) {
  const std::string digits = !text.empty() && text.front() == ':' ? text.substr(1) : text;
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos) {
    split_host_port("127.0.0.1:" + digits, "--metrics", 0, host, port);
  } else {
    split_host_port(text, "--metrics", 0, host, port);
  }
  if (*host != "0.0.0.0" && *host != "::") return "";
  return "--metrics " + text +
         ": the metrics endpoint listens on every interface, and anyone who reaches it reads the "
         "job's flows and ranks; give this host's address on a trusted network instead, or "
         "127.0.0.1";
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Our stdout may be a non-blocking fd shared with the parent shell;
      // wait until it drains rather than dropping output.
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig); abbrev != nullptr)
    return std::string("SIG") + abbrev;
  return "SIG" + std::to_string(sig);
}

void ensure_stdio_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (opened >= 0 && opened != fd) {
        ::dup2(opened, fd);
        ::close(opened);
      }
    }
  }
}

}  // namespace sluice::tool
