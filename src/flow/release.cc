// The end of a Source's or Target's handle: its core is destroyed at once,
// unless it is an ofi source whose last transfers are still to be
// confirmed, which the flow's Linger finishes (flow/linger.h).
#include <memory>
#include <type_traits>

#include "common/log.h"
#include "common/test_hooks.h"
#include "flow/flow_source.h"
#include "flow/flow_target.h"
#include "flow/linger.h"
#include "flow/wait_set.h"
#include "memory/region.h"
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

// A core whose end drives its ofi endpoint a moment (an unclosed source's or
// an unfinished target's abort messages, at most kAbortFlush): destroyed on
// the Linger's thread rather than the caller's.
template <class Core>
class EndTask final : public Linger::Task {
 public:
  EndTask(std::unique_ptr<Core> core, const void* key, std::string name)
      : core_(std::move(core)), key_(key), name_(std::move(name)) {}
  bool step(std::chrono::milliseconds) override {
    core_.reset();
    return true;
  }
  Deadline deadline() const override { return kForever; }
  std::string describe() const override { return name_ + ": its abort messages"; }
  // The Cluster ends without leave(): the core is destroyed at once on the
  // caller's thread (a destructor), which must not wait for its messages.
  void give_up(const std::string&) override {
    if constexpr (std::is_same_v<Core, SourceCore>) {
      if (auto* s = dynamic_cast<FlowSource*>(core_.get())) s->give_up_end();
    } else if constexpr (std::is_same_v<Core, TargetCore>) {
      if (auto* t = dynamic_cast<FlowTarget*>(core_.get())) t->give_up_end();
    }
  }
  const void* key() const override { return key_; }

 private:
  std::unique_ptr<Core> core_;
  const void* key_;
  std::string name_;
};

// Hands `task` to `linger`; false (the task and what it holds destroyed) if
// that failed.
bool hand_over(Linger* linger, std::unique_ptr<Linger::Task> task, const std::string& name) {
  try {
    linger->add(std::move(task));
    return true;
  } catch (const std::exception& e) {
    log::warn(name, ": cannot hand its end to the Cluster: ", e.what());
    return false;
  }
}

}  // namespace

void release_source(std::unique_ptr<SourceCore> core) noexcept {
  if (core == nullptr) return;
  test_hooks::DestructorScope scope;
  auto* source = dynamic_cast<FlowSource*>(core.get());
  Linger* linger = source != nullptr ? source->linger() : nullptr;
  // (A source that lingers is an ofi source: ends_with_wait() covers it.)
  if (linger != nullptr && source->ends_with_wait()) {
    // The Linger's thread owns it from now on: no Worker may drive it.
    if (core->driver_ != nullptr) core->driver_->remove(core.get());
    const std::string name = source->name();
    const void* key = source->context();
    if (source->lingers()) {
      (void)hand_over(linger, std::make_unique<SourceLingerTask>(std::move(core)), name);
    } else {
      (void)hand_over(linger, std::make_unique<EndTask<SourceCore>>(std::move(core), key, name),
                      name);
    }
    return;
  }
  core.reset();
}

void release_target(std::unique_ptr<TargetCore> core) noexcept {
  if (core == nullptr) return;
  test_hooks::DestructorScope scope;
  auto* target = dynamic_cast<FlowTarget*>(core.get());
  Linger* linger = target != nullptr ? target->context()->linger : nullptr;
  if (linger != nullptr && target->ends_with_wait()) {
    const void* key = target->context();
    const std::string name = target->name();
    (void)hand_over(linger, std::make_unique<EndTask<TargetCore>>(std::move(core), key, name),
                    name);
    return;
  }
  core.reset();
}

void release_region(std::unique_ptr<RegionAccess> access) noexcept {
  if (access == nullptr) return;
  test_hooks::DestructorScope scope;
  if (access->linger != nullptr && access->ends_with_wait()) {
    Linger* linger = access->linger;
    (void)hand_over(
        linger,
        std::make_unique<EndTask<RegionAccess>>(std::move(access), nullptr, "a region handle"),
        "a region handle");
    return;
  }
  access.reset();
}

}  // namespace sluice::detail
