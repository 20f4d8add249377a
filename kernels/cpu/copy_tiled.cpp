// Tiled strided copies (see copy_tiled.h). Row by row, a transposing copy
// reads or writes one element per cache line; here the two dims along which
// output and input are densest are cut into tiles whole cache lines wide, so
// every line is loaded and stored whole while it is in L1. A dense-to-dense
// tile first copies its input rows into a buffer (rows a power of two apart
// would otherwise evict each other from one cache set), then transposes
// small blocks in vector registers: 16 bytes wide on any x86-64, one whole
// cache line (64 bytes) wide where the CPU has AVX-512 BW. Elements move as
// unsigned integers of their size, so every dtype takes one of four paths.
#include "kernels/cpu/copy_tiled.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cpu_features.h"
#include "kernels/cpu/target_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember::cpu {
namespace {

constexpr int64_t kLineBytes = 64;

// The side of a register block: how many elements one 16-byte vector holds
// (8 bytes for 1-byte elements, which transpose 8x8 from 8-byte loads).
template <class T>
inline constexpr int kBlock = sizeof(T) == 1 ? 8 : int(16 / sizeof(T));

// out[c * out_row + r] = in[r * in_row + c] for r, c < kBlock<T>.
template <class T>
[[gnu::always_inline]] inline void transpose_block(const T* in, int64_t in_row, T* out, int64_t out_row) {
#if defined(__SSE2__)
  auto load = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + r * in_row)); };
  auto store = [&](int c, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c * out_row), v); };
  if constexpr (sizeof(T) == 8) {
    __m128i r0 = load(0), r1 = load(1);
    store(0, _mm_unpacklo_epi64(r0, r1));
    store(1, _mm_unpackhi_epi64(r0, r1));
  } else if constexpr (sizeof(T) == 4) {
    __m128i r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
    __m128i a0 = _mm_unpacklo_epi32(r0, r1), a1 = _mm_unpackhi_epi32(r0, r1);
    __m128i a2 = _mm_unpacklo_epi32(r2, r3), a3 = _mm_unpackhi_epi32(r2, r3);
    store(0, _mm_unpacklo_epi64(a0, a2));
    store(1, _mm_unpackhi_epi64(a0, a2));
    store(2, _mm_unpacklo_epi64(a1, a3));
    store(3, _mm_unpackhi_epi64(a1, a3));
  } else if constexpr (sizeof(T) == 2) {
    __m128i r[8], a[8], b[8];
    for (int k = 0; k < 8; ++k) r[k] = load(k);
    for (int k = 0; k < 4; ++k) {
      a[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
      a[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; ++k) {  // rows 4k..4k+3, low and high halves
      b[4 * k] = _mm_unpacklo_epi32(a[4 * k], a[4 * k + 2]);
      b[4 * k + 1] = _mm_unpackhi_epi32(a[4 * k], a[4 * k + 2]);
      b[4 * k + 2] = _mm_unpacklo_epi32(a[4 * k + 1], a[4 * k + 3]);
      b[4 * k + 3] = _mm_unpackhi_epi32(a[4 * k + 1], a[4 * k + 3]);
    }
    for (int k = 0; k < 4; ++k) {
      store(2 * k, _mm_unpacklo_epi64(b[k], b[k + 4]));
      store(2 * k + 1, _mm_unpackhi_epi64(b[k], b[k + 4]));
    }
  } else {
    __m128i r[8], a[4], b[4];
    for (int k = 0; k < 8; ++k) r[k] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + k * in_row));
    for (int k = 0; k < 4; ++k) a[k] = _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]);
    b[0] = _mm_unpacklo_epi16(a[0], a[1]);
    b[1] = _mm_unpackhi_epi16(a[0], a[1]);
    b[2] = _mm_unpacklo_epi16(a[2], a[3]);
    b[3] = _mm_unpackhi_epi16(a[2], a[3]);
    __m128i c[4] = {_mm_unpacklo_epi32(b[0], b[2]), _mm_unpackhi_epi32(b[0], b[2]), _mm_unpacklo_epi32(b[1], b[3]),
                    _mm_unpackhi_epi32(b[1], b[3])};
    for (int k = 0; k < 4; ++k) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + 2 * k * out_row), c[k]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + (2 * k + 1) * out_row), _mm_unpackhi_epi64(c[k], c[k]));
    }
  }
