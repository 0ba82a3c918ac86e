#include "tests/testing/test_certificates.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"

namespace sdg::testing {
namespace {

absl::Status Openssl(std::vector<std::string> args) {
  // Debian's package (scripts/packages-test.txt); RunCommand takes a path.
  args.insert(args.begin(), "/usr/bin/openssl");
  CommandResult result = RunCommand(args);
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat(
        "openssl ", args[1], " exited ", result.exit_code, ": ", result.err));
  }
  return absl::OkStatus();
}

// P-256 keys: quick to make, and every TLS stack takes them.
const std::vector<std::string> kNewKey = {
    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};

}  // namespace

absl::Status MakeCertificateAuthority(const std::string& dir,
                                      const std::string& name,
                                      CertificateFiles& out) {
  out.cert = absl::StrCat(dir, "/", name, ".pem");
  out.key = absl::StrCat(dir, "/", name, ".key");
  std::vector<std::string> args = {"req", "-x509"};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  args.insert(args.end(),
              {"-keyout", out.key, "-out", out.cert, "-days", "2", "-subj",
               "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
               "-addext", "keyUsage=critical,keyCertSign,cRLSign"});
  return Openssl(args);
}

absl::Status MakeSignedCertificate(const std::string& dir,
                                   const std::string& name,
                                   const CertificateFiles& ca,
                                   const std::string& subject_alt_names,
                                   CertificateFiles& out) {
  static std::atomic<int> serial{1000};
  out.cert = absl::StrCat(dir, "/", name, ".pem");
  out.key = absl::StrCat(dir, "/", name, ".key");
  const std::string request = absl::StrCat(dir, "/", name, ".csr");
  const std::string extensions = absl::StrCat(dir, "/", name, ".ext");
  WriteFile(extensions,
            absl::StrCat("subjectAltName=", subject_alt_names,
                         "\nextendedKeyUsage=serverAuth,clientAuth\n"
                         "basicConstraints=critical,CA:FALSE\n"));
  std::vector<std::string> args = {"req"};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  args.insert(args.end(),
              {"-keyout", out.key, "-out", request, "-subj", "/CN=" + name});
  if (absl::Status s = Openssl(args); !s.ok()) return s;
  return Openssl({"x509", "-req", "-in", request, "-CA", ca.cert, "-CAkey",
                  ca.key, "-set_serial", std::to_string(serial++), "-days", "2",
                  "-extfile", extensions, "-out", out.cert});
}

}  // namespace sdg::testing
