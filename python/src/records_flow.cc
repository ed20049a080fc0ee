#include "records_flow.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "declare.h"

namespace sluice::python {

uint32_t word_bytes_for(uint32_t itemsize) {
  for (uint32_t w : {8u, 4u, 2u}) {
    if (itemsize % w == 0) return w;
  }
  return 1;
}

uint32_t segment_bytes_for(uint32_t itemsize, uint32_t requested) {
  const uint32_t want = requested != 0 ? requested : 8192;
  const uint32_t records = std::max<uint32_t>(1, want / itemsize);
  return records * itemsize;
}

// A record of N bytes as one flow element (8-byte aligned).
template <size_t N>
struct alignas(8) Block {
  std::byte bytes[N];
};

namespace {

FlowFailure failure_of(Status s, const std::string& error, std::optional<LostPeer> lost) {
  FlowFailure f;
  f.status = s;
  f.message = error.empty() ? std::string(to_string(s)) : error;
  if (s == Status::kPeerLost && lost) f.rank = lost->rank;
  return f;
}

}  // namespace

template <class W>
struct RecordsFlow::Ends {
  using ShuffleWords = ShuffleSpec<W>;
  using ReplicateWords = ReplicateSpec<W>;

  Ends(Cluster& c, const RecordsFlowSpec& s)
      : cluster(c),
        words_per_record(s.itemsize / sizeof(W)),
        library_routes(!s.replicate && words_per_record == 1 && s.key_offset.has_value()) {
    const uint32_t seg = segment_bytes_for(s.itemsize, s.segment_bytes);
    if (s.replicate) {
      ReplicateWords spec(s.name);
      spec.sources(s.sources).targets(s.targets).type_tag(s.type_tag).segment_bytes(seg);
      if (s.ring_segments != 0) spec.ring_segments(s.ring_segments);
      replicate_spec = spec;
      declared = declare_in(cluster, s.view, "flow '" + s.name + "'", spec);
    } else {
      ShuffleWords spec(s.name);
      spec.sources(s.sources).targets(s.targets).type_tag(s.type_tag).segment_bytes(seg);
      if (s.ring_segments != 0) spec.ring_segments(s.ring_segments);
      FlowSpec declared_as = spec.spec();
      if (library_routes) {
        // One element per record: the flow routes it by its key, as a C++
        // flow declared with .key() does (and RecordsFlow::route agrees).
        detail::FlowSpecAccess::route(declared_as) = Route::kHashKey;
        detail::FlowSpecAccess::key_offset(declared_as) = *s.key_offset;
        detail::FlowSpecAccess::key_size(declared_as) = s.key_size;
      } else {
        // Routed here (RecordsFlow::route), a record's words together.
        detail::FlowSpecAccess::route(declared_as) = Route::kExplicit;
      }
      shuffle_spec = spec;
      declared = declare_in(cluster, s.view, "flow '" + s.name + "'", declared_as);
    }
  }

  uint32_t ring_segments() const {
    return replicate_spec ? replicate_spec->spec().effective_ring_segments()
                          : shuffle_spec->spec().effective_ring_segments();
  }

  Source<W> make_source(uint32_t slot) {
    return replicate_spec ? cluster.source(*replicate_spec, slot)
                          : cluster.source(*shuffle_spec, slot);
  }
  Target<W> make_target(uint32_t slot) {
    return replicate_spec ? cluster.target(*replicate_spec, slot)
                          : cluster.target(*shuffle_spec, slot);
  }

  // Each record's target, repeated for each of its words.
  std::span<const uint32_t> word_targets(const uint32_t* targets, size_t n) {
    word_target.resize(n * words_per_record);
    for (size_t i = 0; i < n; ++i) {
      std::fill_n(word_target.begin() + static_cast<ptrdiff_t>(i * words_per_record),
                  words_per_record, targets[i]);
    }
    return word_target;
  }

