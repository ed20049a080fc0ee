/// @file
/// sluice/errors.h: the two ways sluice reports failure.
///
/// Setup and the control plane (joining a cluster, declaring flows, opening
/// sources and targets, barriers) throw exceptions derived from sluice::Error.
/// Each carries an ErrorCode and a message that says what happened, to what,
/// and what to do about it.
///
/// The data plane (push, flush, close, consume, the region operations) and
/// the ending verbs (close, abort, DeclaredFlow::destroy, Cluster::leave)
/// never throw for an outcome a caller handles. They return a Status, or a
/// Result carrying one with the value (consume's batch, an atomic's previous
/// word), and on failure the handle's error() says what happened and its
/// lost_peer() which rank it is about.
///
/// Thread safety: all types here are values; share them freely.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "sluice/export.h"

SLUICE_API_BEGIN
namespace sluice {

/// What went wrong, for callers that branch on the kind of failure.
enum class ErrorCode : uint8_t {
  kInvalidArgument,  ///< a bad option, spec, endpoint or record
  kSpecMismatch,     ///< participants declared the same flow differently
  kPeerLost,         ///< a peer process died, left or stopped heart-beating
  kTimeout,          ///< a deadline passed before the operation could complete
  kBootstrap,        ///< the environment does not say how to join the job
  kRegistry,         ///< the registry refused or failed a request
  kProtocol,         ///< a malformed or incompatible control message
  kAuth,             ///< the job secret was missing or wrong
  kResource,         ///< the OS refused memory, a file descriptor or a mapping
  kInternal,         ///< a bug in sluice; please report it
  kViewChanged,      ///< the membership view changed during a view-scoped call
};

/// A short stable name for `code`, e.g. "PeerLost".
const char* to_string(ErrorCode code);

/// Base of every exception sluice throws.
class Error : public std::runtime_error {
 public:
  /// An error of kind `code`; what() returns `message`.
  Error(ErrorCode code, const std::string& message);
  /// What went wrong.
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

/// Thrown by setup calls when a peer is gone; the data plane returns
/// Status::kPeerLost instead.
class PeerLostError : public Error {
 public:
  /// A kPeerLost error about `rank`; what() returns `message`.
  PeerLostError(uint32_t rank, const std::string& message)
      : Error(ErrorCode::kPeerLost, message), rank_(rank) {}
  /// The rank that was lost.
  uint32_t rank() const { return rank_; }

 private:
  uint32_t rank_;
};

/// Result of a data-plane call. Never ignore it: kPeerLost means the flow
/// cannot deliver everything it promised. Each status is either retryable
/// (the same call may succeed later; nothing was lost or half-done) or
/// terminal (every later call on that source or target returns it again).
enum class Status : uint8_t {
  kOk = 0,       ///< success
  kWouldBlock,   ///< retryable. A try_* call that would have to wait:
                 ///< try_push: the target's ring (or the provider's queue) is
                 ///< full, nothing was written; try_consume: nothing is ready
  kEndOfFlow,    ///< terminal, success. consume: every source closed and every
                 ///< record was consumed
  kTimeout,      ///< retryable. A call with a deadline: it passed first.
                 ///< close() after kTimeout resumes (nothing is sent twice)
  kPeerLost,     ///< terminal. A peer this call depends on is gone (died, left,
                 ///< destroyed its end, or abort()ed); error() names it
  kClosed,       ///< terminal. push after close() or abort()
  kInvalid,      ///< that call only: a bad argument, e.g.\ an explicit target out
                 ///< of range or a record larger than a segment; see error()
  kGap,          ///< retryable. consume on an ordered replicate flow: a sequence
                 ///< number never arrived (see Target::gap()); the next consume
                 ///< goes on after it
  kViewChanged,  ///< retryable in the new view. A call scoped to one membership
                 ///< view (Cluster::allgather(view, ...)): the job's membership
                 ///< changed first; Cluster::view() has the new one
};

/// A short stable name for `status`, e.g. "WouldBlock".
const char* to_string(Status status);

/// A value or the Status that explains its absence, as consume() and the
/// region atomics return them (std::expected's shape, with Status as the
/// error): tests true and holds a value exactly when status() is kOk.
/// @code
///   while (auto batch = target.consume())
///     for (const Order& o : *batch) total += o.amount;
///   // here batch.status() is kEndOfFlow, or why the flow failed
///   auto old = region.fetch_add(0, 1);
///   if (!old) { ... old.status(), region.error() ... } else use(*old);
/// @endcode
template <class V>
class [[nodiscard]] Result {
 public:
  /// A value (status() kOk).
  Result(V value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  /// No value, for this reason. REQUIRES: status is not kOk.
  Result(Status status) : status_(status) {}  // NOLINT(google-explicit-constructor)

  /// kOk with a value, else why there is none.
  Status status() const { return status_; }
  /// status() == kOk.
  bool has_value() const { return status_ == Status::kOk; }
  /// has_value().
  explicit operator bool() const { return has_value(); }
  /// The value. REQUIRES: has_value() (without one it is a default V).
  ///@{
  const V& value() const { return value_; }
  V& value() { return value_; }
  const V& operator*() const { return value_; }
  V& operator*() { return value_; }
  const V* operator->() const { return &value_; }
  V* operator->() { return &value_; }
  ///@}

 private:
  V value_{};
  Status status_ = Status::kOk;
};

/// Who a kPeerLost is about, for callers that act on it (fence the rank,
/// re-route its work): the rank whose process died, left, stopped
/// heart-beating, destroyed or aborted its end, or sent corrupt data, and its
/// host where the registry knew it. Where several were lost, the first seen.
struct LostPeer {
  uint32_t rank = 0;  ///< the rank that was lost
  std::string host;   ///< hostname, or empty if unknown
};

}  // namespace sluice
SLUICE_API_END
