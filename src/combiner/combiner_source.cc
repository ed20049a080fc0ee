// The sending half of a combiner flow: a bounded table of groups in front
// of a byte-record source, sending the table's partials when it fills.
#include <cstring>
#include <span>
#include <vector>

#include "combiner/group_table.h"
#include "combiner/partial.h"
#include "sluice/combiner.h"

namespace sluice::detail {
namespace {

class CombinerSourceImpl final : public CombinerSourceCore {
 public:
  CombinerSourceImpl(std::shared_ptr<const CombineLayout> layout, size_t local_groups,
                     std::unique_ptr<SourceCore> flow)
      : layout_(std::move(layout)),
        flow_(flow.get()),
        out_(source_from_core<Bytes>(std::move(flow))) {
    layout_->validate();
    table_ = GroupTable::bounded(layout_, local_groups);
    partial_.assign(layout_->partial_bytes(), std::byte{0});
    std::memcpy(partial_.data() + kPartialTagOffset, &layout_->tag, 4);
  }

  Status push(const std::byte* rec, Deadline deadline, bool try_only) override {
    if (accepting_ && table_.add(rec)) [[likely]]
      return Status::kOk;
    return push_slow(rec, deadline, try_only);
  }
  Status flush(Deadline deadline) override;
  Status close(Deadline deadline) override;
  void abort() override {
    closed_ = true;
    accepting_ = false;
    draining_ = false;
    out_.abort();
  }
  const std::string& error() const override { return error_.empty() ? out_.error() : error_; }
  std::optional<LostPeer> lost_peer() const override { return out_.lost_peer(); }
  uint64_t table_flushes() const override { return table_flushes_; }
  uint64_t partials_sent() const override { return partials_sent_; }
  SourceCore* flow_source() override { return flow_; }
  uint32_t record_bytes() const override { return layout_->record_size; }

 private:
  // Everything push() may have to do beyond folding into the table: send
  // the full table's partials (resuming where a previous call stopped),
  // then fold `rec` in.
  Status push_slow(const std::byte* rec, Deadline deadline, bool try_only);
  // Sends the table's partials from cursor_ on, then clears it.
  Status drain(Deadline deadline, bool try_only);

  std::shared_ptr<const CombineLayout> layout_;
  GroupTable table_;
  SourceCore* flow_;  // out_'s core, owned by it
  Source<Bytes> out_;
  std::vector<std::byte> partial_;  // one partial being built
  std::string error_;
  bool accepting_ = true;  // false while draining or once closed
  bool draining_ = false;
  bool closed_ = false;
  size_t cursor_ = 0;
  uint64_t table_flushes_ = 0;
  uint64_t partials_sent_ = 0;
};

Status CombinerSourceImpl::drain(Deadline deadline, bool try_only) {
  const size_t slot_bytes = size_t{layout_->slots} * 8;
  for (; cursor_ < table_.capacity(); ++cursor_) {
    const uint64_t* e = table_.entry(cursor_);
    if (e == nullptr) continue;
    std::memcpy(partial_.data() + kPartialKeyOffset, e, 8);
    std::memcpy(partial_.data() + kPartialCountOffset, e + 1, 8);
    std::memcpy(partial_.data() + kPartialSlotsOffset, e + 2, slot_bytes);
    const std::span<const std::byte> rec(partial_.data(), partial_.size());
    const Status s = try_only ? out_.try_push(rec) : out_.push(rec, deadline);
    if (s != Status::kOk) return s;  // this entry goes again on the next call
    ++partials_sent_;
  }
  table_.clear();
  cursor_ = 0;
  draining_ = false;
  accepting_ = !closed_;
  return Status::kOk;
}

Status CombinerSourceImpl::push_slow(const std::byte* rec, Deadline deadline, bool try_only) {
  if (closed_) {
    error_ = "combiner '" + layout_->name + "': push after close() or abort()";
    return Status::kClosed;
  }
  error_.clear();
  if (!draining_) {
    // The table is full and `rec` starts a new group: send the table.
    ++table_flushes_;
    draining_ = true;
    accepting_ = false;
  }
  const Status s = drain(deadline, try_only);
  if (s != Status::kOk) return s;
  const bool added = table_.add(rec);
  // An empty table always has room for one group.
  if (!added) [[unlikely]] {
    error_ =
        "combiner '" + layout_->name + "': internal error: an empty local table refused a group";
    return Status::kInvalid;
  }
  return Status::kOk;
}

Status CombinerSourceImpl::flush(Deadline deadline) {
  error_.clear();
  if (!closed_ && !draining_ && table_.size() > 0) {
    draining_ = true;
    accepting_ = false;
  }
  if (draining_) {
    const Status s = drain(deadline, false);
    if (s != Status::kOk) return s;
  }
  return out_.flush(deadline);
}

Status CombinerSourceImpl::close(Deadline deadline) {
  error_.clear();
  if (!closed_) {
    if (!draining_ && table_.size() > 0) draining_ = true;
    accepting_ = false;
    if (draining_) {
      const Status s = drain(deadline, false);
      if (s != Status::kOk) return s;
    }
    closed_ = true;
    accepting_ = false;
  }
  return out_.close(deadline);
}

}  // namespace

std::unique_ptr<CombinerSourceCore> make_combiner_source(const CombinerSpecCore& spec,
                                                         std::unique_ptr<SourceCore> flow) {
  return std::make_unique<CombinerSourceImpl>(spec.layout(), spec.local_groups(), std::move(flow));
}

}  // namespace sluice::detail