  std::optional<FlowFailure> push(const std::byte* data, size_t n, const uint32_t* targets,
                                  Deadline deadline) {
    const std::span<const W> words(reinterpret_cast<const W*>(data), n * words_per_record);
    const Status s = replicate_spec || targets == nullptr
                         ? source.push(words, deadline)
                         : source.push_to(word_targets(targets, n), words, deadline);
    if (s == Status::kOk) return std::nullopt;
    return failure_of(s, source.error(), source.lost_peer());
  }

  Status try_push(const std::byte* data, size_t n, const uint32_t* targets, size_t* done,
                  FlowFailure* failure) {
    const std::span<const W> words(reinterpret_cast<const W*>(data), n * words_per_record);
    const Status s =
        replicate_spec || targets == nullptr
            ? source.try_push(words.subspan(*done))
            : source.try_push_to(word_targets(targets, n).subspan(*done), words.subspan(*done));
    *done += source.last_pushed();
    if (s != Status::kOk && s != Status::kWouldBlock) {
      *failure = failure_of(s, source.error(), source.lost_peer());
    }
    return s;
  }

  static void append(RecordBytes* out, std::span<const W> batch) {
    const auto* p = reinterpret_cast<const std::byte*>(batch.data());
    out->insert(out->end(), p, p + batch.size_bytes());
  }

  RecordBytes exchange(const std::byte* data, size_t n, const uint32_t* targets, uint32_t slot,
                       Deadline deadline) {
    RecordBytes received;
    Worker w;
    w.add(make_target(slot), [&received](std::span<const W> batch) { append(&received, batch); });
    Source<W>& src = w.add_output(make_source(slot));
    const std::span<const W> words(reinterpret_cast<const W*>(data), n * words_per_record);
    Status s = replicate_spec || targets == nullptr
                   ? w.push(src, words, deadline)
                   : w.push_to(src, word_targets(targets, n), words, deadline);
    if (s == Status::kOk) s = w.close(src, deadline);
    if (s != Status::kOk) {
      const FlowFailure f = failure_of(s, src.error(), src.lost_peer());
      throw_failure(f);
    }
    s = w.run(deadline);
    if (s != Status::kEndOfFlow) {
      const std::optional<WorkerFailure> wf = w.failure();
      FlowFailure f;
      f.status = s;
      f.message = wf ? wf->error : std::string(to_string(s));
      if (wf && wf->peer) f.rank = wf->peer->rank;
      throw_failure(f);
    }
    return received;
  }

  [[noreturn]] static void throw_failure(const FlowFailure& f) {
    if (f.status == Status::kPeerLost) throw PeerLostError(f.rank.value_or(0), f.message);
    if (f.status == Status::kTimeout) throw Error(ErrorCode::kTimeout, f.message);
    if (f.status == Status::kInvalid) throw Error(ErrorCode::kInvalidArgument, f.message);
    throw Error(ErrorCode::kInternal, std::string(to_string(f.status)) + ": " + f.message);
  }

  Cluster& cluster;
  size_t words_per_record;
  bool library_routes;  // pushed without targets: the flow routes by key
  std::optional<ShuffleWords> shuffle_spec;
  std::optional<ReplicateWords> replicate_spec;
  DeclaredFlow declared;
  Source<W> source;
  Target<W> target;
  std::vector<uint32_t> word_target;
};

struct RecordsFlow::Impl {
  std::variant<std::unique_ptr<Ends<uint8_t>>, std::unique_ptr<Ends<uint16_t>>,
               std::unique_ptr<Ends<uint32_t>>, std::unique_ptr<Ends<uint64_t>>,
               std::unique_ptr<Ends<Block<16>>>, std::unique_ptr<Ends<Block<32>>>>
      ends;
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit([&](auto& e) -> decltype(auto) { return f(*e); }, ends);
  }
};

