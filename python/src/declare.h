// python/src/declare.h: declaring a flow of the Python package's, as given
// or in a membership view, with the library's answer as an exception.
#pragma once

#include <sluice/sluice.h>

#include <optional>
#include <string>

namespace sluice::python {

// Declares `spec` as given, or in `view` (the flow then re-forms among the
// view's members): kViewChanged is an Error of that code, another refusal
// an Error(kInvalidArgument); `what` names the flow in them ("flow 'x'").
template <class Spec>
DeclaredFlow declare_in(Cluster& c, const std::optional<View>& view, const std::string& what,
                        const Spec& spec) {
  if (!view) return c.declare(spec);
  Result<DeclaredFlow> d = c.declare(*view, spec);
  if (d) return std::move(*d);
  if (d.status() == Status::kViewChanged) {
    throw Error(ErrorCode::kViewChanged, what + " was declared in view " +
                                             std::to_string(view->epoch) +
                                             ", which is no longer the current one");
  }
  throw Error(ErrorCode::kInvalidArgument,
              what + " could not be declared: " + to_string(d.status()));
}

}  // namespace sluice::python
