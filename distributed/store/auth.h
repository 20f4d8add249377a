// The store's challenge-response on the job token (Note [Store
// authentication] in distributed/README.md). Called by tcp_store.cpp; tested
// in tests/distributed/test_store.cpp, which also uses it to play a client
// that authenticates and then misbehaves.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace ember::distributed::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

// The handshake's messages, in order (fixed sizes, no length prefix):
//   server -> client  hello:   kMagic, server nonce
//   client -> server  answer:  client_proof(token, server nonce), client nonce
//   server -> client  verdict: kAccepted then server_proof(token, client nonce), or kRefused alone
inline constexpr std::array<uint8_t, 4> kMagic{'E', 'M', 'B', '1'};
inline constexpr size_t kHelloBytes = kMagic.size() + kNonceBytes;
inline constexpr size_t kAnswerBytes = kProofBytes + kNonceBytes;
inline constexpr uint8_t kAccepted = 1;
inline constexpr uint8_t kRefused = 0;

// Bytes from the OS's random source (getrandom).
void random_bytes(std::span<uint8_t> out);
Nonce random_nonce();

// HMAC-SHA256(token, nonce || direction label); the labels differ so that one
// side's proof can never be replayed as the other's.
Proof client_proof(const std::string& token, const Nonce& server_nonce);
Proof server_proof(const std::string& token, const Nonce& client_nonce);

// Constant time in the contents, so timing reveals nothing about how much of a forged proof was right.
bool proofs_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace ember::distributed::auth
