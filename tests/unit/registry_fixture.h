// A registry on a thread of the test process, and clients that join it: the
// fixture of registry_test.cc and registry_views_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "control/registry_client.h"
#include "control/registry_server.h"
#include "sluice/deadline.h"

namespace sluice::control {

inline constexpr const char* kTestSecret = "test-secret";

inline Deadline in(std::chrono::milliseconds d) { return Clock::now() + d; }

class RegistryFixture : public ::testing::Test {
 protected:
  void start(uint32_t world,
             std::chrono::milliseconds heartbeat = std::chrono::milliseconds(5000)) {
    RegistryOptions o;
    o.heartbeat_timeout = heartbeat;
    start(world, o);
  }
  void start(uint32_t world, RegistryOptions o) {
    o.secret = kTestSecret;
    o.world_size = world;
    server_ = std::make_unique<RegistryServer>(o);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) {
      server_->stop();
      thread_.join();
    }
  }
  BootstrapInfo info(uint32_t rank, uint32_t world, const std::string& secret = kTestSecret) {
    BootstrapInfo i;
    i.rank = rank;
    i.world_size = world;
    i.registry_host = "127.0.0.1";
    i.registry_port = server_->port();
    i.secret = secret;
    return i;
  }
  std::unique_ptr<RegistryClient> join(
      uint32_t rank, uint32_t world,
      std::chrono::milliseconds heartbeat = std::chrono::milliseconds(5000)) {
    ClientOptions o;
    o.heartbeat_timeout = heartbeat;
    o.connect_timeout = std::chrono::seconds(10);
    return RegistryClient::connect(info(rank, world), o);
  }

  std::unique_ptr<RegistryServer> server_;
  std::thread thread_;
};

}  // namespace sluice::control
