// The record most unit tests push through a flow: a key and a value.
#pragma once

#include <cstdint>

namespace sluice::testing {

struct KeyValue {
  uint64_t key;
  uint64_t value;
};

}  // namespace sluice::testing
