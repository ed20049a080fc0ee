// The handles' side of one-sided memory (include/sluice/memory.h):
// MemoryRegion and RemoteRegion forward to the owner's and the accessor's
// implementations in region_owner.cc and region.cc, and every RemoteRegion operation is
// counted in the handle's counters slot (sluice top, Prometheus).
#include <atomic>

#include "common/test_hooks.h"
#include "memory/region.h"

namespace sluice::detail {

RegionAccess::~RegionAccess() {
  if (stats_ != nullptr) counters::release(stats_);
}

void RegionAccess::count_as(uint32_t rank) {
  // Handles are numbered per process, so that two handles of one region on
  // one rank are two series.
  static std::atomic<uint32_t> next_handle{0};
  stats_ = counters::acquire(counters::Role::kRegion, name_, rank,
                             next_handle.fetch_add(1, std::memory_order_relaxed), 1, 0);
  counters::set_peer(stats_, 0, owner_, 0);
}

Status RegionAccess::counted(Status s, size_t bytes) {
  if (stats_ == nullptr) return s;
  const counters::Outcome outcome = s == Status::kOk        ? counters::Outcome::kDone
                                    : s == Status::kTimeout ? counters::Outcome::kTimedOut
                                                            : counters::Outcome::kFailed;
  counters::op(stats_, s == Status::kOk ? bytes : 0, outcome);
  // The handle is done for after these (memory.h); a refused or misplaced
  // operation (kInvalid) leaves it usable.
  if (s == Status::kPeerLost || s == Status::kClosed) {
    counters::set_state(stats_, counters::State::kFailed, error_);
  }
  return s;
}

}  // namespace sluice::detail

namespace sluice {

MemoryRegion::MemoryRegion() = default;
MemoryRegion::MemoryRegion(std::unique_ptr<detail::RegionOwner> impl) : impl_(std::move(impl)) {}
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion& MemoryRegion::operator=(MemoryRegion&&) noexcept = default;
MemoryRegion::~MemoryRegion() {
  detail::test_hooks::DestructorScope scope;
  impl_.reset();
}
std::byte* MemoryRegion::data() const { return impl_->data(); }
size_t MemoryRegion::size() const { return impl_->size(); }
const std::string& MemoryRegion::name() const { return impl_->name(); }
const char* MemoryRegion::path() const { return impl_->path(); }
void MemoryRegion::revoke() { impl_->revoke(); }

RemoteRegion::RemoteRegion() = default;
RemoteRegion::RemoteRegion(std::unique_ptr<detail::RegionAccess> impl) : impl_(std::move(impl)) {}
RemoteRegion::RemoteRegion(RemoteRegion&&) noexcept = default;
RemoteRegion& RemoteRegion::operator=(RemoteRegion&&) noexcept = default;
RemoteRegion::~RemoteRegion() {
  detail::test_hooks::DestructorScope scope;
  detail::release_region(std::move(impl_));
}

Status RemoteRegion::read(uint64_t offset, std::span<std::byte> out, Deadline deadline) {
  return impl_->counted(impl_->read(offset, out.data(), out.size(), deadline), out.size());
}
Status RemoteRegion::write(uint64_t offset, std::span<const std::byte> in, Deadline deadline) {
  return impl_->counted(impl_->write(offset, in.data(), in.size(), deadline), in.size());
}
Result<uint64_t> RemoteRegion::compare_and_swap(uint64_t offset, uint64_t expected,
                                                uint64_t desired, Deadline deadline) {
  uint64_t previous = 0;
  const Status s =
      impl_->counted(impl_->compare_and_swap(offset, expected, desired, &previous, deadline), 8);
  if (s != Status::kOk) return s;
  return previous;
}
Result<uint64_t> RemoteRegion::fetch_add(uint64_t offset, uint64_t delta, Deadline deadline) {
  uint64_t previous = 0;
  const Status s = impl_->counted(impl_->fetch_add(offset, delta, &previous, deadline), 8);
  if (s != Status::kOk) return s;
  return previous;
}
size_t RemoteRegion::size() const { return impl_->size(); }
uint32_t RemoteRegion::owner() const { return impl_->owner(); }
const char* RemoteRegion::path() const { return impl_->path(); }
const std::string& RemoteRegion::error() const { return impl_->error(); }

}  // namespace sluice
