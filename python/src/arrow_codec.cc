#include "arrow_codec.h"

#include <sluice/errors.h>

#include <bit>
#include <cstring>
#include <limits>
#include <optional>

// The record (little-endian, after kBatchLead bytes of zeros), from its
// header H (8-byte aligned where the flow puts it):
//   u32 magic, u32 nodes, u64 bytes (from H to the end)
//   nodes x {i64 length, i64 null_count, u32 buffers, u32 children,
//            u32 has_dictionary, u32 zero}, in pre-order: an array, its
//            children, then its dictionary
//   buffers x {u64 offset from H (kAbsent: none), u64 size}, in the order
//            of the nodes
//   the buffers, each at an offset that is a multiple of 8.
// Every array is encoded with offset 0: the range of its input the batch
// uses, copied.

namespace sluice::python {
namespace {

constexpr uint32_t kMagic = 0x42415253;  // "SRAB"
constexpr uint64_t kAbsent = std::numeric_limits<uint64_t>::max();
constexpr size_t kHeaderBytes = 16;
constexpr size_t kNodeBytes = 32;
constexpr size_t kBufferBytes = 16;
constexpr uint32_t kMaxNodes = 1u << 16;
constexpr int kMaxDepth = 64;

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

[[noreturn]] void invalid(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, what);
}

// How an Arrow type lays out its buffers.
enum class Layout { kNull, kBits, kFixed, kVar32, kVar64, kList32, kList64, kFixedList, kStruct };

struct TypeInfo {
  Layout layout = Layout::kNull;
  int64_t width = 0;  // bytes per value (kFixed), values per list (kFixedList)
  int64_t buffers = 0;
};

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

int64_t number_after(const std::string& f, size_t at) {
  int64_t n = 0;
  size_t i = at;
  for (; i < f.size() && f[i] >= '0' && f[i] <= '9'; ++i) n = n * 10 + (f[i] - '0');
  return i == at ? -1 : n;
}

// The layout of the format string `f` (the C data interface's), or nullopt
// if sluice does not carry it.
std::optional<TypeInfo> type_of(const std::string& f) {
  auto fixed = [](int64_t w) { return TypeInfo{Layout::kFixed, w, 2}; };
  if (f == "n") return TypeInfo{Layout::kNull, 0, 0};
  if (f == "b") return TypeInfo{Layout::kBits, 0, 2};
  if (f == "c" || f == "C") return fixed(1);
  if (f == "s" || f == "S" || f == "e") return fixed(2);
  if (f == "i" || f == "I" || f == "f") return fixed(4);
  if (f == "l" || f == "L" || f == "g") return fixed(8);
  if (f == "z" || f == "u") return TypeInfo{Layout::kVar32, 0, 3};
  if (f == "Z" || f == "U") return TypeInfo{Layout::kVar64, 0, 3};
  if (f == "tdD" || f == "tts" || f == "ttm" || f == "tiM") return fixed(4);
  if (f == "tdm" || f == "ttu" || f == "ttn" || f == "tiD") return fixed(8);
  if (f == "tin") return fixed(16);
  if (starts(f, "ts") || starts(f, "tD")) return fixed(8);
  if (starts(f, "w:")) {
    const int64_t n = number_after(f, 2);
    if (n <= 0) return std::nullopt;
    return fixed(n);
  }
  if (starts(f, "d:")) {  // d:precision,scale[,bitwidth]
    const size_t first = f.find(',');
    const size_t second = first == std::string::npos ? first : f.find(',', first + 1);
    const int64_t bits = second == std::string::npos ? 128 : number_after(f, second + 1);
    if (bits != 32 && bits != 64 && bits != 128 && bits != 256) return std::nullopt;
    return fixed(bits / 8);
  }
  if (f == "+l" || f == "+m") return TypeInfo{Layout::kList32, 0, 2};
  if (f == "+L") return TypeInfo{Layout::kList64, 0, 2};
  if (f == "+s") return TypeInfo{Layout::kStruct, 0, 1};
  if (starts(f, "+w:")) {
    const int64_t n = number_after(f, 3);
    if (n < 0) return std::nullopt;
    return TypeInfo{Layout::kFixedList, n, 1};
  }
  return std::nullopt;
}

bool is_integer(const std::string& f) {
  return f.size() == 1 && std::string("cCsSiIlL").find(f[0]) != std::string::npos;
}

std::string column_name(const ArrowSchema& s) {
  return s.name != nullptr && s.name[0] != '\0' ? "'" + std::string(s.name) + "'" : "(unnamed)";
}

// The type an array of schema `s` is laid out as (for a dictionary: its
// indices), or InvalidArgument naming the column.
TypeInfo layout_of(const ArrowSchema& s) {
  const std::string f = s.format != nullptr ? s.format : "";
  if (s.dictionary != nullptr && !is_integer(f)) {
    invalid("column " + column_name(s) + ": dictionary indices of format '" + f + "'");
  }
  std::optional<TypeInfo> t = type_of(f);
  if (!t) {
    invalid("column " + column_name(s) + " has Arrow format '" + f +
            "', which sluice's batch flows do not carry (unions, run-end encoded and view "
            "types: cast it, for example to a plain string or list)");
  }
  return *t;
}

// Copies bits [from, from + n) of `src` to bit 0 of `dst` (whole bytes,
// the last one's unused bits cleared); returns how many are set.
int64_t copy_bits(const uint8_t* src, int64_t from, int64_t n, uint8_t* dst) {
  const int64_t bytes = (n + 7) / 8;
  const int64_t first = from / 8;
  const int shift = static_cast<int>(from % 8);
  const int64_t last_src = (from + n - 1) / 8;  // the last byte holding a bit of the range
  for (int64_t i = 0; i < bytes; ++i) {
    unsigned v = src[first + i] >> shift;
    if (shift != 0 && first + i + 1 <= last_src) v |= unsigned{src[first + i + 1]} << (8 - shift);
    dst[i] = static_cast<uint8_t>(v);
  }
  if (n % 8 != 0) dst[bytes - 1] &= static_cast<uint8_t>((1u << (n % 8)) - 1);
  int64_t set = 0;
  for (int64_t i = 0; i < bytes; ++i) set += std::popcount(dst[i]);
  return set;
}

// One pass over a batch: counting (out == nullptr) or writing.
class Writer {
 public:
  // Counting.
  Writer() = default;
  // Writing, the tables and data laid out as a counting pass found.
  Writer(std::byte* header, size_t nodes, size_t buffers)
      : h_(header),
        node_at_(kHeaderBytes),
        buffer_at_(kHeaderBytes + nodes * kNodeBytes),
        data_at_(align8(kHeaderBytes + nodes * kNodeBytes + buffers * kBufferBytes)) {}