#else
  for (int c = 0; c < kBlock<T>; ++c)
    for (int r = 0; r < kBlock<T>; ++r) out[c * out_row + r] = in[r * in_row + c];
#endif
}

#if defined(__x86_64__)
// The unpacks of kBytes-wide elements inside each 16-byte lane. Written as
// their zero-masking forms with every element kept (the same instruction):
// g++ 12 warns that the plain forms' undefined pass-through operand may be
// used uninitialised.
template <int kBytes>
[[gnu::always_inline]] EMBER_TARGET_AVX512BW inline __m512i unpack_low(__m512i a, __m512i b) {
  if constexpr (kBytes == 1) return _mm512_maskz_unpacklo_epi8(~__mmask64(0), a, b);
  if constexpr (kBytes == 2) return _mm512_maskz_unpacklo_epi16(~__mmask32(0), a, b);
  if constexpr (kBytes == 4) return _mm512_maskz_unpacklo_epi32(__mmask16(0xffff), a, b);
  if constexpr (kBytes == 8) return _mm512_maskz_unpacklo_epi64(__mmask8(0xff), a, b);
}
template <int kBytes>
[[gnu::always_inline]] EMBER_TARGET_AVX512BW inline __m512i unpack_high(__m512i a, __m512i b) {
  if constexpr (kBytes == 1) return _mm512_maskz_unpackhi_epi8(~__mmask64(0), a, b);
  if constexpr (kBytes == 2) return _mm512_maskz_unpackhi_epi16(~__mmask32(0), a, b);
  if constexpr (kBytes == 4) return _mm512_maskz_unpackhi_epi32(__mmask16(0xffff), a, b);
  if constexpr (kBytes == 8) return _mm512_maskz_unpackhi_epi64(__mmask8(0xff), a, b);
}

// Transposes `rows` (a multiple of kSide) rows of kSide = 64 / sizeof(T)
// elements, stored kSide apart (one cache line each), into kSide output rows
// `out_row` apart: out[c * out_row + r] = in[r * kSide + c]. Each kSide x
// kSide block goes as 4 x 4 sub-blocks of E x E elements, E = 16 / sizeof(T)
// (one 16-byte lane): for columns [E * group, E * group + E), register x[m]
// gathers in its lane k the elements of row E * k + m, so that one E x E
// transpose inside every lane (log2(E) rounds of unpacks, the perfect
// shuffle) leaves in register c the whole output row E * group + c, stored
// as one line.
template <class T>
EMBER_TARGET_AVX512BW void transpose_lines_avx512(const T* in, int64_t rows, T* out, int64_t out_row) {
  constexpr int kSide = 64 / int(sizeof(T)), kE = 16 / int(sizeof(T));
  for (int group = 0; group < 4; ++group) {
    for (int64_t i = 0; i < rows; i += kSide) {
      const T* block = in + i * kSide;
      __m512i x[kE], y[kE];
      for (int m = 0; m < kE; ++m) {
        auto lane = [&](int k) {
          return _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + (kE * k + m) * kSide + kE * group));
        };
        __m512i v = _mm512_castsi128_si512(lane(0));
        v = _mm512_inserti32x4(v, lane(1), 1);
        v = _mm512_inserti32x4(v, lane(2), 2);
        x[m] = _mm512_inserti32x4(v, lane(3), 3);
      }
      for (int round = 1; round < kE; round *= 2) {
        for (int k = 0; k < kE / 2; ++k) {
          y[2 * k] = unpack_low<int(sizeof(T))>(x[k], x[k + kE / 2]);
          y[2 * k + 1] = unpack_high<int(sizeof(T))>(x[k], x[k + kE / 2]);
        }
        for (int k = 0; k < kE; ++k) x[k] = y[k];
      }
      for (int c = 0; c < kE; ++c)
        _mm512_storeu_si512(reinterpret_cast<__m512i*>(out + (kE * group + c) * out_row + i), x[c]);
    }
  }
}
#endif

