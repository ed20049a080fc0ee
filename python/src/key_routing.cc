// Routing rows by the hash of their key bytes, for records and batches that
// travel otherwise than through a keyed flow: route_rows (fixed-size records
// with a key field, as RecordsFlow routes) and route_columns (Arrow key
// columns, fixed- or variable-width, nulls included, as batch flows route
// `push(batch, to="key")`). Both hash with sluice::hash_bytes and reduce with
// sluice::reduce_hash, as a C++ flow declared with .key() does.
#include "key_routing.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "py_errors.h"
#include "sluice/hash.h"

namespace sluice::python {
namespace {

using Bytes1D = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Targets = nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>;

Targets targets_array(std::vector<uint32_t>* out) {
  nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
  return Targets(out->data(), {out->size()}, owner);
}

// Each record's target by a hash of its key bytes [key_offset, key_offset +
// key_size) over `targets` targets: the routing of a flow declared with that
// key (RecordsFlow::route), for records that travel otherwise.
Targets route_rows(Bytes1D records, uint32_t itemsize, uint32_t key_offset, uint32_t key_size,
                   uint32_t targets) {
  if (itemsize == 0 || records.size() % itemsize != 0 || key_offset + key_size > itemsize ||
      targets == 0) {
    raise(exc.invalid, "route_rows: records of " + std::to_string(itemsize) +
                           " bytes with a key at [" + std::to_string(key_offset) + ", " +
                           std::to_string(key_offset + key_size) + ") over " +
                           std::to_string(targets) + " targets");
  }
  const size_t n = records.size() / itemsize;
  auto* out = new std::vector<uint32_t>(n);
  Targets result = targets_array(out);
  const auto* data = reinterpret_cast<const std::byte*>(records.data());
  {
    nb::gil_scoped_release unlocked;
    for (size_t i = 0; i < n; ++i) {
      const std::span<const std::byte> key(data + i * itemsize + key_offset, key_size);
      (*out)[i] = reduce_hash(hash_bytes(key), targets);
    }
  }
  return result;
}

// One key column of `rows` rows, as the package describes it from Arrow's
// buffers (sluice/batches.py: _key_column): a fixed-width column's values
// (`width` bytes a row, row 0 first), or a variable-width one's values and
// offsets (`offset_bytes` 4 or 8, rows + 1 of them, row 0's first); and the
// validity bitmap (empty: no nulls) with the bit of row 0.
struct KeyColumn {
  std::span<const std::byte> values;
  uint32_t width = 0;  // 0: variable-width
  std::span<const std::byte> offsets;
  uint32_t offset_bytes = 0;
  std::span<const uint8_t> validity;
  uint64_t validity_bit = 0;

