// The receiving half of a combiner flow: merges the partials a byte-record
// target receives into a growing table of groups, and hands the groups over
// at end of flow.
#include <cstdio>
#include <cstring>

#include "combiner/group_table.h"
#include "combiner/partial.h"
#include "sluice/combiner.h"

namespace sluice::detail {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

class CombinerTargetImpl final : public CombinerTargetCore {
 public:
  CombinerTargetImpl(std::shared_ptr<const CombineLayout> layout, size_t expected_groups,
                     std::unique_ptr<TargetCore> flow)
      : layout_(std::move(layout)),
        flow_(flow.get()),
        in_(target_from_core<Bytes>(std::move(flow))) {
    layout_->validate();
    table_ = GroupTable::growing(layout_, expected_groups);
  }

  Status poll_one() override;
  Status collect(Deadline deadline) override;
  bool done() const override { return done_; }
  CombinerResult& result() override { return result_; }
  const std::string& error() const override { return error_.empty() ? in_.error() : error_; }
  std::optional<LostPeer> lost_peer() const override { return in_.lost_peer(); }
  uint64_t partials_merged() const override { return partials_merged_; }
  TargetCore* flow_target() override { return flow_; }

 private:
  // Merges one batch; kInvalid (error_ set) on a malformed partial.
  Status merge(const RecordBatch& batch);
  // Handles a consume() that returned nothing.
  Status settle(Status s);

  std::shared_ptr<const CombineLayout> layout_;
  GroupTable table_;
  TargetCore* flow_;  // in_'s core, owned by it
  Target<Bytes> in_;
  CombinerResult result_;
  std::string error_;
  Status failed_ = Status::kOk;
  bool done_ = false;
  uint64_t partials_merged_ = 0;
};

Status CombinerTargetImpl::merge(const RecordBatch& batch) {
  const size_t want = layout_->partial_bytes();
  for (std::span<const std::byte> rec : batch) {
    uint32_t tag = 0;
    uint64_t key = 0, count = 0;
    if (rec.size() >= kPartialSlotsOffset) {
      std::memcpy(&tag, rec.data() + kPartialTagOffset, 4);
      std::memcpy(&key, rec.data() + kPartialKeyOffset, 8);
      std::memcpy(&count, rec.data() + kPartialCountOffset, 8);
    }
    if (rec.size() != want || tag != layout_->tag || count == 0) [[unlikely]] {
      const uint32_t source = in_.last_source();
      if (rec.size() != want || tag != layout_->tag) {
        error_ = "combiner '" + layout_->name + "': source " + std::to_string(source) +
                 " sent a partial of " + std::to_string(rec.size()) + " bytes with layout tag " +
                 hex32(tag) + ", but this target declared " + std::to_string(want) +
                 "-byte partials with tag " + hex32(layout_->tag) + " (" + layout_->describe() +
                 "); every participant must declare the same group_by, value fields and aggregates "
                 "in the same order";
      } else {
        error_ = "combiner '" + layout_->name + "': source " + std::to_string(source) +
                 " sent a partial of group " + std::to_string(key) +
                 " with a count of 0 (a corrupt segment)";
      }
      failed_ = Status::kInvalid;
      return Status::kInvalid;
    }
    table_.merge(key, count, rec.data() + kPartialSlotsOffset);
    ++partials_merged_;
  }
  return Status::kOk;
}

Status CombinerTargetImpl::settle(Status s) {
  if (s == Status::kEndOfFlow) {
    result_ = result_from_table(table_, partials_merged_);
    table_ = GroupTable();
    done_ = true;
    return Status::kEndOfFlow;
  }
  if (s == Status::kPeerLost || s == Status::kInvalid) failed_ = s;
  return s;
}

Status CombinerTargetImpl::poll_one() {
  if (done_) return Status::kEndOfFlow;
  if (failed_ != Status::kOk) return failed_;
  auto batch = in_.try_consume();
  if (!batch)
    return in_.status() == Status::kWouldBlock ? Status::kWouldBlock : settle(in_.status());
  return merge(*batch);
}

Status CombinerTargetImpl::collect(Deadline deadline) {
  if (done_) return Status::kOk;
  if (failed_ != Status::kOk) return failed_;
  for (;;) {
    auto batch = in_.consume(deadline);
    if (!batch) {
      const Status s = settle(in_.status());
      return s == Status::kEndOfFlow ? Status::kOk : s;
    }
    if (merge(*batch) != Status::kOk) return Status::kInvalid;
  }
}

}  // namespace

std::unique_ptr<CombinerTargetCore> make_combiner_target(const CombinerSpecCore& spec,
                                                         std::unique_ptr<TargetCore> flow) {
  return std::make_unique<CombinerTargetImpl>(spec.layout(), spec.expected_groups(),
                                              std::move(flow));
}

}  // namespace sluice::detail
