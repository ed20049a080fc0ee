// stream/csv.h: what a CSV input file must hold for a record type, and the
// checks that hold it to that: the schema (named, typed columns), the header
// that must name them, and one line turned into a record or into an error
// that names the line, the column and the value.
//
//   const ss::CsvSchema<RoRecord> schema{
//       "ro records",
//       {SLUICE_STREAM_CSV_NUMBER(RoRecord, key), SLUICE_STREAM_CSV_NUMBER(RoRecord, time)},
//       {"worker", "seq"}};
//   ss::CsvLayout<RoRecord> layout(schema, "key,time", /*header=*/true);  // throws if wrong
//   RoRecord r;
//   if (auto bad = layout.parse("5,17", &r)) ... bad->message() ...
//
// A header names each of the schema's columns once, in any order (the
// values are read by name), and may name the schema's skipped columns
// (read past, as `worker,seq` of the files `--input-csv-dir` writes);
// any other name is an error. Without a header the lines hold the schema's
// columns in the schema's order. Every line must have as many fields as the
// header (or the schema) names; fields are split at commas, no quoting (the
// inputs hold numbers and hex ids only), and a value is the whole field: no
// spaces, no sign on an unsigned column, within its type's range.
//
// Thread safety: a schema and a layout are values, read-only after
// construction; parse() may run on several threads at once.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sluice::stream {

template <class Rec>
struct CsvColumn {
  std::string_view name;
  std::string_view kind;  // what a value must be: "an unsigned 64-bit integer"
  bool (*set)(std::string_view value, Rec* out);  // false: not such a value
};

template <class Rec>
struct CsvSchema {
  std::string_view name;                  // "ysb records", for errors
  std::vector<CsvColumn<Rec>> columns;    // in the order of a file without a header
  std::vector<std::string_view> skipped;  // names a header may hold whose values are not read
  // The column that holds a record's event time (ms): the one a Kafka input
  // takes from its messages' timestamps instead (stream/kafka.h). Empty:
  // none.
  std::string_view time_column = {};
};

// The whole of `s` as a number of type T (decimal; base 16 for hex digits).
template <class T>
bool csv_number(std::string_view s, T* out, int base = 10) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// What csv_number<T> accepts, in words.
template <class T>
constexpr std::string_view csv_number_kind() {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::is_same_v<T, uint8_t>) return "an integer from 0 to 255";
  if constexpr (std::is_unsigned_v<T> && sizeof(T) == 4) return "an unsigned 32-bit integer";
  if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8) return "an unsigned 64-bit integer";
  if constexpr (std::is_signed_v<T> && sizeof(T) == 4) return "a 32-bit integer";
  if constexpr (std::is_signed_v<T> && sizeof(T) == 8) return "a 64-bit integer";
  return "an integer";
}

// A column that holds the integer field `field` of Rec under its own name.
// (A macro rather than a pointer to member: the records are packed, and a
// store through a pointer to a packed member is misaligned.)
#define SLUICE_STREAM_CSV_NUMBER(Rec, field)                                        \
  ::sluice::stream::CsvColumn<Rec> {                                                \
#field, ::sluice::stream::csv_number_kind<decltype(Rec::field)>(),                \
        [](std::string_view v, Rec* r) {                                              \
          std::remove_cv_t<decltype(Rec::field)> x{};                                 \
          if (!::sluice::stream::csv_number(v, &x)) return false;                     \
          r->field = x;                                                               \
          return true;                                                                \
        } \
  }

// Why a line is not a record, and where; message() says it whole.
struct CsvLineError {
  size_t column = 0;  // 0-based field of the line; npos: the count of fields is wrong
  std::string name,
      kind;           // the column's, if one value is wrong; name: the columns, if the count is
  std::string value;  // the value (at most 80 characters and "...")
  size_t fields = 0, expected = 0;
  std::string message() const {
    if (column == std::string::npos) {
      return std::to_string(fields) + (fields == 1 ? " field" : " fields") + " where " +
             std::to_string(expected) + " are expected (" + name + ")";
    }
    return "column " + std::to_string(column + 1) + " (" + name + "): '" + value + "' is not " +
           kind;
  }
};

