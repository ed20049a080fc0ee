// sluice/version.h: the library version and the control-protocol version.
#pragma once

#include <cstdint>

namespace sluice {
inline constexpr const char* kVersion = "0.1.0";
// Carried in every control message; peers with another version are refused
// with an error naming both. 3: ERASE and UNDECLARE (flows and regions can be
// destroyed and their names used again).
inline constexpr uint16_t kProtocolVersion = 3;
}  // namespace sluice
