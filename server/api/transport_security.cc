#include "server/api/transport_security.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/read_file.h"

namespace sdg {
namespace {

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                &BIO_free);
}

absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", pem.status().message()));
  }
  return pem;
}

// The first certificate in the file `flag` names.
absl::StatusOr<X509Ptr> ReadCertificate(absl::string_view flag,
                                        const std::string& path) {
  absl::StatusOr<std::string> pem = ReadPem(flag, path);
  if (!pem.ok()) return pem.status();
  BioPtr bio = MemoryBio(*pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr),
               &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": no PEM certificate in it"));
  }
  return cert;
}

absl::Status CheckFiles(const TlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both, or neither for "
        "plaintext");
  }
  absl::StatusOr<X509Ptr> cert =
      ReadCertificate("--tls_cert", options.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key_pem = ReadPem("--tls_key", options.key_file);
  if (!key_pem.ok()) return key_pem.status();
  BioPtr key_bio = MemoryBio(*key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr),
             &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key ", options.key_file,
                     ": no unencrypted PEM private key in it"));
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key ", options.key_file,
                     " is not the key of --tls_cert ", options.cert_file));
  }
  if (options.mutual()) {
    absl::StatusOr<X509Ptr> ca =
        ReadCertificate("--tls_client_ca", options.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  ERR_clear_error();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options) {
  if (!options.enabled()) {
    if (options.mutual()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key: mTLS is TLS with "
          "client certificates");
    }
    return grpc::InsecureServerCredentials();
  }
  if (absl::Status s = CheckFiles(options); !s.ok()) return s;
  const unsigned refresh_seconds = static_cast<unsigned>(
      std::max<int64_t>(1, absl::ToInt64Seconds(options.refresh_interval)));
  auto provider =
      options.mutual()
          ? std::make_shared<
                grpc::experimental::FileWatcherCertificateProvider>(
                options.key_file, options.cert_file, options.client_ca_file,
                refresh_seconds)
          : std::make_shared<
                grpc::experimental::FileWatcherCertificateProvider>(
                options.key_file, options.cert_file, refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (options.mutual()) {
    tls.watch_root_certs();
    tls.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

bool IsLoopbackAddress(absl::string_view host_port) {
  if (absl::StartsWith(host_port, "unix:") ||
      absl::StartsWith(host_port, "unix-abstract:")) {
    return true;
  }
  absl::string_view host = host_port;
  if (absl::StartsWith(host, "[")) {
    host = host.substr(1, host.find(']') - 1);
  } else if (size_t colon = host.rfind(':'); colon != host.npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace sdg
