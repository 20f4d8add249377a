// The store's challenge-response (Note [Store authentication]): nonces from
// getrandom, HMAC-SHA256 from OpenSSL's libcrypto. Called by tcp_store.cpp;
// tested in tests/distributed/test_store.cpp.
#include "distributed/store/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ember::distributed::auth {

void random_bytes(std::span<uint8_t> out) {
  size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t count = getrandom(out.data() + filled, out.size() - filled, 0);
    if (count < 0 && errno == EINTR) continue;
    EMBER_CHECK(count > 0, "store: getrandom failed (errno {}); cannot make a nonce or token", errno);
    filled += size_t(count);
  }
}

Nonce random_nonce() {
  Nonce nonce;
  random_bytes(nonce);
  return nonce;
}

namespace {

Proof hmac(const std::string& token, const Nonce& nonce, std::string_view label) {
  std::vector<uint8_t> message(nonce.begin(), nonce.end());
  message.insert(message.end(), label.begin(), label.end());
  Proof proof;
  unsigned int length = 0;
  const unsigned char* result = HMAC(EVP_sha256(), token.data(), int(token.size()), message.data(), message.size(),
                                     proof.data(), &length);
  EMBER_ASSERT(result != nullptr && length == kProofBytes, "HMAC-SHA256 gave {} bytes", length);
  return proof;
}

}  // namespace

Proof client_proof(const std::string& token, const Nonce& server_nonce) {
  return hmac(token, server_nonce, "ember store client");
}

Proof server_proof(const std::string& token, const Nonce& client_nonce) {
  return hmac(token, client_nonce, "ember store server");
}

bool proofs_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ember::distributed::auth
