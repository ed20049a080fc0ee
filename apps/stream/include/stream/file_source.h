// stream/file_source.h: a query's input from files, binary or CSV.
//
//   ss::FileInput<Bid> in("/data/bids-{worker}.bin", ss::FileFormat::kBinary);
//   auto query = ss::from<Bid>(in.factory()).window(...)...;
//
// Where worker g of W finds its records:
//   - a pattern with "{worker}": the file with g in its place, read whole
//     (a file per worker, as `sluice-stream --input-dir` writes them);
//   - a plain path: one file that all workers share: of a binary file,
//     records [n*g/W, n*(g+1)/W); of a CSV file, the lines that begin in the
//     g-th of W equal byte ranges of its body. Every record is read by
//     exactly one worker either way, in file order.
// Binary files are records of sizeof(Rec) back to back (a size that is not a
// multiple of it is an error). CSV files have a header line, then one record
// per line, turned into a record by the caller's parse function (false: the
// line is malformed); no field may hold a line break.
//
// A worker's records are read into memory when its part is first asked for
// (before the timed run, as generated input is), and kept for the other
// callers (the single-threaded reference asks for every worker's part).
// Errors throw std::runtime_error naming the file and, for a malformed CSV
// line, its byte offset.
//
// Thread safety: part() may be called from several threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sluice::stream {

enum class FileFormat : uint8_t { kBinary, kCsv };

// Streams records already in memory (one worker's part).
template <class Rec>
class MemorySource {
 public:
  explicit MemorySource(std::shared_ptr<const std::vector<Rec>> data) : data_(std::move(data)) {}
  size_t operator()(std::span<Rec> out) {
    const size_t n = std::min(out.size(), data_->size() - pos_);
    std::copy_n(data_->data() + pos_, n, out.data());
    pos_ += n;
    return n;
  }
  // The next at most `max` records in place (the engine's zero-copy path).
  std::span<const Rec> view(size_t max) {
    const size_t n = std::min(max, data_->size() - pos_);
    const std::span<const Rec> out(data_->data() + pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::shared_ptr<const std::vector<Rec>> data_;
  size_t pos_ = 0;
};

namespace detail {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

inline FilePtr open_input(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error("cannot open the input file " + path);
  return f;
}

inline uint64_t file_size(FILE* f, const std::string& path) {
  if (std::fseek(f, 0, SEEK_END) != 0) throw std::runtime_error("cannot seek in " + path);
  const long n = std::ftell(f);
  if (n < 0) throw std::runtime_error("cannot size " + path);
  return static_cast<uint64_t>(n);
}

// Bytes [from, to) of the file.
inline std::string read_range(FILE* f, const std::string& path, uint64_t from, uint64_t to) {
  std::string out(to - from, '\0');
  if (std::fseek(f, static_cast<long>(from), SEEK_SET) != 0 ||
      (!out.empty() && std::fread(out.data(), 1, out.size(), f) != out.size())) {
    throw std::runtime_error("cannot read " + path);
  }
  return out;
}

// The offset just past the first '\n' at or after `at` (the size if none).
inline uint64_t next_line(FILE* f, const std::string& path, uint64_t at, uint64_t size) {
  while (at < size) {
    const std::string chunk = read_range(f, path, at, std::min(size, at + 65536));
    const size_t nl = chunk.find('\n');
    if (nl != std::string::npos) return at + nl + 1;
    at += chunk.size();
  }
  return size;
}

}  // namespace detail

template <class Rec>
class FileInput {
 public:
  static_assert(std::is_trivially_copyable_v<Rec>, "records are trivially copyable");
  using Parse = bool (*)(std::string_view line, Rec* out);

  // parse: required for kCsv.
  FileInput(std::string pattern, FileFormat format, Parse parse = nullptr)
      : state_(std::make_shared<State>()) {
    state_->pattern = std::move(pattern);
    state_->format = format;
    state_->parse = parse;
    if (format == FileFormat::kCsv && parse == nullptr) {
      throw std::invalid_argument("CSV input needs a parse function for its records");
    }
  }

  // The path worker g reads, and whether the file is shared by every worker.
  std::string path_of(uint32_t g, bool* shared) const {
    const std::string& p = state_->pattern;
    const size_t at = p.find("{worker}");
    *shared = at == std::string::npos;
    if (*shared) return p;
    return std::string(p).replace(at, 8, std::to_string(g));
  }

  // Worker g's records (read on first use).
  std::shared_ptr<const std::vector<Rec>> part(uint32_t g, uint32_t workers) const {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      auto it = state_->parts.find({g, workers});
      if (it != state_->parts.end()) return it->second;
    }
    auto data = std::make_shared<const std::vector<Rec>>(read(g, workers));
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->parts.emplace(std::make_pair(g, workers), data).first->second;
  }

  // A make_source for from<Rec>(...).
  auto factory() const {
    return [in = *this](uint32_t g, uint32_t workers) {
      return MemorySource<Rec>(in.part(g, workers));
    };
  }

 private:
  struct State {
    std::string pattern;
    FileFormat format = FileFormat::kBinary;
    Parse parse = nullptr;
    std::mutex mu;
    std::map<std::pair<uint32_t, uint32_t>, std::shared_ptr<const std::vector<Rec>>> parts;
  };

  std::vector<Rec> read(uint32_t g, uint32_t workers) const {
    bool shared = false;
    const std::string path = path_of(g, &shared);
    detail::FilePtr f = detail::open_input(path);
    const uint64_t size = detail::file_size(f.get(), path);
    if (state_->format == FileFormat::kBinary) {
      if (size % sizeof(Rec) != 0) {
        throw std::runtime_error(path + " holds " + std::to_string(size) +
                                 " bytes, not a whole number of " + std::to_string(sizeof(Rec)) +
                                 "-byte records");
      }
      const uint64_t n = size / sizeof(Rec);
      const uint64_t lo = shared ? n * g / workers : 0, hi = shared ? n * (g + 1) / workers : n;
      std::vector<Rec> out(hi - lo);
      const std::string bytes =
          detail::read_range(f.get(), path, lo * sizeof(Rec), hi * sizeof(Rec));
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    }
    // CSV: skip the header; with a shared file, the lines that begin in this worker's range.
    const uint64_t body = detail::next_line(f.get(), path, 0, size);
    const uint64_t n = size - body;
    uint64_t begin = body, end = size;
    if (shared) {
      const uint64_t lo = body + n * g / workers, hi = body + n * (g + 1) / workers;
      begin = lo == body ? body : detail::next_line(f.get(), path, lo - 1, size);
      end = hi == size ? size : detail::next_line(f.get(), path, hi - 1, size);
    }
    std::vector<Rec> out;
    if (begin >= end) return out;
    const std::string text = detail::read_range(f.get(), path, begin, end);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      std::string_view line(text.data() + pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!line.empty()) {
        Rec r{};
        if (!state_->parse(line, &r)) {
          throw std::runtime_error(path + " at byte " + std::to_string(begin + pos) +
                                   ": a malformed record: '" + std::string(line.substr(0, 80)) +
                                   "'");
        }
        out.push_back(r);
      }
      pos = nl + 1;
    }
    return out;
  }

  std::shared_ptr<State> state_;
};

// Writes records as a binary file (FileFormat::kBinary). Throws
// std::runtime_error naming the file if it cannot.
template <class Rec>
void write_binary(const std::string& path, std::span<const Rec> records) {
  detail::FilePtr f(std::fopen(path.c_str(), "wb"));
  if (!f || (!records.empty() &&
             std::fwrite(records.data(), sizeof(Rec), records.size(), f.get()) != records.size())) {
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace sluice::stream
