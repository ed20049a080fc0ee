// python/src/declare.h: membership views as Python passes them, and
// declaring a flow of the Python package's, as given or in a membership
// view, with the library's answer as an exception.
#pragma once

#include <sluice/sluice.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::python {

// A membership view as Python sees it: (epoch, members, incarnations).
using ViewTuple = std::tuple<uint64_t, std::vector<uint32_t>, std::vector<uint32_t>>;
inline View to_view(const ViewTuple& t) {
  View v;
  v.epoch = std::get<0>(t);
  v.members = std::get<1>(t);
  v.incarnations = std::get<2>(t);
  std::sort(v.members.begin(), v.members.end());
  return v;
}

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
