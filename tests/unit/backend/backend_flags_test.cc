#include "server/backend/backend_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "tests/testing/subprocess.h"

namespace sdg {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

GetEnv NoEnv() {
  return [](const std::string&) { return std::nullopt; };
}

TEST(BackendFlagsTest, DefaultsAreAutoForEveryBackend) {
  BackendFlags flags;
  flags.backend = {"a=http://h:1/v1", "b=http://h:2/v1,http://h:3/v1/"};
  flags.defaults.retry.max_attempts = 5;
  auto backends = BackendsFromFlags(flags, NoEnv());
  ASSERT_TRUE(backends.ok()) << backends.status();
  ASSERT_EQ(backends->size(), 2u);
  EXPECT_EQ((*backends)[1].base_urls,
            (std::vector<std::string>{"http://h:2/v1", "http://h:3/v1"}));
  for (const BackendOptions& backend : *backends) {
    EXPECT_EQ(backend.batching, BatchingMode::kAuto);
    EXPECT_EQ(backend.in_flight_mode, InFlightMode::kAuto);
    EXPECT_EQ(backend.retry.max_attempts, 5);
    EXPECT_TRUE(backend.api_key.empty());
  }
}

TEST(BackendFlagsTest, BareValuesApplyToAllAndNamedOnesToOne) {
  BackendFlags flags;
  flags.backend = {"a=http://h:1/v1", "b=http://h:2/v1"};
  flags.batching = {"off", "b=on"};
  flags.max_in_flight = {"64", "a=adaptive"};
  auto backends = BackendsFromFlags(flags, NoEnv());
  ASSERT_TRUE(backends.ok()) << backends.status();
  EXPECT_EQ((*backends)[0].batching, BatchingMode::kOff);
  EXPECT_EQ((*backends)[1].batching, BatchingMode::kOn);
  EXPECT_EQ((*backends)[0].in_flight_mode, InFlightMode::kAdaptive);
  EXPECT_EQ((*backends)[1].in_flight_mode, InFlightMode::kFixed);
  EXPECT_EQ((*backends)[1].max_in_flight, 64);
}

TEST(BackendFlagsTest, ErrorsNameTheFlagAndTheReason) {
  BackendFlags flags;
  flags.backend = {"a=http://h:1/v1"};
  flags.batching = {"c=on"};
  EXPECT_EQ(BackendsFromFlags(flags, NoEnv()).status().message(),
            "--backend_batching \"c=on\": no --backend is named \"c\" "
            "(configured: a)");
  flags.batching = {"maybe"};
  EXPECT_EQ(BackendsFromFlags(flags, NoEnv()).status().message(),
            "--backend_batching \"maybe\": must be auto, on or off");
  flags.batching = {};
  flags.max_in_flight = {"a=0"};
  EXPECT_THAT(BackendsFromFlags(flags, NoEnv()).status().message(),
              HasSubstr("must be a number from 1 to 65536, auto or adaptive"));
  flags.max_in_flight = {};
  flags.api_key_file = {"/no/such/key"};
  EXPECT_THAT(BackendsFromFlags(flags, NoEnv()).status().message(),
              HasSubstr("expected NAME=VALUE"));
  flags.api_key_file = {"a=/no/such/key"};
  EXPECT_THAT(BackendsFromFlags(flags, NoEnv()).status().message(),
              HasSubstr("cannot read /no/such/key"));
  flags.api_key_file = {};
  flags.rate_limit = {"a=rpm:-1"};
  EXPECT_EQ(BackendsFromFlags(flags, NoEnv()).status().message(),
            "--backend_rate_limit \"a=rpm:-1\": \"rpm:-1\": the limit must be "
            "a positive whole number");
}

TEST(BackendFlagsTest, RateLimitsApplyToTheBackendsNamed) {
  BackendFlags flags;
  flags.backend = {"hosted=https://api.example/v1", "local=http://h:1/v1"};
  flags.rate_limit = {"hosted=rpm:500,tpm:200000"};
  absl::StatusOr<std::vector<BackendOptions>> backends =
      BackendsFromFlags(flags, NoEnv());
  ASSERT_TRUE(backends.ok()) << backends.status();
  EXPECT_EQ((*backends)[0].rate_limits.requests, 500);
  EXPECT_EQ((*backends)[0].rate_limits.tokens, 200000);
  EXPECT_FALSE((*backends)[1].rate_limits.any());
}

TEST(BackendFlagsTest, ApiKeyFromFileWinsOverEnvironment) {
  std::string path = testing::MakeTempDir() + "/key";
  std::ofstream(path) << "  sk-from-file\n";
  absl::flat_hash_map<std::string, std::string> env = {
      {"SDG_BACKEND_API_KEY_MY_VLLM", "sk-from-env"},
      {"SDG_BACKEND_API_KEY_OTHER", "sk-other"}};
  GetEnv getenv = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  BackendFlags flags;
  flags.backend = {"my-vllm=http://h:1/v1", "other=http://h:2/v1"};
  auto backends = BackendsFromFlags(flags, getenv);
  ASSERT_TRUE(backends.ok());
  EXPECT_EQ((*backends)[0].api_key.secret(), "sk-from-env");
  EXPECT_EQ((*backends)[1].api_key.secret(), "sk-other");

  flags.api_key_file = {"my-vllm=" + path};
  backends = BackendsFromFlags(flags, getenv);
  ASSERT_TRUE(backends.ok());
  EXPECT_EQ((*backends)[0].api_key.secret(), "sk-from-file");
}

TEST(BackendFlagsTest, AnEmptyKeyFileIsAnErrorThatShowsNoKey) {
  std::string path = testing::MakeTempDir() + "/empty-key";
  std::ofstream(path) << "\n";
  BackendFlags flags;
  flags.backend = {"a=http://h:1/v1"};
  flags.api_key_file = {"a=" + path};
  EXPECT_THAT(BackendsFromFlags(flags, NoEnv()).status().message(),
              AllOf(HasSubstr(path + " is empty"), Not(HasSubstr("sk-"))));
}

TEST(ParseBackendFlagTest, ParsesNameAndUrls) {
  auto options = ParseBackendFlag("vllm=http://a:8000/v1/,http://b:8000/v1");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->name, "vllm");
  ASSERT_EQ(options->base_urls.size(), 2u);
  EXPECT_EQ(options->base_urls[0], "http://a:8000/v1");
  EXPECT_EQ(options->base_urls[1], "http://b:8000/v1");
}

TEST(ParseBackendFlagTest, RejectsMissingNameOrScheme) {
  EXPECT_THAT(ParseBackendFlag("http://a/v1").status().message(),
              HasSubstr("expected NAME=URL"));
  EXPECT_THAT(ParseBackendFlag("x=a:8000/v1").status().message(),
              HasSubstr("is not an http:// or https:// URL"));
}

}  // namespace
}  // namespace sdg
