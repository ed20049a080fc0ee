#include "control/bootstrap.h"

#include <gtest/gtest.h>

#include "sluice/errors.h"

namespace sluice::control {
namespace {

using Env = std::map<std::string, std::string>;

// The message of the kBootstrap error `env` produces ("" if none).
std::string bootstrap_error(const Env& env) {
  try {
    parse_bootstrap(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBootstrap) << e.what();
    return e.what();
  }
  return "";
}

TEST(BootstrapTest, ReadsSluiceVariables) {
  const BootstrapInfo info = parse_bootstrap({{"SLUICE_RANK", "2"},
                                              {"SLUICE_WORLD_SIZE", "4"},
                                              {"SLUICE_REGISTRY", "node1:29600"},
                                              {"SLUICE_SECRET", "abc"}});
  EXPECT_EQ(info.rank, 2u);
  EXPECT_EQ(info.world_size, 4u);
  EXPECT_EQ(info.registry_host, "node1");
  EXPECT_EQ(info.registry_port, 29600);
  EXPECT_EQ(info.secret, "abc");
  EXPECT_EQ(info.source, "SLUICE_*");
}

TEST(BootstrapTest, SluiceVariablesWinOverSlurm) {
  const BootstrapInfo info = parse_bootstrap({{"SLUICE_RANK", "1"},
                                              {"SLUICE_WORLD_SIZE", "2"},
                                              {"SLURM_PROCID", "5"},
                                              {"SLURM_NTASKS", "8"},
                                              {"SLUICE_REGISTRY", "h:1"},
                                              {"SLUICE_SECRET", "s"}});
  EXPECT_EQ(info.rank, 1u);
  EXPECT_EQ(info.source, "SLUICE_*");
}

TEST(BootstrapTest, ReadsSlurmOpenMpiAndPmix) {
  const Env common{{"SLUICE_REGISTRY", "h:1"}, {"SLUICE_SECRET", "s"}};
  Env slurm = common;
  slurm.insert({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}});
  EXPECT_EQ(parse_bootstrap(slurm).rank, 3u);
  EXPECT_EQ(parse_bootstrap(slurm).source, "Slurm");

