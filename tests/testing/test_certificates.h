// Certificates made at test time with Debian's openssl (no key is ever
// committed): a CA, and server or client certificates it signs.
#ifndef SDG_TESTS_TESTING_TEST_CERTIFICATES_H_
#define SDG_TESTS_TESTING_TEST_CERTIFICATES_H_

#include <string>

#include "absl/status/status.h"

namespace sdg::testing {

struct CertificateFiles {
  std::string cert;  // PEM
  std::string key;   // PEM, unencrypted
};

// A self-signed CA, `dir`/`name`.pem and .key.
absl::Status MakeCertificateAuthority(const std::string& dir,
                                      const std::string& name,
                                      CertificateFiles& out);

// A certificate `ca` signs for `subject_alt_names` (openssl's syntax:
// "DNS:sdgd.test,IP:127.0.0.1"), usable by a server and a client.
absl::Status MakeSignedCertificate(const std::string& dir,
                                   const std::string& name,
                                   const CertificateFiles& ca,
                                   const std::string& subject_alt_names,
                                   CertificateFiles& out);

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_TEST_CERTIFICATES_H_
