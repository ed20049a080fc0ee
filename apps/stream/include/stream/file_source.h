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
// multiple of it is an error). CSV files hold the columns of the record's
// CsvSchema (stream/csv.h): a header line that names them (or none, if the
// input says so), then one record per line; no field may hold a line break,
// and a line longer than 64 KiB means the file is not CSV.
//
// A worker's records are read into memory when its part is first asked for
// (before the timed run, as generated input is), and kept for the other
// callers (the single-threaded reference asks for every worker's part).
// Errors throw std::runtime_error naming the file and, for CSV, the line
// (path:line:), the column and the value.
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
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "stream/csv.h"

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

// The longest CSV line read (a record's line is about 100 bytes); a longer
// one means the file is not CSV, and it is found out after reading a chunk.
inline constexpr size_t kMaxCsvLine = 65536;
inline constexpr uint64_t kCsvChunk = 1 << 20;

// The offset just past the first '\n' at or after `at` (the size if the
// file ends first). Throws if there is none within kMaxCsvLine bytes.
inline uint64_t line_end(FILE* f, const std::string& path, uint64_t at, uint64_t size) {
  const uint64_t to = std::min(size, at + kMaxCsvLine + 1);
  const std::string chunk = read_range(f, path, at, to);
  const size_t nl = chunk.find('\n');
  if (nl != std::string::npos) return at + nl + 1;
  if (to == size) return size;
  throw std::runtime_error(path + (at == 0 ? ":1" : " at byte " + std::to_string(at)) +
                           ": no line end within " + std::to_string(kMaxCsvLine) +
                           " bytes: not a CSV file" +
                           (chunk.find('\0') != std::string::npos
                                ? " (it holds NUL bytes; binary records need --input-format binary)"
                                : ""));
}

// The 1-based number of the line that begins at `offset` (for errors: it
// reads the file up to there).
inline uint64_t line_number(FILE* f, const std::string& path, uint64_t offset) {
  uint64_t line = 1;
  for (uint64_t at = 0; at < offset;) {
    const uint64_t to = std::min(offset, at + kCsvChunk);
    const std::string chunk = read_range(f, path, at, to);
    line += static_cast<uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
    at = to;
  }
  return line;
}

}  // namespace detail

template <class Rec>
class FileInput {
 public:
  static_assert(std::is_trivially_copyable_v<Rec>, "records are trivially copyable");

  // schema: required for kCsv (kept by pointer: it must outlive the
  // input); header: whether a CSV file's first line names its columns.
  FileInput(std::string pattern, FileFormat format, const CsvSchema<Rec>* schema = nullptr,
            bool header = true)
      : state_(std::make_shared<State>()) {
    state_->pattern = std::move(pattern);
    state_->format = format;
    state_->schema = schema;
    state_->header = header;
    if (format == FileFormat::kCsv && schema == nullptr) {
      throw std::invalid_argument("CSV input needs the schema of its records");
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
    const CsvSchema<Rec>* schema = nullptr;
    bool header = true;
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
    return read_csv(f.get(), path, size, shared ? g : 0, shared ? workers : 1);
  }

  // CSV: the header checked against the schema, then the lines that begin
  // in the g-th of `parts` equal byte ranges of the body, each a record.
  std::vector<Rec> read_csv(FILE* f, const std::string& path, uint64_t size, uint32_t g,
                            uint32_t parts) const {
    uint64_t body = 0;
    std::string header;
    if (state_->header) {
      if (size == 0) {
        throw std::runtime_error(path +
                                 " is empty: a CSV file starts with a header line naming its "
                                 "columns (" +
                                 CsvLayout<Rec>(*state_->schema, "", false).expected_columns() +
                                 ")");
      }
      body = detail::line_end(f, path, 0, size);
      header = detail::read_range(f, path, 0, body);
      if (!header.empty() && header.back() == '\n') header.pop_back();
      if (header.find('\0') != std::string::npos) {
        throw std::runtime_error(path +
                                 ":1: the header holds a NUL byte: not a CSV file (binary "
                                 "records need --input-format binary)");
      }
    }
    std::optional<CsvLayout<Rec>> layout;
    try {
      layout.emplace(*state_->schema, header, state_->header);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(path + ":1: " + e.what());
    }
    const uint64_t n = size - body;
    const uint64_t lo = body + n * g / parts, hi = body + n * (g + 1) / parts;
    const uint64_t begin = lo == body ? body : detail::line_end(f, path, lo - 1, size);
    const uint64_t end = hi == size ? size : detail::line_end(f, path, hi - 1, size);
    std::vector<Rec> out;
    // The range in chunks, so that a file that is not CSV (one huge line)
    // costs a bounded read before its error, not the whole file in memory.
    std::string text;
    uint64_t at = begin, text_at = begin;
    size_t pos = 0;
    while (true) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) {
        if (text.size() - pos > detail::kMaxCsvLine) {
          throw std::runtime_error(
              path + ":" + std::to_string(detail::line_number(f, path, text_at + pos)) +
              ": a line longer than " + std::to_string(detail::kMaxCsvLine) +
              " bytes: not a CSV file of " + std::string(state_->schema->name));
        }
        if (at < end) {
          text.erase(0, pos);
          text_at += pos;
          pos = 0;
          const uint64_t to = std::min(end, at + detail::kCsvChunk);
          text += detail::read_range(f, path, at, to);
          at = to;
          continue;
        }
        if (pos == text.size()) break;
        nl = text.size();  // the last line, without a line end
      }
      std::string_view line(text.data() + pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!line.empty()) {
        Rec r{};
        if (auto bad = layout->parse(line, &r)) {
          throw std::runtime_error(path + ":" +
                                   std::to_string(detail::line_number(f, path, text_at + pos)) +
                                   ": " + bad->message());
        }
        out.push_back(r);
      }
      pos = std::min(nl + 1, text.size());
      if (nl == text.size()) break;
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
