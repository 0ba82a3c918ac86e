// The gRPC port's credentials: plaintext, TLS (--tls_cert, --tls_key) or
// mTLS (--tls_client_ca: a client must present a certificate that CA
// signed). gRPC's FileWatcherCertificateProvider re-reads the files every
// refresh interval, so that a certificate cert-manager renews is served
// without a restart; handshakes in progress keep the one they began with.
#ifndef SDG_SERVER_API_TRANSPORT_SECURITY_H_
#define SDG_SERVER_API_TRANSPORT_SECURITY_H_

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sdg {

struct TlsOptions {
  // PEM files; all empty: plaintext.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  absl::Duration refresh_interval = absl::Minutes(1);

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
  bool mutual() const { return !client_ca_file.empty(); }
};

// Checks the files now (readable PEM, the key matching the certificate), so
// that a mistake fails the start with the flag to fix instead of every
// handshake later.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

// True for addresses only this host can reach: 127.0.0.0/8, [::1],
// localhost, unix sockets.
bool IsLoopbackAddress(absl::string_view host_port);

}  // namespace sdg

#endif  // SDG_SERVER_API_TRANSPORT_SECURITY_H_
