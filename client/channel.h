// sdgctl's channel to sdgd: plaintext or TLS (system roots or --tls_ca),
// with a client certificate for mTLS, and the caller's bearer token on
// every call.
#ifndef SDG_CLIENT_CHANNEL_H_
#define SDG_CLIENT_CHANNEL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/environment.h"

namespace sdg {

struct ChannelOptions {
  std::string address;
  // TLS with the system's roots; implied by any of the files below.
  bool tls = false;
  std::string tls_ca_file;    // roots to verify sdgd with, PEM
  std::string tls_cert_file;  // client certificate (mTLS), PEM
  std::string tls_key_file;   // its key, PEM
  // The name sdgd's certificate must carry, when it is not the address's
  // host (a port-forward, an IP).
  std::string tls_server_name;
  // Sent as "authorization: Bearer TOKEN"; empty sends none.
  std::string token;

  bool UsesTls() const {
    return tls || !tls_ca_file.empty() || !tls_cert_file.empty() ||
           !tls_key_file.empty();
  }
};

// The token from `token_file`, else from the environment variable
// SDG_TOKEN (read through `getenv`), else "". Never from a flag holding the
// token itself: `ps` would show it.
absl::StatusOr<std::string> ReadToken(const std::string& token_file,
                                      const GetEnv& getenv);

// A channel that reconnects quickly after sdgd restarts and takes messages
// as large as sdgd sends. Fails naming the flag whose file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const ChannelOptions& options);

}  // namespace sdg

#endif  // SDG_CLIENT_CHANNEL_H_
