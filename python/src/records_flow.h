// python/src/records_flow.h: a flow of fixed-size records whose size is
// known only at run time (a numpy structured dtype's itemsize), on the
// public sluice API alone. The records travel as runs of words (the widest
// of 8, 4, 2 or 1 bytes that divides the record size) in a typed flow whose
// segments hold whole records: every segment's payload is a multiple of the
// record size, so a record never straddles two segments and every batch a
// target receives is whole records. The record's dtype (and the routing
// key) go into the flow's type tag, so that ranks that disagree fail at
// declare with SpecMismatch. Routing is done here, by the same hash that a
// C++ flow declared with .key() uses (sluice/hash.h), and pushed by target.
#pragma once

#include <sluice/sluice.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kept_segments.h"

namespace sluice::python {

// A failure a flow call reported (its Status, what error() said, and the
// lost rank after kPeerLost); the module turns it into a Python exception.
struct FlowFailure {
  Status status = Status::kOk;
  std::string message;
  std::optional<uint32_t> rank;
};

// What a Python flow is: its name, kind and records.
struct RecordsFlowSpec {
  std::string name;
  bool replicate = false;
  uint32_t itemsize = 0;  // bytes per record
  std::string type_tag;   // the dtype (and key) as the Python side describes it
  std::vector<Endpoint> sources, targets;
  std::optional<uint32_t> key_offset;  // routing key bytes [offset, offset + size)
  uint32_t key_size = 0;
  uint32_t segment_bytes = 0;  // 0: about 8 KiB of whole records
  uint32_t ring_segments = 0;  // 0: the library's default
  // Declared in this membership view (Cluster::declare(view, spec)): the
  // flow re-forms among its members; only the endpoints of members take part.
  std::optional<View> view;
};

// The bytes received by exchange() or a target: whole records.
using RecordBytes = std::vector<std::byte>;

// One declared flow of runtime-sized records and its ends on this rank.
// Its source (push, flush, close) and its target (consume) may each be used
// by one thread, at the same time; everything else by one thread alone.
class RecordsFlow {
 public:
  // Declares the flow (every participant must, with an equal spec). Throws
  // sluice::Error (kInvalidArgument naming the problem, kSpecMismatch,
  // kTimeout, kPeerLost) as Cluster::declare does, and in a view
  // Error(kViewChanged) when the view is not the current one or changes
  // before every member declared. In a view, spec().sources and targets are
  // the members' endpoints only: the flow's.
  RecordsFlow(Cluster& cluster, const RecordsFlowSpec& spec);
  ~RecordsFlow();
  RecordsFlow(const RecordsFlow&) = delete;
  RecordsFlow& operator=(const RecordsFlow&) = delete;

  const RecordsFlowSpec& spec() const { return spec_; }
  // True if push() and exchange() without targets leave the routing to the
  // flow (records of one element with a key); else they need targets
  // (route() computes them).
  bool routes_itself() const { return library_routes_; }
  uint32_t num_targets() const { return static_cast<uint32_t>(spec_.targets.size()); }
  // The target index of each of `n` records at `data` (the flow's key,
  // else the whole record), as sluice::hash_bytes and reduce_hash route.
  void route(const std::byte* data, size_t n, uint32_t* out) const;

  // This rank's source and target of endpoint slot `slot`; each opens once.
  void open_source(uint32_t slot);
  void open_target(uint32_t slot);
  // Pushes `n` records at `data` (to `targets[i]` each, or routed by key;
  // a replicate flow sends each to every target). Waits for credit until
  // `deadline`.
  std::optional<FlowFailure> push(const std::byte* data, size_t n, const uint32_t* targets,
                                  Deadline deadline);
  // As push, from word `*done` of the run on, never waiting (for a Worker,
  // which delivers its inputs between tries): kOk, kWouldBlock with *done
  // moved past what went, or a failure (in *failure).
  Status try_push(const std::byte* data, size_t n, const uint32_t* targets, size_t* done,
                  FlowFailure* failure);
  // close() one step at a time: kOk once every target confirmed the end,
  // kWouldBlock until then (call again), or a failure.
  Status try_close(FlowFailure* failure);
  std::optional<FlowFailure> flush(Deadline deadline);
  std::optional<FlowFailure> close(Deadline deadline);
  void abort();
  // The next batch of records, appended to *out (a copy: the ring segment is
  // released at the next call). kOk, kEndOfFlow, or a failure.
  Status consume(Deadline deadline, RecordBytes* out, FlowFailure* failure);

  // A batch left where it is in the ring (Target::keep): valid until
  // release_later(id) and the next call of this target after it.
  struct Kept {
    const std::byte* data = nullptr;
    size_t bytes = 0;
    uint64_t id = 0;
    uint32_t source = 0;
  };
  // The next batch, kept. kOk, kEndOfFlow, a failure, or kInvalid (in
  // *failure) if every segment of some source's ring is kept already: the
  // flow could not go on.
  Status consume_kept(Deadline deadline, Kept* out, FlowFailure* failure);
  // Gives a kept batch back, from any thread: the target releases it at its
  // next call (its own thread's), or when the flow is destroyed.
  void release_later(uint64_t id) { kept_.release_later(id); }

  // Arrays over kept batches alive (the module counts them in and out).
  void pin() { kept_.pin(); }
  void unpin() { kept_.unpin(); }
  // Ends the flow (its ends and declaration) if no array holds a batch of
  // it, and returns true; else false, and the flow stays as it is (its
  // rings mapped) for the arrays. Later calls throw. For the job's leave(),
  // before which every handle must be gone.
  bool end_if_unpinned();

  // The flow as an all-to-all: this rank's source and target of `slot`
  // together in one Worker, pushing the records while taking what arrives,
  // until every source closed. Returns what this rank's target received.
  RecordBytes exchange(const std::byte* data, size_t n, const uint32_t* targets, uint32_t slot,
                       Deadline deadline);

 private:
  struct Impl;
  template <class W>
  struct Ends;
  // Releases what release_later() queued (the target's thread).
  void release_queued();
  void make_word_ends(Cluster& cluster);
  // The ends, or Error(kInvalidArgument) once the flow ended.
  Impl& impl();

  RecordsFlowSpec spec_;
  std::unique_ptr<Impl> impl_;
  KeptSegments kept_;
  bool library_routes_ = false;
};

// The word type's width for a record size: 8, 4, 2 or 1.
uint32_t word_bytes_for(uint32_t itemsize);
// The segment payload for records of `itemsize` bytes: whole records, about
// 8 KiB (at least one record), plus an ordered flow's prefix.
uint32_t segment_bytes_for(uint32_t itemsize, uint32_t requested);

}  // namespace sluice::python