// A tile spans kTileRows output lines along i and one line along j (measured
// on 1024x1024 transposes: taller tiles than square ones write longer runs of
// each output row and ran 1.4-1.9x faster).
constexpr int64_t kTileRows = 4;

template <class T>
inline constexpr int64_t kSideJ = kLineBytes / int64_t(sizeof(T));
template <class T>
inline constexpr int64_t kSideI = kTileRows * kSideJ<T>;

// Whether a dense-to-dense tile goes through a second buffer on its way out.
// A register block stores into kBlock<T> output rows at once, and L1 holds 8
// lines of one set: with 8-row blocks (1- and 2-byte elements) and output
// rows a multiple of 4096 bytes apart (one set), the partly written lines
// evict each other before they are whole. Writing the transposed tile into a
// buffer and copying its rows out costs one more pass through L1, which
// elsewhere loses (measured on one thread: 7.3x the plain copy's time down
// to 3.9x for a 1-byte [64,128,128] permute(2,0,1), but 2.8x up to 3.5x for
// a 4-byte 1024x1024 transpose).
template <class T>
bool stage_output(int64_t out_j) {
  return kBlock<T> >= 8 && (out_j * int64_t(sizeof(T))) % 4096 == 0;
}

// One tile: element (i, j) moves from in[i * in_i + j * in_j] to
// out[i * out_i + j * out_j], for i < ni <= kSideI, j < nj <= kSideJ.
// Dense-to-dense tiles (out_i == in_j == 1) are staged and transposed in
// blocks: line-wide blocks (`line_blocks`, AVX-512) for the rows of a tile one
// whole line wide, 16-byte ones and single elements for the rest.
template <class T>
void copy_tile(const T* in, int64_t in_i, int64_t in_j, T* out, int64_t out_i, int64_t out_j, int64_t ni,
               int64_t nj, bool line_blocks) {
  if (out_i != 1 || in_j != 1) {
    for (int64_t j = 0; j < nj; ++j)
      for (int64_t i = 0; i < ni; ++i) out[i * out_i + j * out_j] = in[i * in_i + j * in_j];
    return;
  }
  constexpr int64_t in_pitch = kSideJ<T>, out_pitch = kSideI<T>;
  constexpr int64_t block = kBlock<T>;
  alignas(kLineBytes) T rows[kSideI<T> * in_pitch];      // the tile's input rows
  alignas(kLineBytes) T columns[kSideJ<T> * out_pitch];  // the same transposed, when staged on the way out
  if (nj == in_pitch) {  // constant sizes: inlined as a few vector moves, not a call per line
    for (int64_t i = 0; i < ni; ++i) std::memcpy(rows + i * in_pitch, in + i * in_i, sizeof(T) * in_pitch);
  } else {
    for (int64_t i = 0; i < ni; ++i) std::memcpy(rows + i * in_pitch, in + i * in_i, size_t(nj) * sizeof(T));
  }
  // Rows [0, wide_i) go in line-wide blocks, straight to the output: each
  // store writes a whole line, so no output staging is needed.
  int64_t wide_i = 0;
#if defined(__x86_64__)
  if (line_blocks && nj == in_pitch) {
    wide_i = ni - ni % in_pitch;
    transpose_lines_avx512(rows, wide_i, out, out_j);
  }
#else
  (void)line_blocks;
#endif
  const bool staged = wide_i == 0 && stage_output<T>(out_j);
  T* target = staged ? columns : out;
  const int64_t target_j = staged ? out_pitch : out_j;
  // A tile with wide_i > 0 is one line wide, a multiple of `block`: full_j == nj.
  const int64_t full_i = wide_i + (ni - wide_i) / block * block, full_j = nj - nj % block;
  for (int64_t j = 0; j < full_j; j += block) {
    for (int64_t i = wide_i; i < full_i; i += block)
      transpose_block(rows + i * in_pitch + j, in_pitch, target + j * target_j + i, target_j);
    for (int64_t jj = j; jj < j + block; ++jj)
      for (int64_t i = full_i; i < ni; ++i) target[jj * target_j + i] = rows[i * in_pitch + jj];
  }
  for (int64_t j = full_j; j < nj; ++j)
    for (int64_t i = 0; i < ni; ++i) target[j * target_j + i] = rows[i * in_pitch + j];
  if (!staged) return;
  if (ni == out_pitch) {
    for (int64_t j = 0; j < nj; ++j) std::memcpy(out + j * out_j, columns + j * out_pitch, sizeof(T) * out_pitch);
  } else {
    for (int64_t j = 0; j < nj; ++j) std::memcpy(out + j * out_j, columns + j * out_pitch, size_t(ni) * sizeof(T));
  }
}

