// apps/query/batch.h: typed columns and the column batches the operators pass.
//
// A Batch holds a few thousand rows column by column. Every column has one
// of five types: 64-bit integers, doubles, fixed-point decimals (int64 in
// units of 10^-scale, so sums stay exact), dates (int32 days since
// 1970-01-01) and short strings (fixed width, zero padded). Operators take
// batches by const reference and write into batches they own, which they
// clear() and refill so that steady-state processing does not allocate.
//
// Thread safety: none; a batch belongs to one worker thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::query {

// A plan that is wrong (unknown column, type mismatch, ...): thrown while
// the plan is built, never while it runs.
struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Type : uint8_t { kInt64, kDouble, kDecimal, kDate, kString };
const char* to_string(Type t);

struct Field {
  std::string name;
  Type type = Type::kInt64;
  uint32_t scale = 0;  // kDecimal: digits after the point (2: cents)
  uint32_t width = 0;  // kString: bytes per value
  // Bytes this field takes in a packed exchange record.
  uint32_t packed_bytes() const;
};

class Schema {
 public:
  Schema() = default;
  Schema(std::vector<Field> fields) : fields_(std::move(fields)) {}
  size_t size() const { return fields_.size(); }
  const Field& operator[](size_t i) const { return fields_[i]; }
  const std::vector<Field>& fields() const { return fields_; }
  // Index of the column `name`; throws PlanError naming it and the columns there are.
  size_t index(std::string_view name) const;
  // Bytes of one packed row (the sum of packed_bytes()).
  uint32_t packed_bytes() const;

 private:
  std::vector<Field> fields_;
};

// 10^scale as a double (exact up to 10^22): a decimal's unscaled value
// divided by it once is its value as a double, as DuckDB computes it.
double decimal_scale(uint32_t scale);

// SQL's AVG of integers or decimals from their exact sum (unscaled, `scale`
// digits after the point) and count, bit for bit as DuckDB computes it
// (src/core_functions/aggregate/algebraic/avg.cpp: IntegerAverageOperationHugeint,
// for BIGINT and DECIMAL wider than 4 digits): sum / (count x 10^scale) in
// long double, rounded once to double. (sum / 10^scale / count rounds
// twice: a last bit off in about a third of q3's groups.) 0 for no rows.
double exact_mean(int64_t unscaled_sum, int64_t count, uint32_t scale);

// Field constructors, for writing schemas compactly.
inline Field int64_field(std::string n) { return {std::move(n), Type::kInt64, 0, 0}; }
inline Field double_field(std::string n) { return {std::move(n), Type::kDouble, 0, 0}; }
inline Field decimal_field(std::string n, uint32_t scale = 2) {
  return {std::move(n), Type::kDecimal, scale, 0};
}
inline Field date_field(std::string n) { return {std::move(n), Type::kDate, 0, 0}; }
inline Field string_field(std::string n, uint32_t width) {
  return {std::move(n), Type::kString, 0, width};
}

// One column. Exactly one of the vectors is used, by type: ints (kInt64,
// kDecimal), reals (kDouble), days (kDate), chars (kString, width bytes a value).
struct Column {
  Field field;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  std::vector<int32_t> days;
  std::vector<char> chars;

  explicit Column(Field f = {}) : field(std::move(f)) {}
  Type type() const { return field.type; }
  size_t size() const;
  void clear();
  void reserve(size_t n);
  // Appends row `i` of `other` (same type and width).
  void append_from(const Column& other, size_t i);
  // The value as a number: ints and days as they are, decimals unscaled,
  // doubles as they are. REQUIRES: not a string.
  int64_t int_at(size_t i) const { return type() == Type::kDate ? days[i] : ints[i]; }
  double real_at(size_t i) const;
  std::string_view str_at(size_t i) const;
  void push_string(std::string_view s);
  // Writes value i to `out` as DuckDB prints it in CSV (decimals with their
  // scale, dates as YYYY-MM-DD, doubles with 17 significant digits).
  void format(size_t i, std::string* out) const;
};

class Batch {
 public:
  Batch() = default;
  explicit Batch(const Schema& schema);
  const Schema& schema() const { return schema_; }
  size_t rows() const { return rows_; }
  size_t num_columns() const { return columns_.size(); }
  Column& column(size_t i) { return columns_[i]; }
  const Column& column(size_t i) const { return columns_[i]; }
  // Keeps the schema and the capacity.
  void clear();
  void reserve(size_t rows);
  // After appending to every column by hand: sets the row count (checks
  // every column has it).
  void set_rows(size_t rows);
  // Appends row `i` of `other` (same schema).
  void append_row(const Batch& other, size_t i);
  // Appends every row of `other` (same schema).
  void append(const Batch& other);
  // Packs row i into `out` (schema().packed_bytes() bytes) and back; the
  // exchanges move rows in this layout: fields in order, no padding,
  // ints/decimals 8 bytes, doubles 8, dates 4, strings their width.
  void pack_row(size_t i, std::byte* out) const;
  void unpack_row(const std::byte* in);
  // One line per row, fields separated by `sep`, as Column::format writes them.
  std::string to_text(char sep = ',') const;

 private:
  Schema schema_;
  std::vector<Column> columns_;
  size_t rows_ = 0;
};

// A missing date (SQL NULL; TPC-C's delivery date of an undelivered order).
// Comparisons with it are false (so a filter drops the row, as SQL's would),
// CSV shows it as an empty field (NULL to DuckDB), and it sorts first.
constexpr int32_t kNullDate = INT32_MIN;

// Days since 1970-01-01 of a civil date, and back (proleptic Gregorian).
int32_t days_from_civil(int y, unsigned m, unsigned d);
std::string civil_from_days(int32_t days);

}  // namespace sluice::query
