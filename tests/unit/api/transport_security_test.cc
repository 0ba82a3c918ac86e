#include "server/api/transport_security.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

TEST(TransportSecurityTest, LoopbackAddressesAreThoseOnlyThisHostReaches) {
  for (const char* address :
       {"127.0.0.1:50051", "127.1.2.3:1", "localhost:50051", "[::1]:50051",
        "unix:/run/sdgd.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:50051", "[::]:50051", "10.0.0.5:50051",
                              "sdgd.sdg.svc:50051"}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(TransportSecurityTest, HalfAConfigurationIsRefusedNamingTheFlags) {
  TlsOptions cert_only;
  cert_only.cert_file = "/etc/sdgd/tls.crt";
  EXPECT_EQ(MakeServerCredentials(cert_only).status().message(),
            "--tls_cert and --tls_key go together: give both, or neither for "
            "plaintext");
  TlsOptions ca_only;
  ca_only.client_ca_file = "/etc/sdgd/ca.crt";
  EXPECT_EQ(MakeServerCredentials(ca_only).status().message(),
            "--tls_client_ca needs --tls_cert and --tls_key: mTLS is TLS with "
            "client certificates");
  EXPECT_TRUE(MakeServerCredentials({}).ok());  // plaintext
}

}  // namespace
}  // namespace sdg
