#include "batch.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace sluice::query {

const char* to_string(Type t) {
  switch (t) {
    case Type::kInt64:
      return "int64";
    case Type::kDouble:
      return "double";
    case Type::kDecimal:
      return "decimal";
    case Type::kDate:
      return "date";
    case Type::kString:
      return "string";
  }
  return "?";
}

uint32_t Field::packed_bytes() const {
  switch (type) {
    case Type::kDate:
      return 4;
    case Type::kString:
      return width;
    default:
      return 8;
  }
}

size_t Schema::index(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].name == name) return i;
  std::string have;
  for (const Field& f : fields_) have += (have.empty() ? "" : ", ") + f.name;
  throw PlanError("no column '" + std::string(name) + "' (the input has: " + have + ")");
}

uint32_t Schema::packed_bytes() const {
  uint32_t n = 0;
  for (const Field& f : fields_) n += f.packed_bytes();
  return n;
}

size_t Column::size() const {
  switch (type()) {
    case Type::kDouble:
      return reals.size();
    case Type::kDate:
      return days.size();
    case Type::kString:
      return field.width == 0 ? 0 : chars.size() / field.width;
    default:
      return ints.size();
  }
}

void Column::clear() {
  ints.clear();
  reals.clear();
  days.clear();
  chars.clear();
}

void Column::reserve(size_t n) {
  switch (type()) {
    case Type::kDouble:
      reals.reserve(n);
      break;
    case Type::kDate:
      days.reserve(n);
      break;
    case Type::kString:
      chars.reserve(n * field.width);
      break;
    default:
      ints.reserve(n);
  }
}

void Column::append_from(const Column& o, size_t i) {
  switch (type()) {
    case Type::kDouble:
      reals.push_back(o.reals[i]);
      break;
    case Type::kDate:
      days.push_back(o.days[i]);
      break;
    case Type::kString: {
      const char* p = o.chars.data() + i * field.width;
      chars.insert(chars.end(), p, p + field.width);
      break;
    }
    default:
      ints.push_back(o.ints[i]);
  }
}

double decimal_scale(uint32_t scale) {
  double p = 1;
  for (uint32_t s = 0; s < scale; ++s) p *= 10;  // (exact up to 10^22: 5^22 < 2^53)
  return p;
}

double exact_mean(int64_t unscaled_sum, int64_t count, uint32_t scale) {
  if (count == 0) return 0;
  // DuckDB's steps: divisor = count, times 10^scale as a double; the sum
  // converted exactly; one long double division.
  long double divisor = static_cast<long double>(count);
  divisor *= static_cast<long double>(decimal_scale(scale));
  return static_cast<double>(static_cast<long double>(unscaled_sum) / divisor);
}

double Column::real_at(size_t i) const {
  switch (type()) {
    case Type::kDouble:
      return reals[i];
    case Type::kDate:
      return days[i];
    case Type::kDecimal:
      // One division by the exact power of ten, as DuckDB casts a decimal
      // to a double (dividing by 10 scale times rounds scale times).
      return static_cast<double>(ints[i]) / decimal_scale(field.scale);
    default:
      return static_cast<double>(ints[i]);
  }
}

std::string_view Column::str_at(size_t i) const {
  const char* p = chars.data() + i * field.width;
  size_t n = field.width;
  while (n > 0 && p[n - 1] == '\0') --n;
  return {p, n};
}

void Column::push_string(std::string_view s) {
  const size_t n = std::min<size_t>(s.size(), field.width);
  chars.insert(chars.end(), s.data(), s.data() + n);
  chars.insert(chars.end(), field.width - n, '\0');
}

