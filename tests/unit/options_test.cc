// ClusterOptions: every SLUICE_* variable parsed into its typed field,
// malformed values refused naming the variable, validate() refusing bad
// fields naming the field, describe() listing every field, and join() using
// explicit options as given (the environment is read by from_env() only).
#include "sluice/options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/registry_server.h"
#include "sluice/cluster.h"
#include "sluice/errors.h"

extern char** environ;

namespace sluice {
namespace {

using namespace std::chrono_literals;

// Clears every SLUICE_* variable for one test and puts the environment back
// afterwards, so that tests neither see CTest's variants' variables
// (SLUICE_TRANSPORT=ofi...) nor leak their own.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("SLUICE_", 0) != 0) continue;
      const size_t eq = entry.find('=');
      saved_[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    for (const auto& [name, value] : saved_) ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (const std::string& name : set_) ::unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }
  void unset(const std::string& name) { ::unsetenv(name.c_str()); }

 private:
  std::map<std::string, std::string> saved_;
  std::vector<std::string> set_;
};

// The message of the Error(kInvalidArgument) that f throws; nullopt (and a
// test failure) if it throws nothing or something else.
template <class F>
std::optional<std::string> invalid_argument(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return std::string(e.what());
  }
  ADD_FAILURE() << "no Error was thrown";
  return std::nullopt;
}

TEST(OptionsTest, FromEnvGivesTheDocumentedDefaultsWhenNothingIsSet) {
  ScopedEnv env;
  const ClusterOptions o = ClusterOptions::from_env();
  EXPECT_EQ(o.rank, -1);
  EXPECT_EQ(o.world_size, -1);
  EXPECT_EQ(o.registry, "");
  EXPECT_EQ(o.secret, "");
  EXPECT_EQ(o.peer_timeout, 5000ms);
  EXPECT_EQ(o.setup_timeout, 60000ms);
  EXPECT_EQ(o.spin_iterations, -1);
  EXPECT_EQ(o.threads_per_rank, 1u);
  EXPECT_EQ(o.transport, Transport::kAuto);
  EXPECT_EQ(o.ofi_provider, OfiProvider::kAuto);
  EXPECT_EQ(o.ofi_rma, Switch::kAuto);
  EXPECT_EQ(o.ofi_atomic, Switch::kAuto);
  EXPECT_EQ(o.log_level, LogLevel::kWarn);
  EXPECT_NO_THROW(o.validate());
}

TEST(OptionsTest, FromEnvSetsEveryFieldFromItsVariable) {
  ScopedEnv env;
  env.set("SLUICE_PEER_TIMEOUT_MS", "1500");
  env.set("SLUICE_SETUP_TIMEOUT_MS", "2500");
  env.set("SLUICE_SPIN", "0");
  env.set("SLUICE_TRANSPORT", "ofi");
  env.set("SLUICE_OFI_PROVIDER", "verbs");
  env.set("SLUICE_OFI_RMA", "off");
  env.set("SLUICE_OFI_ATOMIC", "off");
  env.set("SLUICE_LOG", "debug");
  env.set("SLUICE_FENCE", "off");
  const ClusterOptions o = ClusterOptions::from_env();
  EXPECT_EQ(o.peer_timeout, 1500ms);
  EXPECT_EQ(o.setup_timeout, 2500ms);
  EXPECT_EQ(o.spin_iterations, 0);
  EXPECT_EQ(o.transport, Transport::kOfi);
  EXPECT_EQ(o.ofi_provider, OfiProvider::kVerbs);
  EXPECT_EQ(o.ofi_rma, Switch::kOff);
  EXPECT_EQ(o.ofi_atomic, Switch::kOff);
  EXPECT_EQ(o.log_level, LogLevel::kDebug);
  EXPECT_FALSE(o.fence_lost_ranks);
  EXPECT_NE(o.describe().find("fence_lost_ranks = off\n"), std::string::npos) << o.describe();
  EXPECT_NO_THROW(o.validate());
  env.set("SLUICE_FENCE", "1");
  EXPECT_TRUE(ClusterOptions::from_env().fence_lost_ranks);
}

