// stream/follow_source.h: a query's input from CSV files that grow while
// the job runs (as `tail -f` follows a log).
//
//   ss::FollowedInput<YsbEvent> in("/logs/ysb-{worker}.csv", &ss::ysb_csv_schema(),
//                                  /*header=*/true, [] { return sluice::stop_requested(); });
//   auto query = ss::from<YsbEvent>(in.factory()).window(...)...;
//
// Worker g follows the file with g in place of "{worker}" (a plain path:
// the one worker of a job of one follows it). It reads every complete line
// the file holds, then waits for more (10 ms at a time, so that the engine
// polls its flow meanwhile), until stop() returns true: then it reads what
// the file holds at that moment, the last line too if it has no line end
// yet, and its input ends. A line that is still being written (no line end)
// waits until it is complete. The header, the columns and every malformed
// line are as for FileInput's CSV (stream/csv.h): errors name the file,
// the line number, the column and the value.
//
// Checkpoints carry where a worker got to (byte offset and line number),
// and a restored job goes on from there: records are read exactly once,
// as long as what the file held is not rewritten. Each time a worker has
// read everything its file holds it says so once on stdout ("caught up
// with FILE: N records read"), and once more when it stops.
//
// FollowedCsvSource::connect reads the lines a TCP server sends instead
// (`sluice-stream --input-socket`, as Flink's socket text stream; no
// header): its input ends when the server closes the connection or at
// stop(). A socket cannot replay: a job restored from a checkpoint reads on
// from what the server sends next, so what came after the checkpoint is
// not read again (at most once for those records), and it says so.
//
// Thread safety: one source per worker thread; the factory may be shared.
#pragma once

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "stream/csv.h"