  size_t nodes() const { return nodes_; }
  size_t buffers() const { return buffers_; }
  size_t data_bytes() const { return data_; }
  bool writing() const { return h_ != nullptr; }

  void array(const ArrowArray& a, const ArrowSchema& s, int64_t start, int64_t len, int depth) {
    if (depth > kMaxDepth) invalid("column " + column_name(s) + ": nested too deep");
    const TypeInfo t = layout_of(s);
    if (a.n_buffers != t.buffers || a.n_children != s.n_children ||
        (s.dictionary != nullptr) != (a.dictionary != nullptr)) {
      invalid("column " + column_name(s) + ": its array does not match its schema");
    }
    const size_t node = nodes_++;
    int64_t nulls = 0;
    if (t.layout == Layout::kNull) {
      nulls = len;
    } else if (a.null_count == 0 || a.buffers[0] == nullptr || len == 0) {
      absent();
    } else {
      const auto* bits = static_cast<const uint8_t*>(a.buffers[0]);
      nulls = len - emit_bits(bits, start, len);
    }
    switch (t.layout) {
      case Layout::kNull:
      case Layout::kStruct:
        break;
      case Layout::kBits:
        emit_bits(static_cast<const uint8_t*>(a.buffers[1]), start, len);
        break;
      case Layout::kFixed:
        emit_copy(static_cast<const std::byte*>(a.buffers[1]) + start * t.width, len * t.width);
        break;
      case Layout::kVar32:
      case Layout::kList32: {
        const auto [lo, hi] = emit_offsets<int32_t>(a.buffers[1], start, len);
        if (t.layout == Layout::kVar32) {
          emit_copy(static_cast<const std::byte*>(a.buffers[2]) + lo, hi - lo);
        } else {
          array(*a.children[0], *s.children[0], a.children[0]->offset + lo, hi - lo, depth + 1);
        }
        break;
      }
      case Layout::kVar64:
      case Layout::kList64: {
        const auto [lo, hi] = emit_offsets<int64_t>(a.buffers[1], start, len);
        if (t.layout == Layout::kVar64) {
          emit_copy(static_cast<const std::byte*>(a.buffers[2]) + lo, hi - lo);
        } else {
          array(*a.children[0], *s.children[0], a.children[0]->offset + lo, hi - lo, depth + 1);
        }
        break;
      }
      case Layout::kFixedList:
        array(*a.children[0], *s.children[0], a.children[0]->offset + start * t.width,
              len * t.width, depth + 1);
        break;
    }
    if (t.layout == Layout::kStruct) {
      for (int64_t c = 0; c < a.n_children; ++c) {
        array(*a.children[c], *s.children[c], a.children[c]->offset + start, len, depth + 1);
      }
    }
    if (a.dictionary != nullptr) {
      array(*a.dictionary, *s.dictionary, a.dictionary->offset, a.dictionary->length, depth + 1);
    }
    if (writing()) {
      std::byte* n = h_ + kHeaderBytes + node * kNodeBytes;
      const uint32_t words[4] = {static_cast<uint32_t>(t.buffers),
                                 static_cast<uint32_t>(a.n_children),
                                 a.dictionary != nullptr ? 1u : 0u, 0u};
      std::memcpy(n, &len, 8);
      std::memcpy(n + 8, &nulls, 8);
      std::memcpy(n + 16, words, sizeof(words));
    }
  }

