// python/src/key_routing.h: sluice._sluice.route_rows and route_columns,
// each row's target by the hash of its key bytes (key_routing.cc), for rows
// that travel otherwise than through a keyed flow: numpy records packed by
// hand, and Arrow batches (sluice/batches.py: push(batch, to="key")).
#pragma once

#include <nanobind/nanobind.h>

namespace sluice::python {

namespace nb = nanobind;

void bind_key_routing(nb::module_& m);

}  // namespace sluice::python