RecordsFlow::RecordsFlow(Cluster& cluster, const RecordsFlowSpec& spec)
    : spec_(spec), impl_(std::make_unique<Impl>()) {
  if (spec_.itemsize == 0) throw Error(ErrorCode::kInvalidArgument, "a record of 0 bytes");
  if (spec_.view) {
    // The flow's endpoints are the members' (as Cluster::declare(view, ...)
    // takes them): target indexes and the key routing count those.
    const auto members_only = [&](std::vector<Endpoint>& eps) {
      std::erase_if(eps, [&](const Endpoint& e) { return !spec_.view->contains(e.rank); });
    };
    members_only(spec_.sources);
    members_only(spec_.targets);
    if (spec_.sources.empty() || spec_.targets.empty()) {
      throw Error(ErrorCode::kPeerLost,
                  "flow '" + spec_.name + "': no " + (spec_.sources.empty() ? "source" : "target") +
                      " of it is a member of view " + std::to_string(spec_.view->epoch));
    }
  }
  if (spec_.key_offset &&
      (spec_.key_size == 0 || *spec_.key_offset + spec_.key_size > spec_.itemsize)) {
    throw Error(ErrorCode::kInvalidArgument, "the routing key lies outside the record");
  }
  // Records of 16 and 32 bytes (a key and a value, two of each) travel as
  // one element each: a push is one copy and, with a key, the flow's own
  // routing per record (other sizes: words, routed here).
  if (spec_.itemsize == 16) {
    impl_->ends = std::make_unique<Ends<Block<16>>>(cluster, spec_);
  } else if (spec_.itemsize == 32) {
    impl_->ends = std::make_unique<Ends<Block<32>>>(cluster, spec_);
  } else {
    make_word_ends(cluster);
  }
  library_routes_ = impl_->visit([](auto& e) { return e.library_routes; });
}

void RecordsFlow::make_word_ends(Cluster& cluster) {
  switch (word_bytes_for(spec_.itemsize)) {
    case 8:
      impl_->ends = std::make_unique<Ends<uint64_t>>(cluster, spec_);
      break;
    case 4:
      impl_->ends = std::make_unique<Ends<uint32_t>>(cluster, spec_);
      break;
    case 2:
      impl_->ends = std::make_unique<Ends<uint16_t>>(cluster, spec_);
      break;
    default:
      impl_->ends = std::make_unique<Ends<uint8_t>>(cluster, spec_);
      break;
  }
}

RecordsFlow::~RecordsFlow() = default;

RecordsFlow::Impl& RecordsFlow::impl() {
  if (!impl_) {
    throw Error(ErrorCode::kInvalidArgument,
                "flow '" + spec_.name + "' ended when its job was left (Cluster.leave())");
  }
  return *impl_;
}

bool RecordsFlow::end_if_unpinned() {
  if (kept_.pinned()) return false;
  impl_.reset();
  return true;
}

void RecordsFlow::route(const std::byte* data, size_t n, uint32_t* out) const {
  const uint32_t nt = num_targets();
  const size_t size = spec_.itemsize;
  const size_t off = spec_.key_offset.value_or(0);
  const size_t len = spec_.key_offset ? spec_.key_size : size;
  for (size_t i = 0; i < n; ++i) {
    const std::span<const std::byte> key(data + i * size + off, len);
    out[i] = reduce_hash(hash_bytes(key), nt);
  }
}

void RecordsFlow::open_source(uint32_t slot) {
  impl().visit([&](auto& e) {
    if (e.source) throw Error(ErrorCode::kInvalidArgument, "this flow's source is open already");
    e.source = e.make_source(slot);
  });
}

void RecordsFlow::open_target(uint32_t slot) {
  impl().visit([&](auto& e) {
    if (e.target) throw Error(ErrorCode::kInvalidArgument, "this flow's target is open already");
    e.target = e.make_target(slot);
  });
}

std::optional<FlowFailure> RecordsFlow::push(const std::byte* data, size_t n,
                                             const uint32_t* targets, Deadline deadline) {
  return impl().visit([&](auto& e) -> std::optional<FlowFailure> {
    if (!e.source) throw Error(ErrorCode::kInvalidArgument, "the source is not open");
    return e.push(data, n, targets, deadline);
  });
}

