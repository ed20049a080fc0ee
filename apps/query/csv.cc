#include "csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>
#include <vector>

namespace sluice::query {

namespace {

// An open file read with pread, closed on scope exit.
class File {
 public:
  explicit File(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY)) {
    if (fd_ < 0) throw CsvError(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw CsvError(path + ": cannot stat: " + std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  uint64_t size() const { return size_; }

  // Appends bytes [at, at + n) (clipped to the file) to `out`.
  void read(uint64_t at, uint64_t n, std::string* out) const {
    n = at >= size_ ? 0 : std::min(n, size_ - at);
    const size_t old = out->size();
    out->resize(old + n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r =
          ::pread(fd_, out->data() + old + got, n - got, static_cast<off_t>(at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw CsvError(path_ + ": cannot read: " + std::strerror(r < 0 ? errno : EIO));
      got += static_cast<size_t>(r);
    }
  }

  // The offset just past the first '\n' at or after `at` (size() if none).
  uint64_t next_line(uint64_t at) const {
    std::string buf;
    while (at < size_) {
      buf.clear();
      read(at, 64 * 1024, &buf);
      const size_t nl = buf.find('\n');
      if (nl != std::string::npos) return at + nl + 1;
      at += buf.size();
    }
    return size_;
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

// Splits one line into fields (quotes removed, "" unescaped). Returns
// false on a quote that does not close.
bool split_fields(std::string_view line, std::vector<std::string_view>* fields,
                  std::string* scratch, std::vector<std::pair<size_t, size_t>>* unescaped) {
  fields->clear();
  scratch->clear();
  unescaped->clear();
  size_t i = 0;
  while (true) {
    if (i < line.size() && line[i] == '"') {
      // A quoted field: up to the quote not followed by another.
      size_t j = i + 1;
      const size_t start = scratch->size();
      bool closed = false;
      while (j < line.size()) {
        if (line[j] == '"') {
          if (j + 1 < line.size() && line[j + 1] == '"') {
            scratch->push_back('"');
            j += 2;
            continue;
          }
          closed = true;
          ++j;
          break;
        }
        scratch->push_back(line[j++]);
      }
      if (!closed || (j < line.size() && line[j] != ',')) return false;
      unescaped->push_back({fields->size(), start});
      fields->push_back({});  // filled from scratch below (scratch may still grow)
      if (j == line.size()) break;
      i = j + 1;
    } else {
      const size_t comma = line.find(',', i);
      fields->push_back(line.substr(i, comma == std::string_view::npos ? line.npos : comma - i));
      if (comma == std::string_view::npos) break;
      i = comma + 1;
    }
  }
  // Point the quoted fields into scratch, now that it has stopped growing.
  for (size_t k = 0; k < unescaped->size(); ++k) {
    const auto [field, start] = (*unescaped)[k];
    const size_t end = k + 1 < unescaped->size() ? (*unescaped)[k + 1].second : scratch->size();
    (*fields)[field] = std::string_view(scratch->data() + start, end - start);
  }
  return true;
}

bool parse_int(std::string_view s, int64_t* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool parse_double(std::string_view s, double* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// Exact: "-12.3" with scale 2 is -1230. False on a malformed value, more
// than `scale` digits after the point, or overflow.
bool parse_decimal(std::string_view s, uint32_t scale, int64_t* out) {
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  const size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  const std::string_view frac = dot == s.npos ? std::string_view() : s.substr(dot + 1);
  if ((whole.empty() && frac.empty()) || frac.size() > scale) return false;
  uint64_t v = 0;
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  auto digit = [&](char c) {
    if (c < '0' || c > '9' || v > (limit - static_cast<uint64_t>(c - '0')) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
    return true;
  };
  for (char c : whole) {
    if (!digit(c)) return false;
  }
  for (size_t k = 0; k < scale; ++k) {
    if (!digit(k < frac.size() ? frac[k] : '0')) return false;
  }
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

bool parse_date(std::string_view s, int32_t* out) {
  if (s.empty()) {
    *out = kNullDate;
    return true;
  }
  int64_t y = 0, m = 0, d = 0;
  if (s.size() != 10 || s[4] != '-' || s[7] != '-' || !parse_int(s.substr(0, 4), &y) ||
      !parse_int(s.substr(5, 2), &m) || !parse_int(s.substr(8, 2), &d) || m < 1 || m > 12 ||
      d < 1) {
    return false;
  }
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (d > kDays[m - 1] + (m == 2 && leap ? 1 : 0)) return false;
  *out = days_from_civil(static_cast<int>(y), static_cast<unsigned>(m), static_cast<unsigned>(d));
  return true;
}

std::string_view trim_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string shown(std::string_view v) {
  std::string s(v.substr(0, 40));
  if (v.size() > 40) s += "...";
  return "'" + s + "'";
}

}  // namespace

Batch read_csv_part(const std::string& path, const Schema& schema, uint32_t part, uint32_t parts) {
  if (parts == 0 || part >= parts) {
    throw CsvError(path + ": part " + std::to_string(part) + " of " + std::to_string(parts));
  }
  const File file(path);
  // The header: the first line, naming the schema's columns in order.
  const uint64_t body = file.next_line(0);
  std::string header;
  file.read(0, body, &header);
  if (!header.empty() && header.back() == '\n') header.pop_back();
  std::vector<std::string_view> fields;
  std::string scratch;
  std::vector<std::pair<size_t, size_t>> quoted;
  std::string want;
  for (const Field& f : schema.fields()) want += (want.empty() ? "" : ",") + f.name;
  const std::string_view hl = trim_cr(header);
  if (!split_fields(hl, &fields, &scratch, &quoted) || fields.size() != schema.size() || [&] {
        for (size_t c = 0; c < fields.size(); ++c) {
          if (fields[c] != schema[c].name) return true;
        }
        return false;
      }()) {
    throw CsvError(path + ": the header is " + shown(hl) + ", expected '" + want + "'");
  }

  // This part's lines: those that begin in [lo, hi) of the body.
  const uint64_t n = file.size() - body;
  const uint64_t lo = body + n * part / parts, hi = body + n * (part + 1) / parts;
  const uint64_t begin = lo == body ? body : file.next_line(lo - 1);
  const uint64_t end = hi == file.size() ? hi : file.next_line(hi - 1);
  std::string text;
  if (begin < end) file.read(begin, end - begin, &text);

  Batch out(schema);
  size_t rows = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line = trim_cr(std::string_view(text).substr(pos, nl - pos));
    const uint64_t at = begin + pos;
    pos = nl + 1;
    if (line.empty()) continue;  // a blank line (a trailing one, mostly)
    auto where = [&] { return path + " at byte " + std::to_string(at) + ": "; };
    if (!split_fields(line, &fields, &scratch, &quoted)) {
      throw CsvError(where() + "a quoted field does not end (or a field follows its quote)");
    }
    if (fields.size() != schema.size()) {
      throw CsvError(where() + std::to_string(fields.size()) + " fields, expected " +
                     std::to_string(schema.size()) + " (" + want + ")");
    }
    for (size_t c = 0; c < fields.size(); ++c) {
      Column& col = out.column(c);
      const Field& f = schema[c];
      const std::string_view v = fields[c];
      auto bad = [&](const char* what) {
        throw CsvError(where() + "column '" + f.name + "': " + shown(v) + " is not " + what);
      };
      switch (f.type) {
        case Type::kInt64: {
          int64_t x = 0;
          if (!parse_int(v, &x)) bad("an integer");
          col.ints.push_back(x);
          break;
        }
        case Type::kDouble: {
          double x = 0;
          if (!parse_double(v, &x)) bad("a number");
          col.reals.push_back(x);
          break;
        }
        case Type::kDecimal: {
          int64_t x = 0;
          if (!parse_decimal(v, f.scale, &x)) {
            bad(("a decimal with at most " + std::to_string(f.scale) + " digits after the point")
                    .c_str());
          }
          col.ints.push_back(x);
          break;
        }
        case Type::kDate: {
          int32_t x = 0;
          if (!parse_date(v, &x)) bad("a date (YYYY-MM-DD, or empty for NULL)");
          col.days.push_back(x);
          break;
        }
        case Type::kString:
          if (v.size() > f.width) {
            bad(("a string of at most " + std::to_string(f.width) + " bytes").c_str());
          }
          col.push_string(v);
          break;
      }
    }
    ++rows;
  }
  out.set_rows(rows);
  return out;
}

void write_csv(const std::string& path, const Batch& batch) {
  std::ofstream f(path);
  std::string line;
  for (const Field& field : batch.schema().fields()) {
    line += line.empty() ? "" : ",";
    line += field.name;
  }
  line += '\n';
  f << line;
  for (size_t r = 0; r < batch.rows(); ++r) {
    line.clear();
    for (size_t c = 0; c < batch.num_columns(); ++c) {
      if (c != 0) line += ',';
      const Column& col = batch.column(c);
      if (col.type() != Type::kString) {
        col.format(r, &line);
        continue;
      }
      const std::string_view s = col.str_at(r);
      if (s.find_first_of("\r\n") != s.npos) {
        throw CsvError(path + ": row " + std::to_string(r) + ", column '" + col.field.name +
                       "' holds a line break, which a CSV part scan cannot split");
      }
      if (s.find_first_of(",\"") == s.npos) {
        line += s;
        continue;
      }
      line += '"';
      for (char ch : s) {
        if (ch == '"') line += '"';
        line += ch;
      }
      line += '"';
    }
    line += '\n';
    f << line;
  }
  f.flush();
  if (!f) throw CsvError(path + ": cannot write");
}

}  // namespace sluice::query
