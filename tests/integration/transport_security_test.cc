// The gRPC port's TLS files checked at start, with certificates made by
// openssl (scripts/packages-test.txt) for the test.
#include "server/api/transport_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/subprocess.h"
#include "tests/testing/test_certificates.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

class TransportSecurityFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    ASSERT_TRUE(testing::MakeCertificateAuthority(dir_, "ca", ca_).ok());
    ASSERT_TRUE(
        testing::MakeSignedCertificate(dir_, "one", ca_, "DNS:one", one_).ok());
    ASSERT_TRUE(
        testing::MakeSignedCertificate(dir_, "two", ca_, "DNS:two", two_).ok());
  }
  TlsOptions Options(const std::string& cert, const std::string& key) {
    TlsOptions options;
    options.cert_file = cert;
    options.key_file = key;
    return options;
  }

  std::string dir_;
  testing::CertificateFiles ca_, one_, two_;
};

TEST_F(TransportSecurityFilesTest, AMatchingPairStartsTlsAndMutualTls) {
  EXPECT_TRUE(MakeServerCredentials(Options(one_.cert, one_.key)).ok());
  TlsOptions mutual = Options(one_.cert, one_.key);
  mutual.client_ca_file = ca_.cert;
  EXPECT_TRUE(MakeServerCredentials(mutual).ok());
}

TEST_F(TransportSecurityFilesTest, MistakesStopTheStartNamingTheFlag) {
  absl::Status mismatched =
      MakeServerCredentials(Options(one_.cert, two_.key)).status();
  EXPECT_EQ(mismatched.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      mismatched.message(),
      "--tls_key " + two_.key + " is not the key of --tls_cert " + one_.cert);
  EXPECT_THAT(
      MakeServerCredentials(Options(one_.key, one_.key)).status().message(),
      HasSubstr("--tls_cert " + one_.key + ": no PEM certificate"));
  EXPECT_THAT(MakeServerCredentials(Options(dir_ + "/missing.pem", one_.key))
                  .status()
                  .message(),
              HasSubstr("--tls_cert: cannot read " + dir_ + "/missing.pem"));
  TlsOptions bad_ca = Options(one_.cert, one_.key);
  bad_ca.client_ca_file = one_.key;
  EXPECT_THAT(MakeServerCredentials(bad_ca).status().message(),
              HasSubstr("--tls_client_ca " + one_.key + ": no PEM"));
}

}  // namespace
}  // namespace sdg
