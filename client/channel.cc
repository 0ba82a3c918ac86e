#include "client/channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/read_file.h"

namespace sdg {
namespace {

// Adds the authorization metadata to every call. An interceptor rather
// than call credentials: gRPC sends call credentials over TLS only, and a
// plaintext sdgd on loopback (or behind a TLS-terminating proxy) takes
// tokens too.
class BearerToken final : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string& header) : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  const std::string& header_;
};

class BearerTokenFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerToken(header_);
  }

 private:
  const std::string header_;
};

absl::StatusOr<std::string> ReadFlagFile(const char* flag,
                                         const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", contents.status().message()));
  }
  return contents;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const ChannelOptions& options) {
  if (!options.UsesTls()) return grpc::InsecureChannelCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together (the client certificate for "
        "mTLS and its key)");
  }
  grpc::SslCredentialsOptions ssl;
  for (auto [flag, path, out] :
       {std::tuple{"tls_ca", &options.tls_ca_file, &ssl.pem_root_certs},
        std::tuple{"tls_cert", &options.tls_cert_file, &ssl.pem_cert_chain},
        std::tuple{"tls_key", &options.tls_key_file, &ssl.pem_private_key}}) {
    absl::StatusOr<std::string> pem = ReadFlagFile(flag, *path);
    if (!pem.ok()) return pem.status();
    *out = *std::move(pem);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::string> ReadToken(const std::string& token_file,
                                      const GetEnv& getenv) {
  std::string token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> contents =
        ReadFlagFile("token_file", token_file);
    if (!contents.ok()) return contents.status();
    token = std::string(absl::StripAsciiWhitespace(*contents));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: ", token_file, " is empty"));
    }
  } else if (std::optional<std::string> from_env = getenv("SDG_TOKEN");
             from_env.has_value()) {
    token = std::string(absl::StripAsciiWhitespace(*from_env));
  }
  for (char c : token) {
    // gRPC refuses metadata values with control characters; say so here.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          "the token (--token_file or SDG_TOKEN) holds a control character");
    }
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const ChannelOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  // sdgd restarts in seconds; gRPC's default backoff grows to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // As large as sdgd's own limit (--max_request_mib's default).
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.token.empty()) {
    interceptors.push_back(std::make_unique<BearerTokenFactory>(options.token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      options.address, *credentials, args, std::move(interceptors));
}

}  // namespace sdg