namespace sluice::stream {

template <class Rec>
class FollowedCsvSource {
 public:
  // idle_ms > 0: the source has a lane (engine.h) that counts as idle once
  // everything the file holds was read and no record came for idle_ms, so
  // that a quiet file does not hold every window back.
  FollowedCsvSource(const std::string& path, const CsvSchema<Rec>* schema, bool header,
                    std::function<bool()> stop, int64_t idle_ms = 0)
      : FollowedCsvSource(open_file(path), path, schema, header, std::move(stop), idle_ms,
                          /*socket=*/false) {}
  // A source of the lines a TCP server sends (no header: the schema's
  // columns in order), connected to "HOST:PORT". Its input ends when the
  // server closes the connection, or at stop(). It cannot go back: a
  // restored job reads on from what the server sends next (position() says
  // so; seek() only warns).
  static FollowedCsvSource connect(const std::string& address, const CsvSchema<Rec>* schema,
                                   std::function<bool()> stop, int64_t idle_ms = 0) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
      throw std::invalid_argument("--input-socket: '" + address + "' is not HOST:PORT");
    }
    const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      throw std::runtime_error("cannot resolve " + address + ": " + ::gai_strerror(rc));
    }
    int fd = -1, err = 0;
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        err = errno;
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0)
      throw std::runtime_error("cannot connect to " + address + ": " + std::strerror(err));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return FollowedCsvSource(fd, "socket " + address, schema, /*header=*/false, std::move(stop),
                             idle_ms, /*socket=*/true);
  }

  FollowedCsvSource(FollowedCsvSource&&) noexcept = default;
  FollowedCsvSource(const FollowedCsvSource&) = delete;
  FollowedCsvSource& operator=(const FollowedCsvSource&) = delete;
  FollowedCsvSource& operator=(FollowedCsvSource&&) = delete;

  // Up to out.size() records: 0 and !done() mean none has come yet.
  size_t operator()(std::span<Rec> out) {
    if (done_) return 0;
    if (!stopping_ && stop_ && stop_()) stopping_ = true;  // read to the end there is now
    size_t n = 0;
    bool more = true;
    while (n < out.size()) {
      size_t nl = buf_.find('\n', pos_);
      if (nl == std::string::npos) {
        if (buf_.size() - pos_ > kMaxLine) {
          throw std::runtime_error(where() + ": a line longer than " + std::to_string(kMaxLine) +
                                   " bytes: not a CSV file of " + std::string(schema_->name));
        }
        if (more && (more = read_more())) continue;
        if (!(stopping_ || closed_) || pos_ == buf_.size()) break;
        nl = buf_.size();  // ending: the last line, without a line end
      }
      std::string_view line(buf_.data() + pos_, nl - pos_);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!layout_) {
        make_layout(line);  // the header
      } else if (!line.empty()) {
        Rec r{};
        if (auto bad = layout_->parse(line, &r)) {
          throw std::runtime_error(where() + ": " + bad->message());
        }
        out[n++] = r;
      }
      pos_ = std::min(nl + 1, buf_.size());
      ++line_;
    }
    read_ += n;
    last_n_ = n;
    if (n > 0) {
      caught_up_ = false;
      if (idle_ns_ > 0) last_ns_ = steady_ns();
      if (zeros_.size() < n) zeros_.resize(n, 0);
    } else {
      caught_up_ = !more;
    }
    if (pos_ > buf_.size() / 2) {  // keep the buffer to what is not read yet
      buf_at_ += pos_;
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    if (n == 0) {
      if (stopping_ || closed_) {
        done_ = true;
        std::printf(stopping_ ? "sluice-stream: stopping the input from %s at %" PRIu64 " records\n"
                              : "sluice-stream: the input from %s ended (the sender closed "
                                "it) at %" PRIu64 " records\n",
                    path_.c_str(), read_);
        std::fflush(stdout);
      } else {
        if (read_ != reported_ || !said_caught_up_) {
          reported_ = read_;
          said_caught_up_ = true;
          std::printf("sluice-stream: caught up with %s: %" PRIu64 " records read\n", path_.c_str(),
                      read_);
          std::fflush(stdout);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return n;
  }

  // The input ended (stop() said so and the file's end was read).
  bool done() const { return done_; }

  // With idle_ms: one lane (engine.h), idle once everything there is was
  // read and no record came for idle_ms; without: no lanes (-1).
  int lanes() const { return idle_ns_ > 0 ? 1 : -1; }
  std::span<const uint32_t> batch_lanes() const {
    return std::span<const uint32_t>(zeros_.data(), last_n_);
  }
  void idle_lanes(std::vector<char>& idle) const {
    idle.assign(1, 0);
    if (idle_ns_ > 0) idle[0] = caught_up_ && steady_ns() - last_ns_ >= idle_ns_;
  }

  // Where the worker got to, "offset:line" (a checkpoint's input position,
  // engine.h); seek() goes back there.
  std::string position() const {
    if (socket_) return "socket";  // nothing to go back to
    return std::to_string(buf_at_ + pos_) + ":" + std::to_string(line_);
  }
  void seek(const std::string& position) {
    if (socket_) {
      std::fprintf(stderr,
                   "sluice-stream: %s cannot replay: what it sent after the checkpoint and "
                   "before the restore is not read again\n",
                   path_.c_str());
      return;
    }
    const size_t colon = position.find(':');
    if (colon == std::string::npos) {
      throw std::runtime_error("bad position '" + position + "' of followed file " + path_);
    }
    const uint64_t offset = std::stoull(position.substr(0, colon));
    if (header_ && !layout_ && offset > 0) {  // the header, before what follows it
      buf_at_ = 0;
      buf_.clear();
      pos_ = 0;
      line_ = 1;
      while (buf_.find('\n') == std::string::npos) {
        if (!read_more()) throw std::runtime_error(path_ + " lost its header line");
      }
      const size_t nl = buf_.find('\n');
      std::string_view h(buf_.data(), nl);
      if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
      make_layout(h);
    }
    buf_.clear();
    pos_ = 0;
    buf_at_ = offset;
    line_ = std::stoull(position.substr(colon + 1));
    done_ = stopping_ = false;
  }

 private:
  static constexpr size_t kMaxLine = 64 * 1024;
  static constexpr size_t kChunk = 256 * 1024;

  // A descriptor that closes itself, so that the source moves by default.
  struct Fd {
    explicit Fd(int v) : fd(v) {}
    Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
    Fd& operator=(Fd&&) = delete;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
    int fd;
  };

  FollowedCsvSource(int fd, std::string name, const CsvSchema<Rec>* schema, bool header,
                    std::function<bool()> stop, int64_t idle_ms, bool socket)
      : path_(std::move(name)),
        schema_(schema),
        header_(header),
        stop_(std::move(stop)),
        idle_ns_(idle_ms * 1'000'000),
        last_ns_(steady_ns()),
        fd_(fd),
        socket_(socket) {
    if (!header_) make_layout("");
  }
  static int open_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot follow " + path + ": " + std::strerror(errno));
    return fd;
  }

  // Appends what the file holds past the buffer (a socket: what has come);
  // false if nothing new.
  bool read_more() {
    if (closed_) return false;
    const size_t had = buf_.size();
    buf_.resize(had + kChunk);
    ssize_t got;
    do {
      got = socket_ ? ::recv(fd_.fd, buf_.data() + had, kChunk, 0)
                    : ::pread(fd_.fd, buf_.data() + had, kChunk, static_cast<off_t>(buf_at_ + had));
    } while (got < 0 && errno == EINTR);
    if (got < 0 && socket_ && (errno == EAGAIN || errno == EWOULDBLOCK))
      got = 0;
    else if (got == 0 && socket_)
      closed_ = true;
    if (got < 0) {
      buf_.resize(had);
      throw std::runtime_error("cannot read " + path_ + ": " + std::strerror(errno));
    }
    buf_.resize(had + static_cast<size_t>(got));
    if (got > 0 && std::memchr(buf_.data() + had, '\0', static_cast<size_t>(got)) != nullptr) {
      throw std::runtime_error(path_ + ": a NUL byte: not a CSV file");
    }
    return got > 0;
  }
  void make_layout(std::string_view header) {
    try {
      layout_.emplace(*schema_, header, header_);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path_ + ":1: " + e.what());
    }
  }
  std::string where() const { return path_ + ":" + std::to_string(line_); }
  static int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::string path_;
  const CsvSchema<Rec>* schema_;
  bool header_;
  std::function<bool()> stop_;
  int64_t idle_ns_ = 0;          // 0: no lane, never idle
  int64_t last_ns_ = 0;          // when the last record came (or the start)
  bool caught_up_ = false;       // the last call read everything there was
  std::vector<uint32_t> zeros_;  // batch_lanes(): every record in lane 0
  size_t last_n_ = 0;            // records the last call returned
  Fd fd_;
  std::optional<CsvLayout<Rec>> layout_;
  std::string buf_;      // read from the file, from offset buf_at_
  size_t pos_ = 0;       // the next line's start in buf_
  uint64_t buf_at_ = 0;  // buf_[0]'s offset in the file
  uint64_t line_ = 1;    // the line number of buf_[pos_]
  bool stopping_ = false, done_ = false;
  uint64_t read_ = 0, reported_ = 0;
  bool said_caught_up_ = false;
  bool socket_ = false;  // a TCP connection, not a file
  bool closed_ = false;  // the socket's sender closed it
};