TEST(OptionsTest, FromEnvAcceptsEverySpellingOfEachEnum) {
  ScopedEnv env;
  const std::vector<std::pair<std::string, Transport>> transports = {
      {"auto", Transport::kAuto}, {"shm", Transport::kShm}, {"ofi", Transport::kOfi}};
  for (const auto& [text, value] : transports) {
    env.set("SLUICE_TRANSPORT", text);
    EXPECT_EQ(ClusterOptions::from_env().transport, value) << text;
    EXPECT_EQ(to_string(value), text);
  }
  const std::vector<std::pair<std::string, OfiProvider>> providers = {
      {"auto", OfiProvider::kAuto},
      {"tcp", OfiProvider::kTcp},
      {"verbs", OfiProvider::kVerbs},
      {"efa", OfiProvider::kEfa},
      {"shm", OfiProvider::kShm}};
  for (const auto& [text, value] : providers) {
    env.set("SLUICE_OFI_PROVIDER", text);
    EXPECT_EQ(ClusterOptions::from_env().ofi_provider, value) << text;
    EXPECT_EQ(to_string(value), text);
  }
  // 1 and 0 are the spellings from before the switches had three values.
  const std::vector<std::pair<std::string, Switch>> switches = {{"auto", Switch::kAuto},
                                                                {"off", Switch::kOff},
                                                                {"on", Switch::kOn},
                                                                {"1", Switch::kAuto},
                                                                {"0", Switch::kOff}};
  for (const auto& [text, value] : switches) {
    env.set("SLUICE_OFI_RMA", text);
    env.set("SLUICE_OFI_ATOMIC", text);
    const ClusterOptions o = ClusterOptions::from_env();
    EXPECT_EQ(o.ofi_rma, value) << text;
    EXPECT_EQ(o.ofi_atomic, value) << text;
  }
  const std::vector<std::pair<std::string, LogLevel>> levels = {{"error", LogLevel::kError},
                                                                {"warn", LogLevel::kWarn},
                                                                {"info", LogLevel::kInfo},
                                                                {"debug", LogLevel::kDebug}};
  for (const auto& [text, value] : levels) {
    env.set("SLUICE_LOG", text);
    EXPECT_EQ(ClusterOptions::from_env().log_level, value) << text;
    EXPECT_EQ(to_string(value), text);
  }
  env.set("SLUICE_SPIN", "auto");
  EXPECT_EQ(ClusterOptions::from_env().spin_iterations, -1);
  env.set("SLUICE_SPIN", "1073741824");
  EXPECT_EQ(ClusterOptions::from_env().spin_iterations, int64_t{1} << 30);
}

TEST(OptionsTest, AnEmptyVariableCountsAsUnset) {
  ScopedEnv env;
  env.set("SLUICE_TRANSPORT", "");
  env.set("SLUICE_SPIN", "");
  const ClusterOptions o = ClusterOptions::from_env();
  EXPECT_EQ(o.transport, Transport::kAuto);
  EXPECT_EQ(o.spin_iterations, -1);
}

TEST(OptionsTest, FromEnvRefusesAMalformedValueNamingTheVariableAndTheValue) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"SLUICE_PEER_TIMEOUT_MS", "99"},
      {"SLUICE_PEER_TIMEOUT_MS", "5s"},
      {"SLUICE_PEER_TIMEOUT_MS", "-5000"},
      {"SLUICE_SETUP_TIMEOUT_MS", "86400001"},
      {"SLUICE_SETUP_TIMEOUT_MS", " 100"},
      {"SLUICE_SPIN", "-1"},
      {"SLUICE_SPIN", "1073741825"},
      {"SLUICE_SPIN", "lots"},
      {"SLUICE_TRANSPORT", "rdma"},
      {"SLUICE_TRANSPORT", "OFI"},
      {"SLUICE_OFI_PROVIDER", "psm3"},
      {"SLUICE_OFI_RMA", "yes"},
      {"SLUICE_OFI_ATOMIC", "2"},
      {"SLUICE_LOG", "verbose"},
      {"SLUICE_FENCE", "yes"},
  };
  for (const auto& [name, value] : bad) {
    ScopedEnv env;
    env.set(name, value);
    const auto message = invalid_argument([] { ClusterOptions::from_env(); });
    ASSERT_TRUE(message.has_value()) << name << "=" << value;
    EXPECT_NE(message->find(name + "='" + value + "'"), std::string::npos) << *message;
  }
}