// A file's columns mapped onto a schema's (from its header, or the schema's
// own order without one).
template <class Rec>
class CsvLayout {
 public:
  // header: the file's first line, if `has_header`. Throws
  // std::invalid_argument saying what is wrong with the header.
  // `absent` (without a header only): a column of the schema the lines do
  // not hold, whose value fill() sets from elsewhere (a Kafka message's
  // timestamp).
  CsvLayout(const CsvSchema<Rec>& schema, std::string_view header, bool has_header,
            std::string_view absent = {})
      : schema_(&schema) {
    if (!has_header) {
      names_ = "without a header, the columns ";
      for (size_t i = 0; i < schema.columns.size(); ++i) {
        if (!absent.empty() && schema.columns[i].name == absent) {
          absent_ = static_cast<int>(i);
          continue;
        }
        names_ += (slots_.empty() ? "" : ",") + std::string(schema.columns[i].name);
        slots_.push_back(static_cast<int>(i));
      }
      if (!absent.empty() && absent_ < 0) {
        throw std::invalid_argument("'" + std::string(absent) + "' is not a column of " +
                                    std::string(schema.name) + " (" + expected_columns() + ")");
      }
      return;
    }
    if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
    std::vector<bool> seen(schema.columns.size(), false);
    size_t start = 0;
    while (true) {
      const size_t comma = header.find(',', start);
      const std::string_view name =
          header.substr(start, comma == header.npos ? header.npos : comma - start);
      slots_.push_back(slot_of(name, seen, header));
      if (comma == header.npos) break;
      start = comma + 1;
    }
    names_ = "the header's columns " + std::string(header.substr(0, 200));
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) {
        throw std::invalid_argument("the header lacks the column '" +
                                    std::string(schema.columns[i].name) + "' (" +
                                    expected_columns() + ")");
      }
    }
  }

  // The line as a record in *out; or why it is not one.
  std::optional<CsvLineError> parse(std::string_view line, Rec* out) const {
    const size_t fields = static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    if (fields != slots_.size()) {
      CsvLineError e;
      e.column = std::string::npos;
      e.fields = fields;
      e.expected = slots_.size();
      e.name = names_;
      return e;
    }
    size_t start = 0;
    for (size_t k = 0; k < slots_.size(); ++k) {
      const size_t comma = line.find(',', start);
      const std::string_view value =
          line.substr(start, comma == line.npos ? line.npos : comma - start);
      start = comma + 1;
      const int slot = slots_[k];
      if (slot < 0 || schema_->columns[slot].set(value, out)) continue;
      const CsvColumn<Rec>& c = schema_->columns[slot];
      CsvLineError e;
      e.column = k;
      e.name = c.name;
      e.kind = c.kind;
      e.value = shown(value);
      return e;
    }
    return std::nullopt;
  }

  // Sets the absent column (see the constructor) of *out to `value`; false
  // if the value is not one of that column's.
  bool fill(int64_t value, Rec* out) const {
    char text[24];
    const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
    return absent_ >= 0 && ec == std::errc() &&
           schema_->columns[absent_].set(std::string_view(text, end - text), out);
  }

  // "the columns of ysb records are user_id, ...; a header may also name worker, seq"
  std::string expected_columns() const {
    std::string s = "the columns of " + std::string(schema_->name) + " are ";
    for (size_t i = 0; i < schema_->columns.size(); ++i) {
      if (i > 0) s += ',';
      s += schema_->columns[i].name;
    }
    if (!schema_->skipped.empty()) {
      s += "; a header may also name ";
      for (size_t i = 0; i < schema_->skipped.size(); ++i) {
        if (i > 0) s += ',';
        s += schema_->skipped[i];
      }
      s += ", which are not read";
    }
    return s;
  }

 private:
  // A value as an error shows it: at most 80 bytes, control bytes as \xNN.
  static std::string shown(std::string_view v) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < v.size() && i < 80; ++i) {
      const auto c = static_cast<unsigned char>(v[i]);
      if (c < 0x20 || c == 0x7f) {
        s += "\\x";
        s += kHex[c >> 4];
        s += kHex[c & 15];
      } else {
        s += static_cast<char>(c);
      }
    }
    if (v.size() > 80) s += "...";
    return s;
  }

  int slot_of(std::string_view name, std::vector<bool>& seen, std::string_view header) const {
    for (size_t i = 0; i < schema_->columns.size(); ++i) {
      if (schema_->columns[i].name != name) continue;
      if (seen[i]) {
        throw std::invalid_argument("the header names the column '" + std::string(name) +
                                    "' twice");
      }
      seen[i] = true;
      return static_cast<int>(i);
    }
    for (std::string_view s : schema_->skipped) {
      if (s == name) return -1;
    }
    std::string msg = "the header names a column '" + std::string(name.substr(0, 80)) +
                      "' that is not a column of " + std::string(schema_->name) + " (" +
                      expected_columns() + ")";
    const bool numeric = !name.empty() && (name[0] == '-' || (name[0] >= '0' && name[0] <= '9'));
    if (numeric) {
      msg += "; the first line '" + std::string(header.substr(0, 80)) +
             "' looks like a record: a file without a header needs --no-header";
    }
    throw std::invalid_argument(msg);
  }

  const CsvSchema<Rec>* schema_;
  std::vector<int> slots_;  // per field of a line: the schema's column, or -1 (skipped)
  int absent_ = -1;         // the column fill() sets, if one
  std::string names_;       // the columns a line holds, for errors
};

}  // namespace sluice::stream
