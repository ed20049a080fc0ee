// python/src/py_errors.h: the package's exception classes (made in
// module.cc's NB_MODULE) and raising them, and a Python timeout as a
// deadline: what every binding file of the module shares.
#pragma once

#include <nanobind/nanobind.h>
#include <sluice/sluice.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

namespace sluice::python {

namespace nb = nanobind;

// The package's exception classes: sluice.Error and its subclasses.
struct Exceptions {
  nb::handle error, peer_lost, spec_mismatch, timeout, invalid, bootstrap, closed, view_changed;
};
extern Exceptions exc;

// A timeout in seconds (None: no limit) as a deadline.
inline Deadline deadline_of(std::optional<double> seconds) {
  if (!seconds) return kForever;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, *seconds)));
}

// Raises `type(message)`, with .rank set where a rank is given.
[[noreturn]] inline void raise(nb::handle type, const std::string& message,
                               std::optional<uint32_t> rank = std::nullopt) {
  nb::object e = type(message);
  if (rank) e.attr("rank") = *rank;
  PyErr_SetObject(type.ptr(), e.ptr());
  throw nb::python_error();
}

// Raises the package's exception for a call that returned `s`: PeerLost
// (with .rank where given), Timeout, InvalidArgument, Closed, ViewChanged,
// else Error (its message led by the status).
[[noreturn]] inline void raise_status(Status s, const std::string& message,
                                      std::optional<uint32_t> rank = std::nullopt) {
  switch (s) {
    case Status::kPeerLost:
      raise(exc.peer_lost, message, rank);
    case Status::kTimeout:
      raise(exc.timeout, message);
    case Status::kInvalid:
      raise(exc.invalid, message);
    case Status::kClosed:
      raise(exc.closed, message);
    case Status::kViewChanged:
      raise(exc.view_changed, message);
    default:
      raise(exc.error, std::string(to_string(s)) + ": " + message);
  }
}

}  // namespace sluice::python
