// python/src/ring_view.h: a batch a numpy flow's target kept
// (RecordsFlow::consume_kept) as a read-only uint8 array over the ring
// itself. The array pins the segment: the flow's C++ object (the ring's
// mapping lives in it) and the Python flow (which keeps its cluster) live
// while the array does, and the segment goes back to its source once the
// array and every view of it are collected.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "records_flow.h"

namespace sluice::python {

namespace nb = nanobind;

using RingArray = nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>;

inline RingArray ring_view(std::shared_ptr<RecordsFlow> flow, nb::object owner,
                           const RecordsFlow::Kept& kept) {
  struct Pin {
    std::shared_ptr<RecordsFlow> flow;
    nb::object owner;
    uint64_t id;
  };
  flow->pin();
  auto* pin = new Pin{std::move(flow), std::move(owner), kept.id};
  nb::capsule holder(pin, [](void* p) noexcept {
    auto* pin = static_cast<Pin*>(p);
    pin->flow->release_later(pin->id);
    pin->flow->unpin();
    delete pin;
  });
  return RingArray(reinterpret_cast<const uint8_t*>(kept.data), {kept.bytes}, holder);
}

}  // namespace sluice::python
