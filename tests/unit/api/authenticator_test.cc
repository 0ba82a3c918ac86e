#include "server/api/authenticator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>

#include "base/sha256.h"
#include "server/api/tokens_file.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Line(const std::string& tenant, const std::string& token) {
  return tenant + " sha256:" + Sha256Hex(token) + "\n";
}

TEST(TokensFileTest, ParsesTenantsAndDigestsSkippingCommentsAndBlanks) {
  auto tokens = ParseTokensFile("# team tokens\n\n" + Line("alice", "t1") +
                                "  " + Line("alice", "t2") + Line("bob", "t3"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].tenant, "alice");
  EXPECT_EQ((*tokens)[1].tenant, "alice");
  EXPECT_EQ((*tokens)[2].tenant, "bob");
  EXPECT_EQ((*tokens)[2].token_digest.size(), 32u);
}

TEST(TokensFileTest, ErrorsNameTheLineAndNeverEchoTheSecret) {
  absl::Status plain = ParseTokensFile("alice s3cr3t-token\n").status();
  EXPECT_EQ(plain.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plain.message(), HasSubstr("line 1: the second field must be "
                                         "sha256: and 64 lower-case hex"));
  EXPECT_THAT(plain.message(), Not(HasSubstr("s3cr3t")));

  EXPECT_THAT(ParseTokensFile("# x\nalice\n").status().message(),
              HasSubstr("line 2: want \"TENANT sha256:HEX\", got 1 fields"));
  EXPECT_THAT(ParseTokensFile(Line("Alice!", "t")).status().message(),
              HasSubstr("line 1: tenant \"Alice!\" is not"));
  EXPECT_THAT(
      ParseTokensFile(Line("alice", "same") + Line("bob", "same"))
          .status()
          .message(),
      HasSubstr("line 2: the same token is listed for tenants \"alice\" and "
                "\"bob\""));
}

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sdg-auth-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/tokens";
  }
  void TearDown() override {
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  // Replaces the file the way a Kubernetes Secret update does: a new inode
  // renamed over the old name.
  void WriteTokens(const std::string& text) {
    const std::string next = path_ + ".next";
    std::ofstream(next) << text;
    ASSERT_EQ(::rename(next.c_str(), path_.c_str()), 0);
  }
  std::unique_ptr<Authenticator> Make() {
    Authenticator::Options options;
    options.tokens_file = path_;
    auto made = Authenticator::Create(options, metrics_);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *std::move(made) : nullptr;
  }

  std::string dir_;
  std::string path_;
  Metrics metrics_;
};

TEST_F(AuthenticatorTest, ABearerTokenNamesItsTenant) {
  WriteTokens(Line("alice", "alice-token") + Line("admin", "root-token"));
  auto auth = Make();
  auto alice = auth->Authenticate("Bearer alice-token");
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(alice->tenant, "alice");
  EXPECT_FALSE(alice->admin);
  // The scheme is case-insensitive (RFC 7235).
  auto admin = auth->Authenticate("bearer root-token");
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin);
  EXPECT_TRUE(admin->Owns("alice"));
  EXPECT_FALSE(alice->Owns("bob"));
}

TEST_F(AuthenticatorTest, MissingMalformedAndUnknownAreUnauthenticated) {
  WriteTokens(Line("alice", "alice-token"));
  auto auth = Make();
  absl::Status missing = auth->Authenticate(std::nullopt).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(),
              HasSubstr("send the metadata \"authorization: Bearer TOKEN\""));
  absl::Status basic = auth->Authenticate("Basic YWxpY2U6eA==").status();
  EXPECT_EQ(basic.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(basic.message(), Not(HasSubstr("YWxpY2U6eA")));
  absl::Status unknown = auth->Authenticate("Bearer guessed-token").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(unknown.message(), HasSubstr("not in this server's"));
  EXPECT_THAT(unknown.message(), Not(HasSubstr("guessed")));
  const std::string scrape = metrics_.Serialize();
  EXPECT_THAT(scrape,
              HasSubstr("sdg_auth_failures_total{reason=\"missing\"} 1"));
  EXPECT_THAT(scrape,
              HasSubstr("sdg_auth_failures_total{reason=\"malformed\"} 1"));
  EXPECT_THAT(scrape,
              HasSubstr("sdg_auth_failures_total{reason=\"unknown_token\"} 1"));
}

TEST_F(AuthenticatorTest, AChangedFileCountsFromTheNextCall) {
  WriteTokens(Line("alice", "old-token"));
  auto auth = Make();
  ASSERT_TRUE(auth->Authenticate("Bearer old-token").ok());
  WriteTokens(Line("alice", "new-token"));
  EXPECT_EQ(auth->Authenticate("Bearer old-token").status().code(),
            absl::StatusCode::kUnauthenticated);
  auto renewed = auth->Authenticate("Bearer new-token");
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(renewed->tenant, "alice");
  EXPECT_THAT(
      metrics_.Serialize(),
      HasSubstr("sdg_auth_tokens_file_reloads_total{outcome=\"ok\"} 1"));
}

TEST_F(AuthenticatorTest, AnInvalidOrMissingFileKeepsTheTokensReadBefore) {
  WriteTokens(Line("alice", "alice-token"));
  auto auth = Make();
  WriteTokens("alice not-a-digest\n");
  EXPECT_TRUE(auth->Authenticate("Bearer alice-token").ok());
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  EXPECT_TRUE(auth->Authenticate("Bearer alice-token").ok());
  EXPECT_THAT(
      metrics_.Serialize(),
      HasSubstr("sdg_auth_tokens_file_reloads_total{outcome=\"error\"} 2"));
}

TEST_F(AuthenticatorTest, AFileThatCannotBeReadFailsTheStartNamingTheFlag) {
  Authenticator::Options options;
  options.tokens_file = path_;  // never written
  absl::Status status = Authenticator::Create(options, metrics_).status();
  EXPECT_THAT(status.message(), HasSubstr("--auth_tokens_file " + path_));
  WriteTokens("bob\n");
  status = Authenticator::Create(options, metrics_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("line 1"));
}

TEST_F(AuthenticatorTest, WithoutAFileEveryCallerIsTheOneTenantSeeingAll) {
  auto auth = Authenticator::Create({}, metrics_);
  ASSERT_TRUE(auth.ok());
  auto caller = (*auth)->Authenticate(std::nullopt);
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->tenant, "");
  EXPECT_TRUE(caller->admin);
}

}  // namespace
}  // namespace sdg
