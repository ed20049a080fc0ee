// apps/query/csv.h: scanning a CSV file in parts, one part per worker.
//
// A table in a CSV file (a header line with the column names, then one row
// per line, fields separated by commas) is read by every worker of a job at
// once: worker k of K takes the rows whose lines *begin* in the k-th of K
// equal byte ranges of the file's body. Every line begins in exactly one
// range, so the parts together are the table, each row once, in file order,
// and no worker reads more than its range and the tail of its last line.
// That is how Spark and DuckDB split a file among threads; it needs that
// no field holds a line break (a quoted field may hold commas and "" for a
// quote, but not a newline).
//
// Values are typed by the schema the caller expects, and the header must
// name its columns in order:
//   kInt64    decimal integer (an optional sign);
//   kDouble   a number as strtod reads it;
//   kDecimal  exact: an optional sign, digits, at most `scale` digits after
//             the point (more would round; an error instead);
//   kDate     YYYY-MM-DD; an empty field is NULL (kNullDate);
//   kString   at most `width` bytes.
// An empty field anywhere but a date is an error (the engine has no other
// NULLs). A "\r\n" line end is accepted.
//
// Errors throw CsvError naming the file, the byte offset of the line (and
// so the line for `tail -c`), the column and the value.
//
// Thread safety: read_csv_part() is reentrant; workers call it at once.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "batch.h"

namespace sluice::query {

struct CsvError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Part `part` of `parts` of the table in `path`, with `schema`'s columns.
Batch read_csv_part(const std::string& path, const Schema& schema, uint32_t part, uint32_t parts);

// Writes `batch` as CSV with a header (strings quoted when they hold a
// comma or a quote); read_csv_part reads it back exactly. Throws CsvError
// if the file cannot be written or a string holds a line break.
void write_csv(const std::string& path, const Batch& batch);

}  // namespace sluice::query