// The dim with the smallest nonzero |stride| of operand `op` (the innermost on ties); -1 if every stride is 0.
int densest_dim(const ElementwiseLoop& loop, int op) {
  int best = -1;
  for (int d = 0; d < loop.ndim; ++d) {
    int64_t stride = std::llabs(loop.strides[op][d]);
    if (stride != 0 && (best < 0 || stride <= std::llabs(loop.strides[op][best]))) best = d;
  }
  return best;
}

template <class T>
void copy_in_tiles(const ElementwiseLoop& loop, int a, int b) {
  constexpr int64_t side_i = kSideI<T>, side_j = kSideJ<T>;
  const int64_t* out_strides = loop.strides[0];
  const int64_t* in_strides = loop.strides[1];
  int outer[kMaxDims];  // every dim but a and b, outermost first
  int num_outer = 0;
  for (int d = 0; d < loop.ndim; ++d)
    if (d != a && d != b) outer[num_outer++] = d;
  const int64_t ni = loop.shape[a], nj = loop.shape[b];
  const int64_t tiles_i = (ni + side_i - 1) / side_i, tiles_j = (nj + side_j - 1) / side_j;
  const int64_t tiles = loop.numel / (ni * nj) * tiles_i * tiles_j;
  T* out = reinterpret_cast<T*>(loop.data[0]);
  const T* in = reinterpret_cast<const T*>(loop.data[1]);
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (side_i * side_j));
  const bool line_blocks = cpu_has_avx512bw();
  parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t tile_j = tile % tiles_j, tile_i = tile / tiles_j % tiles_i;
      int64_t rest = tile / (tiles_i * tiles_j), out_offset = 0, in_offset = 0;
      for (int k = num_outer - 1; k >= 0; --k) {
        const int d = outer[k];
        const int64_t index = rest % loop.shape[d];
        rest /= loop.shape[d];
        out_offset += index * out_strides[d];
        in_offset += index * in_strides[d];
      }
      const int64_t i = tile_i * side_i, j = tile_j * side_j;
      out_offset += i * out_strides[a] + j * out_strides[b];
      in_offset += i * in_strides[a] + j * in_strides[b];
      copy_tile(in + in_offset, in_strides[a], in_strides[b], out + out_offset, out_strides[a], out_strides[b],
                std::min(side_i, ni - i), std::min(side_j, nj - j), line_blocks);
    }
  });
}

}  // namespace

bool copy_tiled(const ElementwiseLoop& loop, int64_t element_size) {
  if (loop.ndim < 2) return false;
  const int a = densest_dim(loop, 0), b = densest_dim(loop, 1);
  if (a < 0 || b < 0 || a == b) return false;
  switch (element_size) {
    case 1: copy_in_tiles<uint8_t>(loop, a, b); return true;
    case 2: copy_in_tiles<uint16_t>(loop, a, b); return true;
    case 4: copy_in_tiles<uint32_t>(loop, a, b); return true;
    case 8: copy_in_tiles<uint64_t>(loop, a, b); return true;
    default: return false;
  }
}

}  // namespace ember::cpu