 private:
  void entry(uint64_t offset, uint64_t size) {
    if (writing()) {
      std::memcpy(h_ + buffer_at_, &offset, 8);
      std::memcpy(h_ + buffer_at_ + 8, &size, 8);
      buffer_at_ += kBufferBytes;
    }
    ++buffers_;
  }
  void absent() { entry(kAbsent, 0); }
  // A buffer of `size` bytes: where to write it (nullptr when counting).
  std::byte* emit(size_t size) {
    std::byte* at = nullptr;
    if (writing()) {
      entry(data_at_, size);
      at = h_ + data_at_;
      data_at_ += align8(size);
    } else {
      ++buffers_;
    }
    data_ += align8(size);
    return at;
  }
  void emit_copy(const std::byte* from, int64_t size) {
    std::byte* at = emit(static_cast<size_t>(size));
    if (at != nullptr && size > 0) std::memcpy(at, from, static_cast<size_t>(size));
  }
  // A bitmap's bits [start, start + len): how many are set (0 when counting).
  int64_t emit_bits(const uint8_t* bits, int64_t start, int64_t len) {
    std::byte* at = emit(static_cast<size_t>((len + 7) / 8));
    if (at == nullptr || len == 0) return 0;
    return copy_bits(bits, start, len, reinterpret_cast<uint8_t*>(at));
  }
  // Offsets [start, start + len] rebased to 0; returns the range of values
  // (or child elements) they span in the input.
  template <class O>
  std::pair<int64_t, int64_t> emit_offsets(const void* buffer, int64_t start, int64_t len) {
    const auto* o = static_cast<const O*>(buffer);
    const int64_t lo = len == 0 || o == nullptr ? 0 : static_cast<int64_t>(o[start]);
    const int64_t hi = len == 0 || o == nullptr ? 0 : static_cast<int64_t>(o[start + len]);
    std::byte* at = emit(static_cast<size_t>(len + 1) * sizeof(O));
    if (at != nullptr) {
      O* out = reinterpret_cast<O*>(at);
      if (len == 0) {
        out[0] = 0;
      } else {
        for (int64_t i = 0; i <= len; ++i) out[i] = static_cast<O>(o[start + i] - lo);
      }
    }
    return {lo, hi};
  }

