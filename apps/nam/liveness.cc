#include "liveness.h"

#include <chrono>
#include <string>

namespace sluice::nam {

ServerWatch::ServerWatch(const Cluster& cluster, uint32_t memory_servers)
    : memory_servers_(memory_servers) {
  const View first = cluster.view();
  if (check(first)) return;
  thread_ = std::thread([this, &cluster, epoch = first.epoch]() mutable {
    try {
      while (!stop_.load()) {
        const Result<View> next =
            cluster.await_view(epoch, Clock::now() + std::chrono::milliseconds(100));
        if (!next) continue;  // kTimeout: look at stop_ again
        epoch = next->epoch;
        if (check(*next)) return;
      }
    } catch (const std::exception& e) {
      // The registry is lost: no view can follow, and no memory server can
      // be known to be there.
      std::lock_guard<std::mutex> lock(mu_);
      why_ = e.what();
      lost_.store(0, std::memory_order_release);
    }
  });
}

bool ServerWatch::check(const View& view) {
  for (uint32_t r = 0; r < memory_servers_; ++r) {
    std::string why;
    if (!view.contains(r)) {
      why = "it is not in the job's membership view " + std::to_string(view.epoch) +
            " (it died, stopped heart-beating or left)";
    } else if (r < view.incarnations.size() && view.incarnations[r] != 0) {
      why = "it came back as incarnation " + std::to_string(view.incarnations[r]) + " in view " +
            std::to_string(view.epoch) + ", without the memory it had";
    } else {
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    why_ = std::move(why);
    lost_.store(r, std::memory_order_release);
    return true;
  }
  return false;
}

ServerWatch::~ServerWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string ServerWatch::why() const {
  std::lock_guard<std::mutex> lock(mu_);
  return why_;
}

}  // namespace sluice::nam