  bool valid(size_t row) const {
    if (validity.empty()) return true;
    const uint64_t bit = validity_bit + row;
    return (validity[bit / 8] >> (bit % 8) & 1) != 0;
  }
  int64_t offset_at(size_t i) const {
    if (offset_bytes == 4) {
      int32_t v;
      std::memcpy(&v, offsets.data() + i * 4, 4);
      return v;
    }
    int64_t v;
    std::memcpy(&v, offsets.data() + i * 8, 8);
    return v;
  }
  // Row `row`'s bytes (empty for a null).
  std::span<const std::byte> at(size_t row) const {
    if (!valid(row)) return {};
    if (width != 0) return values.subspan(row * width, width);
    const int64_t begin = offset_at(row), end = offset_at(row + 1);
    return values.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
  }
};

std::span<const std::byte> bytes_of(const Bytes1D& a) {
  return {reinterpret_cast<const std::byte*>(a.data()), a.size()};
}

// (values, width, offsets or None, offset_bytes, validity or None, validity_bit)
using ColumnTuple = std::tuple<Bytes1D, uint32_t, std::optional<Bytes1D>, uint32_t,
                               std::optional<Bytes1D>, uint64_t>;

// Checks what Python handed over against `rows` before any byte is read:
// a bad description raises rather than reads outside a buffer.
KeyColumn key_column(const ColumnTuple& t, size_t rows, size_t index) {
  const auto& [values, width, offsets, offset_bytes, validity, validity_bit] = t;
  KeyColumn c;
  c.values = bytes_of(values);
  c.width = width;
  const std::string what = "route_columns: key column " + std::to_string(index);
  if (width != 0) {
    if (offsets) raise(exc.invalid, what + ": a fixed-width column has no offsets");
    if (c.values.size() / width < rows) {
      raise(exc.invalid, what + ": " + std::to_string(c.values.size()) + " value bytes for " +
                             std::to_string(rows) + " rows of " + std::to_string(width));
    }
  } else {
    if (!offsets || (offset_bytes != 4 && offset_bytes != 8)) {
      raise(exc.invalid, what + ": a variable-width column needs 4- or 8-byte offsets");
    }
    c.offsets = bytes_of(*offsets);
    c.offset_bytes = offset_bytes;
    if (c.offsets.size() < (rows + 1) * offset_bytes) {
      raise(exc.invalid, what + ": " + std::to_string(c.offsets.size() / offset_bytes) +
                             " offsets for " + std::to_string(rows) + " rows");
    }
  }
  if (validity) {
    c.validity = {validity->data(), validity->size()};
    c.validity_bit = validity_bit;
    if (rows != 0 && (validity_bit + rows + 7) / 8 > c.validity.size()) {
      raise(exc.invalid, what + ": a validity bitmap of " + std::to_string(c.validity.size()) +
                             " bytes for " + std::to_string(rows) + " rows");
    }
  }
  if (width == 0) {  // every value inside the values, offsets never decreasing
    int64_t prev = c.offset_at(0);
    for (size_t i = 1; i <= rows; ++i) {
      const int64_t next = c.offset_at(i);
      if (prev < 0 || next < prev || static_cast<uint64_t>(next) > c.values.size()) {
        raise(exc.invalid, what + ": offset " + std::to_string(i) + " (" + std::to_string(next) +
                               ") is outside its values");
      }
      prev = next;
    }
  }
  return c;
}

// Each row's target by the hash of its key: the concatenation of its key
// columns' bytes in the order given (a fixed-width value's bytes, a string's
// or binary's own bytes, no length; a null contributes none), hashed with
// hash_bytes and reduced over `targets`. Fixed-width columns without nulls
// give the bytes a numpy record packing them would, so rows route as a numpy
// flow keyed by such a field.
Targets route_columns(const std::vector<ColumnTuple>& columns, size_t rows, uint32_t targets) {
  if (columns.empty() || targets == 0) {
    raise(exc.invalid, "route_columns: " + std::to_string(columns.size()) + " key columns over " +
                           std::to_string(targets) + " targets");
  }
  std::vector<KeyColumn> cols;
  cols.reserve(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) cols.push_back(key_column(columns[i], rows, i));
  auto* out = new std::vector<uint32_t>(rows);
  Targets result = targets_array(out);
  {
    nb::gil_scoped_release unlocked;
    if (cols.size() == 1) {
      for (size_t i = 0; i < rows; ++i) (*out)[i] = reduce_hash(hash_bytes(cols[0].at(i)), targets);
    } else {
      std::vector<std::byte> key;
      for (size_t i = 0; i < rows; ++i) {
        key.clear();
        for (const KeyColumn& c : cols) {
          const auto v = c.at(i);
          key.insert(key.end(), v.begin(), v.end());
        }
        (*out)[i] = reduce_hash(hash_bytes(key), targets);
      }
    }
  }
  return result;
}

}  // namespace

void bind_key_routing(nb::module_& m) {
  using namespace nb::literals;
  m.def("route_rows", &route_rows, "records"_a.noconvert(), "itemsize"_a, "key_offset"_a,
        "key_size"_a, "targets"_a, "Each record's target by the hash of its key bytes.");
  m.def("route_columns", &route_columns, "columns"_a, "rows"_a, "targets"_a,
        "Each row's target by the hash of its key columns' bytes (nulls: none).");
}

}  // namespace sluice::python