std::optional<FlowFailure> RecordsFlow::flush(Deadline deadline) {
  return impl().visit([&](auto& e) -> std::optional<FlowFailure> {
    if (!e.source) throw Error(ErrorCode::kInvalidArgument, "the source is not open");
    const Status s = e.source.flush(deadline);
    if (s == Status::kOk) return std::nullopt;
    return failure_of(s, e.source.error(), e.source.lost_peer());
  });
}

std::optional<FlowFailure> RecordsFlow::close(Deadline deadline) {
  return impl().visit([&](auto& e) -> std::optional<FlowFailure> {
    if (!e.source) throw Error(ErrorCode::kInvalidArgument, "the source is not open");
    const Status s = e.source.close_and_wait(deadline);
    if (s == Status::kOk) return std::nullopt;
    return failure_of(s, e.source.error(), e.source.lost_peer());
  });
}

Status RecordsFlow::try_push(const std::byte* data, size_t n, const uint32_t* targets, size_t* done,
                             FlowFailure* failure) {
  return impl().visit([&](auto& e) -> Status {
    if (!e.source) throw Error(ErrorCode::kInvalidArgument, "the source is not open");
    return e.try_push(data, n, targets, done, failure);
  });
}

Status RecordsFlow::try_close(FlowFailure* failure) {
  return impl().visit([&](auto& e) -> Status {
    if (!e.source) throw Error(ErrorCode::kInvalidArgument, "the source is not open");
    const Status s = e.source.close_and_wait(Deadline::min());
    if (s == Status::kTimeout || s == Status::kWouldBlock) return Status::kWouldBlock;
    if (s != Status::kOk) *failure = failure_of(s, e.source.error(), e.source.lost_peer());
    return s;
  });
}

void RecordsFlow::abort() {
  impl().visit([](auto& e) { e.source.abort(); });
}

Status RecordsFlow::consume(Deadline deadline, RecordBytes* out, FlowFailure* failure) {
  release_queued();
  return impl().visit([&](auto& e) -> Status {
    if (!e.target) throw Error(ErrorCode::kInvalidArgument, "the target is not open");
    auto batch = e.target.consume(deadline);
    if (batch) {
      e.append(out, *batch);
      return Status::kOk;
    }
    const Status s = batch.status();
    if (s != Status::kEndOfFlow) *failure = failure_of(s, e.target.error(), e.target.lost_peer());
    return s;
  });
}

Status RecordsFlow::consume_kept(Deadline deadline, Kept* out, FlowFailure* failure) {
  release_queued();
  return impl().visit([&](auto& e) -> Status {
    if (!e.target) throw Error(ErrorCode::kInvalidArgument, "the target is not open");
    const std::string full = kept_.ring_full(e.ring_segments(), spec_.sources, "arrays");
    if (!full.empty()) {
      failure->status = Status::kInvalid;
      failure->message = full;
      return Status::kInvalid;
    }
    auto batch = e.target.consume(deadline);
    if (!batch) {
      const Status s = batch.status();
      if (s != Status::kEndOfFlow) *failure = failure_of(s, e.target.error(), e.target.lost_peer());
      return s;
    }
    out->data = reinterpret_cast<const std::byte*>(batch->data());
    out->bytes = batch->size_bytes();
    out->source = e.target.last_source();
    out->id = e.target.keep();
    kept_.kept(out->source, out->id);
    return Status::kOk;
  });
}

void RecordsFlow::release_queued() {
  if (!impl_) return;
  impl().visit([&](auto& e) { kept_.release_queued([&](uint64_t id) { e.target.release(id); }); });
}

RecordBytes RecordsFlow::exchange(const std::byte* data, size_t n, const uint32_t* targets,
                                  uint32_t slot, Deadline deadline) {
  return impl().visit([&](auto& e) {
    if (e.source || e.target) {
      throw Error(ErrorCode::kInvalidArgument,
                  "exchange() opens this rank's source and target itself: this flow's are open "
                  "already");
    }
    return e.exchange(data, n, targets, slot, deadline);
  });
}

}  // namespace sluice::python
