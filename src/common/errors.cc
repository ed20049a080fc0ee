#include "sluice/errors.h"

#include <cstdio>
#include <cstdlib>

#include "common/check.h"

namespace sluice {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kSpecMismatch:
      return "SpecMismatch";
    case ErrorCode::kPeerLost:
      return "PeerLost";
    case ErrorCode::kTimeout:
      return "Timeout";
    case ErrorCode::kBootstrap:
      return "Bootstrap";
    case ErrorCode::kRegistry:
      return "Registry";
    case ErrorCode::kProtocol:
      return "Protocol";
    case ErrorCode::kAuth:
      return "Auth";
    case ErrorCode::kResource:
      return "Resource";
    case ErrorCode::kInternal:
      return "Internal";
    case ErrorCode::kViewChanged:
      return "ViewChanged";
  }
  return "Unknown";
}

const char* to_string(Status status) {
  switch (status) {
    case Status::kOk:
      return "Ok";
    case Status::kWouldBlock:
      return "WouldBlock";
    case Status::kEndOfFlow:
      return "EndOfFlow";
    case Status::kTimeout:
      return "Timeout";
    case Status::kPeerLost:
      return "PeerLost";
    case Status::kClosed:
      return "Closed";
    case Status::kInvalid:
      return "Invalid";
    case Status::kGap:
      return "Gap";
    case Status::kViewChanged:
      return "ViewChanged";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code) {}

namespace detail {
void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "sluice: internal invariant violated: %s at %s:%d%s%s\n", cond, file, line,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}
}  // namespace detail

}  // namespace sluice
