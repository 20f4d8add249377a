// 16-bit floating types. Both store bits and compute in float: arithmetic on
// them converts to float (implicitly), and assigning a float rounds to nearest
// even. Kernels that care about speed convert whole runs at once.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace ember {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  BFloat16(float value) : bits(round(value)) {}  // NOLINT: implicit like a built-in float
  operator float() const { return std::bit_cast<float>(uint32_t(bits) << 16); }

  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  static uint16_t round(float value) {
    uint32_t u = std::bit_cast<uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    uint32_t lsb = (u >> 16) & 1u;
    return uint16_t((u + 0x7fffu + lsb) >> 16);
  }
};

struct Half {
  uint16_t bits = 0;

  Half() = default;
  Half(float value) : bits(from_float(value)) {}  // NOLINT: implicit like a built-in float
  operator float() const { return to_float(bits); }

  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  static uint16_t from_float(float value);
  static float to_float(uint16_t bits);
};

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline uint16_t Half::from_float(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    // Adding 0.5 (as a float) aligns the half's subnormal grid with the float's
    // mantissa, so the hardware's round-to-nearest-even does the rounding.
    float shifted = std::bit_cast<float>(abs) + 0.5f;
    return uint16_t(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return uint16_t(sign | (abs >> 13));
}

inline float Half::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {  // subnormal: mantissa * 2^-24
    float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace ember

template <>
class std::numeric_limits<ember::Half> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static ember::Half infinity() { return ember::Half::from_bits(0x7c00); }
  static ember::Half lowest() { return ember::Half::from_bits(0xfbff); }
  static ember::Half max() { return ember::Half::from_bits(0x7bff); }
  static ember::Half quiet_NaN() { return ember::Half::from_bits(0x7e00); }
  static ember::Half epsilon() { return ember::Half::from_bits(0x1400); }
};

template <>
class std::numeric_limits<ember::BFloat16> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  static ember::BFloat16 infinity() { return ember::BFloat16::from_bits(0x7f80); }
  static ember::BFloat16 lowest() { return ember::BFloat16::from_bits(0xff7f); }
  static ember::BFloat16 max() { return ember::BFloat16::from_bits(0x7f7f); }
  static ember::BFloat16 quiet_NaN() { return ember::BFloat16::from_bits(0x7fc0); }
  static ember::BFloat16 epsilon() { return ember::BFloat16::from_bits(0x3c00); }
};
