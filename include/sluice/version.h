/// @file
/// sluice/version.h: the library version and the control-protocol version.
#pragma once

#include <cstdint>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {
/// The library version, "major.minor.patch" (`sluice version` prints it).
inline constexpr const char* kVersion = "1.1.0";  // = the CMake project version (checked)
/// Carried in every control message; peers with another version are refused
/// with an error naming both. 3: ERASE and UNDECLARE (flows and regions can be
/// destroyed and their names used again). 4: COUNTERS (ranks report their
/// flow counters to the registry with their heartbeats). 5: PEER_EVENT
/// carries the rank's incarnation (a rank that died may join again). 6:
/// PEER_EVENT carries the membership epoch; GATHER (view-scoped allgather).
/// 7: HELLO and PEER_EVENT carry the fence identity. 8: DECLARE carries a
/// view's epoch (flows declared in a view, Cluster::declare(view, spec)).
/// 9: WELCOME names the rank joined as (a spare learns whose place it takes).
inline constexpr uint16_t kProtocolVersion = 9;
/// True if this process honours the test switches (SLUICE_TEST_* variables
/// that make a flow die or reorder on purpose): only test programs built in
/// the sluice tree, which link the library with its test hooks live. The
/// installed library always returns false. Any thread may call it.
bool test_hooks_enabled();
}  // namespace sluice
SLUICE_API_END
