// python/src/arrow_codec.h: an Arrow record batch as one byte record of a
// flow, and back, through the Arrow C data interface (the two structs
// below, whose layout the Arrow format fixes). A sender encodes the part of
// each buffer the batch uses (a slice's offsets rebased, its bitmaps
// shifted to bit 0) after a table of its arrays and buffers; a receiver
// decodes a record into ArrowArrays whose buffers point into the record
// itself, after checking every size and offset against the flow's schema,
// so that a malformed record is refused rather than read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4
struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};
#endif  // ARROW_C_DATA_INTERFACE

namespace sluice::python {

// The bytes an encoded batch leads with before its table, so that the
// table and buffers lie 8-byte aligned where the flow puts the record (a
// byte record's bytes start 4 bytes past an 8-byte boundary).
inline constexpr size_t kBatchLead = 4;

// Encodes record batches (exported as a struct array and its schema). Not
// thread-safe; reused by one source.
class BatchEncoder {
 public:
  // The encoded size of `array` under `schema`. Throws
  // sluice::Error(kInvalidArgument) naming a column whose type cannot
  // travel (unions, run-end encoded, views) or an array that does not
  // match its schema.
  size_t measure(const ArrowArray& array, const ArrowSchema& schema);
  // Encodes into memory the encoder keeps (laid out, as the flow will lay
  // it out, with its table 8-byte aligned) and returns the record's bytes,
  // valid until the next encode().
  std::span<const std::byte> encode(const ArrowArray& array, const ArrowSchema& schema);

 private:
  std::vector<uint64_t> words_;  // the record, from its second 4-byte half
};

// Decodes one record (its bytes as the flow delivered them) under `schema`
// into *out: an ArrowArray that owns a tree of arrays over the record's
// bytes (or over a copy of them when they are not 8-byte aligned, which
// sets *copied to the bytes copied) and holds `keep` until the consumer
// releases it. Returns "" on success, else what is wrong with the record
// (and *out is untouched).
std::string decode_batch(std::span<const std::byte> record, const ArrowSchema& schema,
                         std::shared_ptr<void> keep, ArrowArray* out, size_t* copied);

}  // namespace sluice::python