TEST(OptionsTest, FromEnvNamesWhatIsAllowed) {
  ScopedEnv env;
  env.set("SLUICE_TRANSPORT", "rdma");
  auto message = invalid_argument([] { ClusterOptions::from_env(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("auto, shm or ofi"), std::string::npos) << *message;
  env.set("SLUICE_TRANSPORT", "ofi");
  env.set("SLUICE_PEER_TIMEOUT_MS", "1");
  message = invalid_argument([] { ClusterOptions::from_env(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("[100, 3600000]"), std::string::npos) << *message;
}

// A field set in code gets the same scrutiny as a variable.
TEST(OptionsTest, ValidateRefusesABadFieldNamingTheFieldAndTheValue) {
  struct Case {
    const char* expect;  // in the message: "ClusterOptions::<field> = <value>"
    void (*change)(ClusterOptions&);
  };
  const std::vector<Case> cases = {
      {"peer_timeout = 0 ms", [](ClusterOptions& o) { o.peer_timeout = 0ms; }},
      {"peer_timeout = 3600001 ms", [](ClusterOptions& o) { o.peer_timeout = 3600001ms; }},
      {"setup_timeout = 50 ms", [](ClusterOptions& o) { o.setup_timeout = 50ms; }},
      {"spin_iterations = -2", [](ClusterOptions& o) { o.spin_iterations = -2; }},
      {"spin_iterations = 1073741825",
       [](ClusterOptions& o) { o.spin_iterations = (int64_t{1} << 30) + 1; }},
      {"threads_per_rank = 0", [](ClusterOptions& o) { o.threads_per_rank = 0; }},
      {"transport = 7", [](ClusterOptions& o) { o.transport = static_cast<Transport>(7); }},
      {"ofi_provider = 9", [](ClusterOptions& o) { o.ofi_provider = static_cast<OfiProvider>(9); }},
      {"ofi_rma = 3", [](ClusterOptions& o) { o.ofi_rma = static_cast<Switch>(3); }},
      {"ofi_atomic = 4", [](ClusterOptions& o) { o.ofi_atomic = static_cast<Switch>(4); }},
      {"log_level = 5", [](ClusterOptions& o) { o.log_level = static_cast<LogLevel>(5); }},
      {"rank = -2", [](ClusterOptions& o) { o.rank = -2; }},
      {"world_size = 0", [](ClusterOptions& o) { o.world_size = 0; }},
      {"rank = 4",
       [](ClusterOptions& o) {
         o.rank = 4;
         o.world_size = 4;
       }},
      {"registry = 'hostonly'", [](ClusterOptions& o) { o.registry = "hostonly"; }},
      {"ofi_atomic = on",
       [](ClusterOptions& o) {
         o.ofi_atomic = Switch::kOn;
         o.ofi_rma = Switch::kOff;
       }},
  };
  for (const Case& c : cases) {
    ClusterOptions o;
    c.change(o);
    const auto message = invalid_argument([&o] { o.validate(); });
    ASSERT_TRUE(message.has_value()) << c.expect;
    EXPECT_NE(message->find(std::string("ClusterOptions::") + c.expect), std::string::npos)
        << *message;
  }
}

TEST(OptionsTest, ValidateNamesWhatIsAllowed) {
  ClusterOptions o;
  o.transport = static_cast<Transport>(7);
  auto message = invalid_argument([&o] { o.validate(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("auto, shm or ofi"), std::string::npos) << *message;
  o = ClusterOptions();
  o.ofi_atomic = Switch::kOn;
  o.ofi_rma = Switch::kOff;
  message = invalid_argument([&o] { o.validate(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("ofi_rma = off"), std::string::npos) << *message;
}

TEST(OptionsTest, ValidateAcceptsEveryDocumentedValue) {
  ClusterOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.registry = "[::1]:7400";
  o.peer_timeout = 100ms;
  o.setup_timeout = 86400000ms;
  o.spin_iterations = int64_t{1} << 30;
  o.threads_per_rank = 65536;
  for (Transport t : {Transport::kAuto, Transport::kShm, Transport::kOfi}) {
    for (OfiProvider p : {OfiProvider::kAuto, OfiProvider::kTcp, OfiProvider::kVerbs,
                          OfiProvider::kEfa, OfiProvider::kShm}) {
      for (Switch s : {Switch::kAuto, Switch::kOff, Switch::kOn}) {
        for (LogLevel l : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
          o.transport = t;
          o.ofi_provider = p;
          o.ofi_rma = s;
          o.ofi_atomic = s;
          o.log_level = l;
          EXPECT_NO_THROW(o.validate()) << o.describe();
        }
      }
    }
  }
}

TEST(OptionsTest, DescribeListsEveryFieldAndHidesTheSecret) {
  ClusterOptions o;
  o.secret = "do-not-print-me";
  o.transport = Transport::kOfi;
  o.ofi_provider = OfiProvider::kEfa;
  o.ofi_rma = Switch::kOff;
  o.ofi_atomic = Switch::kOn;
  o.spin_iterations = 12;
  o.threads_per_rank = 3;
  o.log_level = LogLevel::kInfo;
  const std::string d = o.describe();
  for (const char* line :
       {"rank = ", "world_size = ", "registry = ", "secret = (set)\n", "peer_timeout_ms = 5000\n",
        "setup_timeout_ms = 60000\n", "spin_iterations = 12\n", "threads_per_rank = 3\n",
        "transport = ofi\n", "ofi_provider = efa\n", "ofi_rma = off\n", "ofi_atomic = on\n",
        "log_level = info\n"}) {
    EXPECT_NE(d.find(line), std::string::npos) << "missing '" << line << "' in:\n" << d;
  }
  EXPECT_EQ(d.find("do-not-print-me"), std::string::npos) << d;
  EXPECT_NE(ClusterOptions().describe().find("spin_iterations = auto\n"), std::string::npos);
  EXPECT_NE(ClusterOptions().describe().find("secret = (unset)\n"), std::string::npos);
}

// join() through a registry of this process, one rank.
class OptionsJoinTest : public ::testing::Test {
 protected:
  static constexpr const char* kSecret = "options-test-secret";
  void SetUp() override {
    control::RegistryOptions o;
    o.secret = kSecret;
    o.world_size = 1;
    server_ = std::make_unique<control::RegistryServer>(o);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  ClusterOptions explicit_options() const {
    ClusterOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.registry = server_->address();
    o.secret = kSecret;
    o.setup_timeout = 10s;
    return o;
  }
  void set_bootstrap(ScopedEnv& env) const {
    env.set("SLUICE_RANK", "0");
    env.set("SLUICE_WORLD_SIZE", "1");
    env.set("SLUICE_REGISTRY", server_->address());
    env.set("SLUICE_SECRET", kSecret);
  }

  std::unique_ptr<control::RegistryServer> server_;
  std::thread thread_;
};

TEST_F(OptionsJoinTest, JoinRefusesABadFieldBeforeContactingAnyone) {
  ClusterOptions o = explicit_options();
  o.spin_iterations = -7;
  const auto message = invalid_argument([&o] { Cluster::join(o); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("ClusterOptions::spin_iterations = -7"), std::string::npos) << *message;
}

TEST_F(OptionsJoinTest, JoinWithoutOptionsRefusesAMalformedVariableNamingIt) {
  ScopedEnv env;
  set_bootstrap(env);
  env.set("SLUICE_OFI_RMA", "maybe");
  const auto message = invalid_argument([] { Cluster::join(); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("SLUICE_OFI_RMA='maybe'"), std::string::npos) << *message;
}

// Explicit options win: the environment's SLUICE_* settings are read by
// from_env() only, so neither a conflicting nor a malformed one matters.
TEST_F(OptionsJoinTest, ExplicitOptionsIgnoreTheEnvironmentsSettings) {
  ScopedEnv env;
  env.set("SLUICE_TRANSPORT", "ofi");
  env.set("SLUICE_OFI_RMA", "maybe");
  env.set("SLUICE_SPIN", "lots");
  ClusterOptions o = explicit_options();
  o.transport = Transport::kShm;
  Cluster c = Cluster::join(o);
  EXPECT_EQ(c.options().transport, Transport::kShm);
  EXPECT_EQ(c.options().ofi_rma, Switch::kAuto);
  EXPECT_EQ(c.transport_to(0), Transport::kShm);
}

TEST_F(OptionsJoinTest, JoinWithoutOptionsUsesTheEnvironment) {
  ScopedEnv env;
  set_bootstrap(env);
  env.set("SLUICE_TRANSPORT", "ofi");
  env.set("SLUICE_PEER_TIMEOUT_MS", "4000");
  Cluster c = Cluster::join();
  EXPECT_EQ(c.options().transport, Transport::kOfi);
  EXPECT_EQ(c.options().peer_timeout, 4000ms);
  EXPECT_EQ(c.transport_to(0), Transport::kOfi);
}

TEST_F(OptionsJoinTest, OptionsAfterJoinShowTheResolvedBootstrap) {
  ScopedEnv env;
  set_bootstrap(env);
  ClusterOptions o = ClusterOptions::from_env();
  EXPECT_EQ(o.rank, -1);
  Cluster c = Cluster::join(o);
  EXPECT_EQ(c.options().rank, 0);
  EXPECT_EQ(c.options().world_size, 1);
  EXPECT_EQ(c.options().registry, server_->address());
  EXPECT_NE(c.options().describe().find("secret = (set)"), std::string::npos);
}

TEST_F(OptionsJoinTest, TransportToAutoIsShmWithinOneHostAndRefusesAMissingRank) {
  Cluster c = Cluster::join(explicit_options());
  EXPECT_EQ(c.transport_to(0), Transport::kShm);
  const auto message = invalid_argument([&c] { (void)c.transport_to(1); });
  ASSERT_TRUE(message.has_value());
  EXPECT_NE(message->find("transport_to(1)"), std::string::npos) << *message;
}

TEST_F(OptionsJoinTest, InfoLevelLogsTheSettingsOnceAtJoin) {
  ClusterOptions o = explicit_options();
  o.log_level = LogLevel::kInfo;
  o.transport = Transport::kOfi;
  testing::internal::CaptureStderr();
  { Cluster c = Cluster::join(o); }
  const std::string err = testing::internal::GetCapturedStderr();
  size_t count = 0;
  for (size_t at = err.find("settings: "); at != std::string::npos;
       at = err.find("settings: ", at + 1))
    ++count;
  EXPECT_EQ(count, 1u) << err;
  EXPECT_NE(err.find("transport = ofi; ofi_provider = auto"), std::string::npos) << err;
  EXPECT_EQ(err.find(kSecret), std::string::npos) << err;
}

TEST_F(OptionsJoinTest, WarnLevelLogsNoSettings) {
  ClusterOptions o = explicit_options();
  o.log_level = LogLevel::kWarn;
  testing::internal::CaptureStderr();
  { Cluster c = Cluster::join(o); }
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("settings: "), std::string::npos);
}

}  // namespace
}  // namespace sluice
