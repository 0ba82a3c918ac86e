#include "base/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace sdg {

struct Sha256::State {
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(context); }
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  EVP_DigestInit_ex(state_->context, EVP_sha256(), nullptr);
}

Sha256::~Sha256() = default;

void Sha256::Update(absl::string_view data) {
  EVP_DigestUpdate(state_->context, data.data(), data.size());
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(state_->context, digest, &size);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return sha.HexDigest();
}

}  // namespace sdg