  std::byte* h_ = nullptr;
  size_t nodes_ = 0, buffers_ = 0, data_ = 0;
  size_t node_at_ = 0, buffer_at_ = 0, data_at_ = 0;
};

size_t encoded_bytes(const Writer& counted) {
  return kBatchLead +
         align8(kHeaderBytes + counted.nodes() * kNodeBytes + counted.buffers() * kBufferBytes) +
         counted.data_bytes();
}

// ---- decoding ----

// The decoded arrays of one record, owned by its root's release.
struct Decoded {
  std::vector<ArrowArray> arrays;  // pre-order, as in the record
  std::vector<const void*> buffers;
  std::vector<ArrowArray*> children;
  std::vector<uint64_t> copy;  // the record's bytes, when they had to be aligned
  std::shared_ptr<void> keep;
};

void release_child(ArrowArray* a) { a->release = nullptr; }

void release_root(ArrowArray* a) {
  delete static_cast<Decoded*>(a->private_data);
  a->release = nullptr;
}

// How many of the first `n` bits of `bits` are set.
int64_t set_bits(const uint8_t* bits, int64_t n) {
  int64_t set = 0;
  const int64_t whole = n / 8;
  for (int64_t i = 0; i < whole; ++i) set += std::popcount(bits[i]);
  if (n % 8 != 0) set += std::popcount(static_cast<uint8_t>(bits[whole] & ((1u << (n % 8)) - 1)));
  return set;
}

class Reader {
 public:
  Reader(const std::byte* h, uint64_t bytes, uint32_t nodes, Decoded* d)
      : h_(h), bytes_(bytes), nodes_(nodes), d_(d) {
    buffer_table_ = kHeaderBytes + uint64_t{nodes} * kNodeBytes;
  }

  // Decodes the next array (and its children) as an array of schema `s`;
  // returns its index in d_->arrays, or -1 with error_ set.
  int64_t array(const ArrowSchema& s, int depth) {
    if (depth > kMaxDepth) return fail("nested too deep");
    if (next_node_ >= nodes_) return fail("fewer arrays than its schema has");
    const std::optional<TypeInfo> maybe = dictionary_ok(s) ? type_of(s.format) : std::nullopt;
    if (!maybe) return fail("a column of a type batch flows do not carry");
    const TypeInfo t = *maybe;
    const size_t index = next_node_++;
    const std::byte* n = h_ + kHeaderBytes + index * kNodeBytes;
    int64_t len = 0, nulls = 0;
    uint32_t words[4];
    std::memcpy(&len, n, 8);
    std::memcpy(&nulls, n + 8, 8);
    std::memcpy(words, n + 16, sizeof(words));
    if (len < 0 || nulls < 0 || nulls > len) return fail("an array's length or null count");
    if (words[0] != t.buffers || words[1] != s.n_children ||
        (words[2] != 0) != (s.dictionary != nullptr)) {
      return fail("an array's buffers or children do not match its column's type");
    }
    ArrowArray& a = d_->arrays[index];
    a = ArrowArray{};
    a.length = len;
    a.null_count = nulls;
    a.n_buffers = t.buffers;
    a.n_children = s.n_children;
    if (next_buffer_ + static_cast<size_t>(t.buffers) > d_->buffers.size()) {
      return fail("more buffers than it holds");
    }
    a.buffers = d_->buffers.data() + next_buffer_;
    a.release = release_child;
    const size_t first = next_buffer_;
    next_buffer_ += static_cast<size_t>(t.buffers);
    uint64_t size[3] = {0, 0, 0};
    for (int64_t b = 0; b < t.buffers; ++b) {
      if (!buffer(first + static_cast<size_t>(b), &size[b])) return fail("a buffer out of bounds");
    }
    const uint64_t ulen = static_cast<uint64_t>(len);
    const uint64_t bitmap = (ulen + 7) / 8;
    if (t.layout == Layout::kNull) {
      if (nulls != len) return fail("a null column's null count");
    } else if (d_->buffers[first] == nullptr
                   ? nulls != 0
                   : size[0] < bitmap ||
                         len - set_bits(static_cast<const uint8_t*>(d_->buffers[first]), len) !=
                             nulls) {
      return fail("a validity bitmap or its null count");
    }
    const void* data = t.buffers > 1 ? d_->buffers[first + 1] : nullptr;
    int64_t child_len = -1;  // what the (one) child must hold, for lists
    switch (t.layout) {
      case Layout::kNull:
      case Layout::kStruct:
        break;
      case Layout::kBits:
        if (data == nullptr || size[1] < bitmap) return fail("a boolean column's bits");
        break;
      case Layout::kFixed:
        if (data == nullptr || ulen > size[1] / static_cast<uint64_t>(t.width)) {
          return fail("a column's values");
        }
        break;
      case Layout::kVar32:
      case Layout::kList32:
      case Layout::kVar64:
      case Layout::kList64: {
        const bool wide = t.layout == Layout::kVar64 || t.layout == Layout::kList64;
        int64_t end = 0;
        if (!offsets_ok(data, size[1], ulen, wide, &end)) return fail("a column's offsets");
        if (t.layout == Layout::kVar32 || t.layout == Layout::kVar64) {
          if (d_->buffers[first + 2] == nullptr || static_cast<uint64_t>(end) > size[2]) {
            return fail("a column's offsets past its values");
          }
        } else {
          child_len = end;
        }
        break;
      }
      case Layout::kFixedList:
        if (t.width != 0 && len > std::numeric_limits<int64_t>::max() / t.width) {
          return fail("a fixed-size list's length");
        }
        child_len = len * t.width;
        break;
    }
    if (s.n_children > 0) {
      const size_t at = d_->children.size();
      for (int64_t c = 0; c < s.n_children; ++c) d_->children.push_back(nullptr);
      // (d_->children holds one place per array: a record that has every
      // array its schema names never grows it past what was reserved; one
      // that has fewer fails before its arrays are used.)
      a.children = d_->children.data() + at;
      for (int64_t c = 0; c < s.n_children; ++c) {
        const int64_t ci = array(*s.children[c], depth + 1);
        if (ci < 0) return -1;
        ArrowArray* child = &d_->arrays[static_cast<size_t>(ci)];
        d_->children[at + static_cast<size_t>(c)] = child;
        if (t.layout == Layout::kStruct ? child->length < len
                                        : child_len >= 0 && child->length < child_len) {
          return fail("a child column shorter than its parent needs");
        }
      }
    }
    if (s.dictionary != nullptr) {
      const int64_t di = array(*s.dictionary, depth + 1);
      if (di < 0) return -1;
      ArrowArray* dict = &d_->arrays[static_cast<size_t>(di)];
      a.dictionary = dict;
      if (!indices_ok(s.format, d_->buffers[first], data, len, dict->length)) {
        return fail("a dictionary index out of range");
      }
    }
    return static_cast<int64_t>(index);
  }