  Env ompi = common;
  ompi.insert({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_RANK", "0"}});
  EXPECT_EQ(parse_bootstrap(ompi).rank, 1u);
  EXPECT_EQ(parse_bootstrap(ompi).source, "Open MPI");

  Env pmix_with_ompi_size = common;
  pmix_with_ompi_size.insert(
      {{"PMIX_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMIX_SIZE", "9"}});
  EXPECT_EQ(parse_bootstrap(pmix_with_ompi_size).world_size, 3u);

  Env pmix = common;
  pmix.insert({{"PMIX_RANK", "2"}, {"PMIX_SIZE", "5"}});
  EXPECT_EQ(parse_bootstrap(pmix).world_size, 5u);
  EXPECT_EQ(parse_bootstrap(pmix).source, "PMIx");

  Env pmix_no_size = common;
  pmix_no_size.insert({{"PMIX_RANK", "2"}});
  EXPECT_NE(bootstrap_error(pmix_no_size).find("PMIX_SIZE"), std::string::npos);
}

TEST(BootstrapTest, TorchrunUsesMasterAddrAndRegistryPort) {
  Env env{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"SLUICE_SECRET", "s"}};
  BootstrapInfo info = parse_bootstrap(env);
  EXPECT_EQ(info.registry_host, "10.0.0.1");
  EXPECT_EQ(info.registry_port, 29600);
  EXPECT_EQ(info.source, "torchrun");
  env["SLUICE_REGISTRY_PORT"] = "31000";
  EXPECT_EQ(parse_bootstrap(env).registry_port, 31000);
  env["SLUICE_REGISTRY_PORT"] = "31000x";
  EXPECT_NE(bootstrap_error(env).find("SLUICE_REGISTRY_PORT='31000x'"), std::string::npos);
}

TEST(BootstrapTest, RejectsMalformedNumbersNamingTheVariable) {
  const Env base{{"SLUICE_REGISTRY", "h:1"}, {"SLUICE_SECRET", "s"}, {"SLUICE_WORLD_SIZE", "4"}};
  for (const char* bad : {"1x", " 1", "-1", "+1", "", "0x1", "99999999999999999999999"}) {
    Env env = base;
    env["SLUICE_RANK"] = bad;
    const std::string msg = bootstrap_error(env);
    EXPECT_NE(msg.find("SLUICE_RANK='" + std::string(bad) + "'"), std::string::npos) << msg;
  }
}

TEST(BootstrapTest, RejectsRankNotBelowWorldSizeAndEmptyWorld) {
  Env env{{"SLUICE_RANK", "4"},
          {"SLUICE_WORLD_SIZE", "4"},
          {"SLUICE_REGISTRY", "h:1"},
          {"SLUICE_SECRET", "s"}};
  std::string msg = bootstrap_error(env);
  EXPECT_NE(msg.find("rank 4 (from SLUICE_RANK) is not below the world size 4"), std::string::npos)
      << msg;
  env["SLUICE_RANK"] = "0";
  env["SLUICE_WORLD_SIZE"] = "0";
  msg = bootstrap_error(env);
  EXPECT_NE(msg.find("SLUICE_WORLD_SIZE"), std::string::npos) << msg;
}

TEST(BootstrapTest, SaysHowToJoinWhenNothingIsSet) {
  const std::string msg = bootstrap_error({});
  EXPECT_NE(msg.find("sluice run -n N"), std::string::npos) << msg;
  const std::string no_registry =
      bootstrap_error({{"SLUICE_RANK", "0"}, {"SLUICE_WORLD_SIZE", "1"}, {"SLUICE_SECRET", "s"}});
  EXPECT_NE(no_registry.find("SLUICE_REGISTRY is not set"), std::string::npos) << no_registry;
  const std::string no_secret = bootstrap_error(
      {{"SLUICE_RANK", "0"}, {"SLUICE_WORLD_SIZE", "1"}, {"SLUICE_REGISTRY", "h:1"}});
  EXPECT_NE(no_secret.find("SLUICE_SECRET is not set"), std::string::npos) << no_secret;
}

TEST(BootstrapTest, OverridesWinFieldByField) {
  const Env env{{"SLUICE_RANK", "1"},
                {"SLUICE_WORLD_SIZE", "4"},
                {"SLUICE_REGISTRY", "h:1"},
                {"SLUICE_SECRET", "s"}};
  BootstrapInfo info = parse_bootstrap(env, 3, -1, "other:2", "t");
  EXPECT_EQ(info.rank, 3u);
  EXPECT_EQ(info.world_size, 4u);
  EXPECT_EQ(info.registry_host, "other");
  EXPECT_EQ(info.registry_port, 2);
  EXPECT_EQ(info.secret, "t");
  info = parse_bootstrap({}, 0, 1, "localhost:5", "x");
  EXPECT_EQ(info.source, "options");
  EXPECT_THROW(parse_bootstrap(env, 9), Error);
}

TEST(BootstrapTest, ParsesHostPortIncludingIpv6) {
  std::string host;
  uint16_t port = 0;
  parse_host_port("[fe80::1]:80", "X", &host, &port);
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, 80);
  parse_host_port("a.b:65535", "X", &host, &port);
  EXPECT_EQ(host, "a.b");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:65536", "host:8o",
                          "fe80::1:80", "[fe80::1]80", "[fe80::1"}) {
    try {
      parse_host_port(bad, "SLUICE_REGISTRY", &host, &port);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kBootstrap);
      EXPECT_NE(std::string(e.what()).find("SLUICE_REGISTRY='" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(BootstrapTest, ProcessEnvSeesTheEnvironment) {
  ::setenv("SLUICE_BOOTSTRAP_TEST_VAR", "a=b", 1);
  EXPECT_EQ(process_env()["SLUICE_BOOTSTRAP_TEST_VAR"], "a=b");
  ::unsetenv("SLUICE_BOOTSTRAP_TEST_VAR");
}

}  // namespace
}  // namespace sluice::control