// Every worker's FollowedCsvSource, by the path pattern.
template <class Rec>
class FollowedInput {
 public:
  FollowedInput(std::string pattern, const CsvSchema<Rec>* schema, bool header,
                std::function<bool()> stop, int64_t idle_ms = 0)
      : pattern_(std::move(pattern)),
        schema_(schema),
        header_(header),
        stop_(std::move(stop)),
        idle_ms_(idle_ms) {}

  // The file worker g of `workers` follows. Throws std::invalid_argument if
  // several workers would share a plain path.
  std::string path_of(uint32_t g, uint32_t workers) const {
    const size_t at = pattern_.find("{worker}");
    if (at == std::string::npos) {
      if (workers > 1) {
        throw std::invalid_argument(
            "following " + pattern_ + " with " + std::to_string(workers) +
            " workers: a growing file is followed by one worker; give each worker its own "
            "file ({worker} in the path) or run one worker");
      }
      return pattern_;
    }
    return std::string(pattern_).replace(at, 8, std::to_string(g));
  }

  // source(worker, workers), as from() takes it.
  auto factory() const {
    return [self = *this](uint32_t g, uint32_t workers) {
      return FollowedCsvSource<Rec>(self.path_of(g, workers), self.schema_, self.header_,
                                    self.stop_, self.idle_ms_);
    };
  }

 private:
  std::string pattern_;
  const CsvSchema<Rec>* schema_;
  bool header_;
  std::function<bool()> stop_;
  int64_t idle_ms_;
};

// Every worker's connection: worker g reads the g-th of the comma-separated
// HOST:PORT addresses, one per worker.
template <class Rec>
class SocketInput {
 public:
  SocketInput(const std::string& addresses, const CsvSchema<Rec>* schema,
              std::function<bool()> stop, int64_t idle_ms = 0)
      : schema_(schema), stop_(std::move(stop)), idle_ms_(idle_ms) {
    size_t at = 0;
    while (at <= addresses.size()) {
      size_t comma = addresses.find(',', at);
      if (comma == std::string::npos) comma = addresses.size();
      addresses_.push_back(addresses.substr(at, comma - at));
      at = comma + 1;
    }
  }

  // The address worker g of `workers` reads. Throws std::invalid_argument
  // unless there is one address per worker.
  const std::string& address_of(uint32_t g, uint32_t workers) const {
    if (addresses_.size() != workers) {
      throw std::invalid_argument("--input-socket names " + std::to_string(addresses_.size()) +
                                  " address(es) for " + std::to_string(workers) +
                                  " workers: give one HOST:PORT per worker, comma-separated");
    }
    return addresses_[g];
  }

  auto factory() const {
    return [self = *this](uint32_t g, uint32_t workers) {
      return FollowedCsvSource<Rec>::connect(self.address_of(g, workers), self.schema_, self.stop_,
                                             self.idle_ms_);
    };
  }

 private:
  std::vector<std::string> addresses_;
  const CsvSchema<Rec>* schema_;
  std::function<bool()> stop_;
  int64_t idle_ms_;
};

}  // namespace sluice::stream
