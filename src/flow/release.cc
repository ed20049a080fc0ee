// The end of a Source's or Target's handle: its core is destroyed at once,
// unless it is an ofi source whose last transfers are still to be
// confirmed, which the flow's Linger finishes (flow/linger.h).
#include <memory>

#include "common/log.h"
#include "common/test_hooks.h"
#include "flow/flow_source.h"
#include "flow/linger.h"
#include "flow/wait_set.h"
#include "sluice/detail/flow_cores.h"

namespace sluice::detail {
namespace {

// A closed ofi source, destroyed by its handle before its targets confirmed
// everything: driven here until they do, or kLinger.
class SourceLingerTask final : public Linger::Task {
 public:
  explicit SourceLingerTask(std::unique_ptr<SourceCore> core)
      : core_(std::move(core)),
        source_(static_cast<FlowSource*>(core_.get())),
        name_(source_->name()),
        deadline_(Clock::now() + kLinger) {}

  bool step(std::chrono::milliseconds slice) override {
    return source_->wait_delivered(Clock::now() + slice) != Status::kTimeout;
  }
  Deadline deadline() const override { return deadline_; }
  std::string describe() const override { return name_ + ": its last transfers"; }
  void give_up(const std::string& why) override {
    log::warn(name_, ": gave up on its last transfers (", why, ")");
  }
  const void* key() const override { return source_->context(); }

 private:
  std::unique_ptr<SourceCore> core_;
  FlowSource* source_;
  std::string name_;
  Deadline deadline_;
};

}  // namespace

void release_source(std::unique_ptr<SourceCore> core) noexcept {
  if (core == nullptr) return;
  test_hooks::DestructorScope scope;
  auto* flow_source = dynamic_cast<FlowSource*>(core.get());
  if (flow_source != nullptr && flow_source->lingers() && flow_source->linger() != nullptr) {
    Linger* linger = flow_source->linger();
    // The Linger's thread owns it from now on: no Worker may drive it.
    if (core->driver_ != nullptr) core->driver_->remove(core.get());
    try {
      linger->add(std::make_unique<SourceLingerTask>(std::move(core)));
      return;
    } catch (const std::exception& e) {
      log::warn(flow_source->name(), ": cannot linger for its last transfers: ", e.what());
    }
  }
  core.reset();
}

void release_target(std::unique_ptr<TargetCore> core) noexcept {
  test_hooks::DestructorScope scope;
  core.reset();
}

}  // namespace sluice::detail