  const std::string& error() const { return error_; }
  bool all_read() const { return next_node_ == nodes_ && next_buffer_ == d_->buffers.size(); }

 private:
  int64_t fail(const std::string& what) {
    if (error_.empty()) error_ = what;
    return -1;
  }
  bool dictionary_ok(const ArrowSchema& s) const {
    return s.format != nullptr && (s.dictionary == nullptr || is_integer(s.format));
  }
  // Buffer `i` of the table: its pointer into d_->buffers and its size.
  bool buffer(size_t i, uint64_t* size) {
    uint64_t off = 0;
    const std::byte* e = h_ + buffer_table_ + i * kBufferBytes;
    std::memcpy(&off, e, 8);
    std::memcpy(size, e + 8, 8);
    if (off == kAbsent) {
      d_->buffers[i] = nullptr;
      *size = 0;
      return true;
    }
    if (off % 8 != 0 || off > bytes_ || *size > bytes_ - off) return false;
    d_->buffers[i] = h_ + off;
    return true;
  }
  static bool offsets_ok(const void* p, uint64_t size, uint64_t len, bool wide, int64_t* end) {
    const uint64_t width = wide ? 8 : 4;
    if (p == nullptr || len + 1 > size / width) return false;
    int64_t prev = 0;
    for (uint64_t i = 0; i <= len; ++i) {
      int64_t v;
      if (wide) {
        v = static_cast<const int64_t*>(p)[i];
      } else {
        v = static_cast<const int32_t*>(p)[i];
      }
      if (v < prev || (i == 0 && v != 0)) return false;
      prev = v;
    }
    *end = prev;
    return true;
  }
  template <class I>
  static bool indices_in(const void* validity, const void* data, int64_t len, int64_t limit) {
    const auto* bits = static_cast<const uint8_t*>(validity);
    const auto* v = static_cast<const I*>(data);
    for (int64_t i = 0; i < len; ++i) {
      if (bits != nullptr && (bits[i / 8] >> (i % 8) & 1) == 0) continue;
      const auto x = v[i];
      if (x < 0 || static_cast<uint64_t>(x) >= static_cast<uint64_t>(limit)) return false;
    }
    return true;
  }
  static bool indices_ok(const char* format, const void* validity, const void* data, int64_t len,
                         int64_t limit) {
    switch (format[0]) {
      case 'c':
        return indices_in<int8_t>(validity, data, len, limit);
      case 'C':
        return indices_in<uint8_t>(validity, data, len, limit);
      case 's':
        return indices_in<int16_t>(validity, data, len, limit);
      case 'S':
        return indices_in<uint16_t>(validity, data, len, limit);
      case 'i':
        return indices_in<int32_t>(validity, data, len, limit);
      case 'I':
        return indices_in<uint32_t>(validity, data, len, limit);
      case 'l':
        return indices_in<int64_t>(validity, data, len, limit);
      default:
        return indices_in<uint64_t>(validity, data, len, limit);
    }
  }

