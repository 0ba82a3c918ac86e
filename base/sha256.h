// SHA-256 (OpenSSL), as lowercase hex.
#ifndef SDG_BASE_SHA256_H_
#define SDG_BASE_SHA256_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace sdg {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(absl::string_view data);
  // 64 hex digits; call once.
  std::string HexDigest();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string Sha256Hex(absl::string_view data);

}  // namespace sdg

#endif  // SDG_BASE_SHA256_H_