void Column::format(size_t i, std::string* out) const {
  char buf[64];
  switch (type()) {
    case Type::kInt64:
      std::snprintf(buf, sizeof buf, "%" PRId64, ints[i]);
      break;
    case Type::kDouble:
      std::snprintf(buf, sizeof buf, "%.17g", reals[i]);
      break;
    case Type::kDate:
      if (days[i] != kNullDate) *out += civil_from_days(days[i]);
      return;
    case Type::kString:
      *out += str_at(i);
      return;
    case Type::kDecimal: {
      const int64_t v = ints[i];
      uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
      uint64_t pow = 1;
      for (uint32_t s = 0; s < field.scale; ++s) pow *= 10;
      if (field.scale == 0) {
        std::snprintf(buf, sizeof buf, "%s%" PRIu64, v < 0 ? "-" : "", mag);
      } else {
        std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%0*" PRIu64, v < 0 ? "-" : "", mag / pow,
                      static_cast<int>(field.scale), mag % pow);
      }
      break;
    }
  }
  *out += buf;
}

Batch::Batch(const Schema& schema) : schema_(schema) {
  columns_.reserve(schema.size());
  for (const Field& f : schema.fields()) columns_.emplace_back(f);
}

void Batch::clear() {
  for (Column& c : columns_) c.clear();
  rows_ = 0;
}

void Batch::reserve(size_t rows) {
  for (Column& c : columns_) c.reserve(rows);
}

void Batch::set_rows(size_t rows) {
  for (const Column& c : columns_) {
    if (c.size() != rows) {
      throw PlanError("column '" + c.field.name + "' has " + std::to_string(c.size()) +
                      " rows, the batch " + std::to_string(rows));
    }
  }
  rows_ = rows;
}

void Batch::append_row(const Batch& other, size_t i) {
  for (size_t c = 0; c < columns_.size(); ++c) columns_[c].append_from(other.columns_[c], i);
  ++rows_;
}

void Batch::append(const Batch& other) {
  for (size_t c = 0; c < columns_.size(); ++c) {
    Column& d = columns_[c];
    const Column& s = other.columns_[c];
    d.ints.insert(d.ints.end(), s.ints.begin(), s.ints.end());
    d.reals.insert(d.reals.end(), s.reals.begin(), s.reals.end());
    d.days.insert(d.days.end(), s.days.begin(), s.days.end());
    d.chars.insert(d.chars.end(), s.chars.begin(), s.chars.end());
  }
  rows_ += other.rows_;
}

void Batch::pack_row(size_t i, std::byte* out) const {
  for (const Column& c : columns_) {
    switch (c.type()) {
      case Type::kDouble:
        std::memcpy(out, &c.reals[i], 8);
        out += 8;
        break;
      case Type::kDate:
        std::memcpy(out, &c.days[i], 4);
        out += 4;
        break;
      case Type::kString:
        std::memcpy(out, c.chars.data() + i * c.field.width, c.field.width);
        out += c.field.width;
        break;
      default:
        std::memcpy(out, &c.ints[i], 8);
        out += 8;
    }
  }
}

void Batch::unpack_row(const std::byte* in) {
  for (Column& c : columns_) {
    switch (c.type()) {
      case Type::kDouble: {
        double v;
        std::memcpy(&v, in, 8);
        c.reals.push_back(v);
        in += 8;
        break;
      }
      case Type::kDate: {
        int32_t v;
        std::memcpy(&v, in, 4);
        c.days.push_back(v);
        in += 4;
        break;
      }
      case Type::kString: {
        const char* p = reinterpret_cast<const char*>(in);
        c.chars.insert(c.chars.end(), p, p + c.field.width);
        in += c.field.width;
        break;
      }
      default: {
        int64_t v;
        std::memcpy(&v, in, 8);
        c.ints.push_back(v);
        in += 8;
      }
    }
  }
  ++rows_;
}

std::string Batch::to_text(char sep) const {
  std::string out;
  for (size_t r = 0; r < rows_; ++r) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c != 0) out += sep;
      columns_[c].format(r, &out);
    }
    out += '\n';
  }
  return out;
}

// Howard Hinnant's days_from_civil / civil_from_days.
int32_t days_from_civil(int y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int>(doe) - 719468;
}

std::string civil_from_days(int32_t days) {
  const int z = days + 719468;
  const int era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int y = static_cast<int>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02u", y + (m <= 2), m, d);
  return buf;
}

}  // namespace sluice::query