  const std::byte* h_;
  uint64_t bytes_;
  uint32_t nodes_;
  Decoded* d_;
  uint64_t buffer_table_ = 0;
  size_t next_node_ = 0, next_buffer_ = 0;
  std::string error_;
};

}  // namespace

size_t BatchEncoder::measure(const ArrowArray& array, const ArrowSchema& schema) {
  Writer counting;
  counting.array(array, schema, array.offset, array.length, 0);
  return encoded_bytes(counting);
}

std::span<const std::byte> BatchEncoder::encode(const ArrowArray& array,
                                                const ArrowSchema& schema) {
  Writer counting;
  counting.array(array, schema, array.offset, array.length, 0);
  if (counting.nodes() > kMaxNodes) invalid("a batch of more than 65536 arrays");
  const size_t bytes = encoded_bytes(counting);
  // The record starts 4 bytes into the words, so that its table (after
  // kBatchLead bytes) and every buffer are 8-byte aligned here as well.
  const size_t words = (4 + bytes + 7) / 8;
  if (words_.size() < words) words_.resize(words);
  std::byte* record = reinterpret_cast<std::byte*>(words_.data()) + 4;
  std::memset(record, 0, kBatchLead);
  std::byte* h = record + kBatchLead;
  Writer writing(h, counting.nodes(), counting.buffers());
  writing.array(array, schema, array.offset, array.length, 0);
  const uint32_t head[2] = {kMagic, static_cast<uint32_t>(counting.nodes())};
  const uint64_t total = bytes - kBatchLead;
  std::memcpy(h, head, sizeof(head));
  std::memcpy(h + 8, &total, 8);
  return {record, bytes};
}

std::string decode_batch(std::span<const std::byte> record, const ArrowSchema& schema,
                         std::shared_ptr<void> keep, ArrowArray* out, size_t* copied) {
  *copied = 0;
  if (record.size() < kBatchLead + kHeaderBytes) return "shorter than a batch's header";
  auto d = std::make_unique<Decoded>();
  const std::byte* h = record.data() + kBatchLead;
  const size_t bytes = record.size() - kBatchLead;
  if (reinterpret_cast<uintptr_t>(h) % 8 != 0) {
    d->copy.resize((bytes + 7) / 8);
    std::memcpy(d->copy.data(), h, bytes);
    h = reinterpret_cast<const std::byte*>(d->copy.data());
    *copied = bytes;
  }
  uint32_t head[2];
  uint64_t total = 0;
  std::memcpy(head, h, sizeof(head));
  std::memcpy(&total, h + 8, 8);
  if (head[0] != kMagic) return "not an encoded batch (its magic number)";
  const uint32_t nodes = head[1];
  if (total != bytes || nodes == 0 || nodes > kMaxNodes) return "its header's sizes";
  const uint64_t node_end = kHeaderBytes + uint64_t{nodes} * kNodeBytes;
  if (node_end > bytes) return "its array table past its end";
  // The buffer table's length: the sum of the arrays' buffer counts.
  uint64_t buffers = 0;
  for (uint32_t i = 0; i < nodes; ++i) {
    uint32_t n = 0;
    std::memcpy(&n, h + kHeaderBytes + uint64_t{i} * kNodeBytes + 16, 4);
    if (n > 3) return "an array with more than 3 buffers";
    buffers += n;
  }
  if (node_end + buffers * kBufferBytes > bytes) return "its buffer table past its end";
  d->arrays.resize(nodes);
  d->buffers.resize(buffers);
  d->children.reserve(nodes);
  Reader reader(h, bytes, nodes, d.get());
  const int64_t root = reader.array(schema, 0);
  if (root < 0) return reader.error();
  if (!reader.all_read()) return "more arrays or buffers than its schema has";
  d->keep = std::move(keep);
  *out = d->arrays[0];
  out->private_data = d.release();
  out->release = release_root;
  return "";
}

}  // namespace sluice::python
