// stream/sinks.h: where a query's rows go. A sink is any callable
// sink(uint32_t worker, const Row<R>&), called by the worker that led the
// window's partition (several workers call it at once, each with its own
// index). These are the stock ones: a user callable made safe with a lock,
// a CSV file per worker, and stdout.
//
// Thread safety: each sink here may be called from every worker at once.
// Ownership: CsvSink owns its files until it is destroyed (closing them).
#pragma once

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "stream/window.h"

namespace sluice::stream {

// Writes a value as CSV text: integers exactly, floating point with 17
// significant digits (so a reader gets the same double back).
// A record (a row of arg_max or a join) writes its own fields, comma
// separated, with a member write_csv(FILE*).
template <class R>
void write_csv_value(FILE* f, const R& v) {
  if constexpr (requires { v.write_csv(f); }) {
    v.write_csv(f);
  } else if constexpr (std::is_floating_point_v<R>) {
    std::fprintf(f, "%.17g", static_cast<double>(v));
  } else if constexpr (std::is_signed_v<R>) {
    std::fprintf(f, "%" PRId64, static_cast<int64_t>(v));
  } else {
    std::fprintf(f, "%" PRIu64, static_cast<uint64_t>(v));
  }
}

// Calls `fn(row)` under a lock: for callables that are not thread-safe.
template <class F>
class LockedSink {
 public:
  explicit LockedSink(F fn) : fn_(std::move(fn)) {}
  template <class R>
  void operator()(uint32_t, const Row<R>& row) {
    std::lock_guard<std::mutex> lock(mu_);
    fn_(row);
  }

 private:
  F fn_;
  std::mutex mu_;
};

// One CSV file per worker, "window_start,window_end,key,value" with a
// header line (a record value takes several columns): `pattern` with "{worker}" replaced by the
// worker's global index (rank x threads + slot); without "{worker}", ".<worker>" is appended. Files
// are opened by the constructor, so that a bad path fails before the query starts.
class CsvSink {
 public:
  // Opens the files of workers [first, first + count). Throws
  // std::runtime_error naming a file that cannot be created.
  CsvSink(const std::string& pattern, uint32_t first, uint32_t count) : first_(first) {
    for (uint32_t w = first; w < first + count; ++w) {
      const std::string path = path_of(pattern, w);
      FILE* f = std::fopen(path.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot create the CSV output file " + path);
      std::fputs("window_start,window_end,key,value\n", f);
      files_.emplace_back(f);
    }
  }
  static std::string path_of(const std::string& pattern, uint32_t worker) {
    const size_t at = pattern.find("{worker}");
    if (at == std::string::npos) return pattern + "." + std::to_string(worker);
    return pattern.substr(0, at) + std::to_string(worker) + pattern.substr(at + 8);
  }
  template <class R>
  void operator()(uint32_t worker, const Row<R>& row) {
    FILE* f = files_[worker - first_].get();
    std::fprintf(f, "%" PRId64 ",%" PRId64 ",%" PRIu64 ",", row.start, row.end, row.key);
    write_csv_value(f, row.value);
    std::fputc('\n', f);
  }

 private:
  struct Close {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  uint32_t first_;
  std::vector<std::unique_ptr<FILE, Close>> files_;
};

// Prints "window [start, end) key K: value" lines to stdout.
class StdoutSink {
 public:
  template <class R>
  void operator()(uint32_t, const Row<R>& row) {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("window [%" PRId64 ", %" PRId64 ") key %" PRIu64 ": ", row.start, row.end, row.key);
    write_csv_value(stdout, row.value);
    std::fputc('\n', stdout);
  }

 private:
  std::mutex mu_;
};

// Discards rows (the engine still counts and checksums them).
struct NullSink {
  template <class R>
  void operator()(uint32_t, const Row<R>&) {}
};

}  // namespace sluice::stream
