// stream/sinks.h: where a query's rows go. A sink is any callable
// sink(uint32_t worker, const Row<R>&), called by the worker that led the
// window's partition (several workers call it at once, each with its own
// index). These are the stock ones: a user callable made safe with a lock,
// a CSV file per worker, and stdout.
//
// Thread safety: each sink here may be called from every worker at once.
// Ownership: CsvSink owns its files until it is destroyed (closing them).
#pragma once

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
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

// Writes a row as a CSV line without its line end:
// window_start,window_end,key,value (a record value takes several columns).
template <class R>
void write_csv_row(FILE* f, const Row<R>& row) {
  std::fprintf(f, "%" PRId64 ",%" PRId64 ",%" PRIu64 ",", row.start, row.end, row.key);
  write_csv_value(f, row.value);
}

// A row's CSV line in memory (write_csv_row), for sinks that keep or send
// rows as text: one growing buffer, reused row after row. One per thread.
class RowText {
 public:
  RowText() : mem_(open_memstream(&buf_, &size_)) {
    if (mem_ == nullptr) throw std::runtime_error("open_memstream failed");
  }
  ~RowText() {
    std::fclose(mem_);
    std::free(buf_);
  }
  RowText(const RowText&) = delete;
  RowText& operator=(const RowText&) = delete;
  // The row's line; valid until the next call.
  template <class R>
  std::string_view format(const Row<R>& row) {
    std::rewind(mem_);
    write_csv_row(mem_, row);
    std::fflush(mem_);
    return {buf_, static_cast<size_t>(std::ftell(mem_))};
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  FILE* mem_;
};

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
//
// Transactional (for checkpoints, engine.h): a worker's rows are kept in
// memory until prepare(worker) appends them to its file and syncs it (at a
// checkpoint; it returns the file's length as the checkpoint's token);
// restore(worker, token) cuts the file back to a checkpoint's length ("":
// to the header alone), and commit() writes what the last checkpoint did
// not (at the end of a run that succeeded). Rows not written when the sink
// is destroyed are dropped: a restore brings them back.
class CsvSink {
 public:
  static constexpr const char* kHeader = "window_start,window_end,key,value\n";
  // The header of late records' files (--late-output): the window a record
  // was late for, its key and its event time.
  static constexpr const char* kLateHeader = "window_start,window_end,key,event_time\n";
  // Opens the files of workers [first, first + count). Throws
  // std::runtime_error naming a file that cannot be created.
  // header: the files' first line (with its line end).
  CsvSink(const std::string& pattern, uint32_t first, uint32_t count, bool transactional = false,
          const char* header = kHeader)
      : first_(first), transactional_(transactional), header_(header) {
    for (uint32_t w = first; w < first + count; ++w) {
      const std::string path = path_of(pattern, w);
      FILE* f = std::fopen(path.c_str(), transactional ? "a" : "w");
      if (f == nullptr) throw std::runtime_error("cannot create the CSV output file " + path);
      if (!transactional) std::fputs(header_, f);
      files_.emplace_back(f);
      paths_.push_back(path);
      pending_.emplace_back();
      if (transactional) text_.push_back(std::make_unique<RowText>());
    }
  }
  static std::string path_of(const std::string& pattern, uint32_t worker) {
    const size_t at = pattern.find("{worker}");
    if (at == std::string::npos) return pattern + "." + std::to_string(worker);
    return pattern.substr(0, at) + std::to_string(worker) + pattern.substr(at + 8);
  }
  template <class R>
  void operator()(uint32_t worker, const Row<R>& row) {
    const uint32_t i = worker - first_;
    if (!transactional_) {
      write_csv_row(files_[i].get(), row);
      std::fputc('\n', files_[i].get());
      return;
    }
    // The row's text, kept until the next checkpoint.
    pending_[i].append(text_[i]->format(row)).push_back('\n');
  }
  std::string prepare(uint32_t worker, uint64_t /*checkpoint*/ = 0) {
    const uint32_t i = worker - first_;
    FILE* f = files_[i].get();
    const std::string& rows = pending_[i];
    if ((!rows.empty() && std::fwrite(rows.data(), 1, rows.size(), f) != rows.size()) ||
        std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) {
      throw std::runtime_error("cannot write the CSV output file " + paths_[i]);
    }
    pending_[i].clear();
    return std::to_string(std::ftell(f));
  }
  void restore(uint32_t worker, const std::string& token) {
    const uint32_t i = worker - first_;
    FILE* f = files_[i].get();
    const long len = token.empty() ? 0 : std::stol(token);
    std::fflush(f);
    if (::ftruncate(fileno(f), len) != 0 || std::fseek(f, 0, SEEK_END) != 0)
      throw std::runtime_error("cannot cut " + paths_[i] + " back to its checkpoint");
    if (token.empty()) std::fputs(header_, f);
    pending_[i].clear();
  }
  void commit() {
    for (uint32_t i = 0; i < files_.size(); ++i) {
      if (transactional_) prepare(first_ + i);
    }
  }

 private:
  struct Close {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  uint32_t first_;
  bool transactional_;
  const char* header_;
  std::vector<std::unique_ptr<FILE, Close>> files_;
  std::vector<std::string> paths_;
  std::vector<std::string> pending_;            // transactional: rows since the last checkpoint
  std::vector<std::unique_ptr<RowText>> text_;  // transactional: per worker
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
