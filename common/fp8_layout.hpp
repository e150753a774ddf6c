// Where the bytes of the FP8 forward's tiles go (Part VIII): the key order P·V reads, the 128-byte
// swizzle, and every lane's addresses in the producer's two ways of transposing V. Host and device
// compile the same arithmetic, so tests/cpu/test_fp8_layout.cpp checks the kernel's own maps by
// emulating ldmatrix.trans, PRMT and stmatrix lane by lane on a tile: every Vᵀ byte written once,
// with the right V byte, and every shared-memory access of a warp free of bank conflicts.
//
// The tiles are 128 rows of 128 bytes, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the
// 128-byte swizzle TMA writes and wgmma's descriptors read). V is [keys][D], Vᵀ is [D][keys] with
// the keys of each 32-key slice in P's order (permuted_key). At D = 64 a Q, K or V row is 64
// bytes and takes the 64-byte swizzle (swizzled_offset's row_bytes); Vᵀ's rows are still 128 keys,
// 128 bytes, only 64 of them.
#pragma once

#include <cstdint>

#include "common/host_device.hpp"

namespace ladder::fp8 {

inline constexpr int kRowBytes = 128;  // one swizzled row: 128 e4m3 elements
inline constexpr int kK = 32;          // elements per k step of an 8-bit wgmma
inline constexpr int kChunkBytes = 16;

// ---- The key order inside a k32 slice ----------------------------------------------------------
// Slot k = 16h + 4t + f of P·V's A operand (h = 0, 1; quad lane t; byte f = 0..3 of the register)
// is filled from S's accumulator column j = 2h + f / 2 (of the slice's four n8 tiles), pair element
// e = f % 2: the key 8j + 2t + e. The inverse, used by the transposes: which key of the slice a
// slot holds.
LADDER_HOST_DEVICE constexpr int permuted_key(int k) {
  const int h = k / 16, t = (k % 16) / 4, f = k % 4;
  return 16 * h + 8 * (f / 2) + 2 * t + f % 2;
}

// Rows and bytes are never negative: unsigned arithmetic lets / and % be shifts and masks.
// The swizzles TMA writes (CU_TENSOR_MAP_SWIZZLE_128B / _64B) are one rule on the byte offset o of
// a dense tile: the 16-byte chunk bits of o are XORed with the bits of o / 128 that fit them, three
// for 128-byte rows (chunk c of row r at c ^ (r % 8)), two for 64-byte rows (c ^ (r / 2 % 4)).
LADDER_HOST_DEVICE constexpr std::uint32_t swizzled_offset(int row, int byte, int row_bytes = kRowBytes) {
  const std::uint32_t r = std::uint32_t(row), b = std::uint32_t(byte), chunk = kChunkBytes;
  if (row_bytes == kRowBytes) return r * kRowBytes + (((b / chunk) ^ (r % 8)) * chunk) + b % chunk;
  const std::uint32_t o = r * std::uint32_t(row_bytes) + b;
  return o ^ (((o / 128) & (std::uint32_t(row_bytes) / chunk - 1)) * chunk);
}

// ---- Vᵀ of more than 128 keys ---------------------------------------------------------------------
// A Vᵀ row is one swizzled 128-byte row only for 128-key blocks. A wider block (step 47's 192
// keys) puts its Vᵀ in 128-key tiles side by side, each 128 head-dim rows of 128 bytes with the
// same swizzle: slot s of row d lies in tile s / 128 at swizzled_offset(d, s % 128). The second
// tile of a 192-key block uses half of each row; a k32 slice never straddles two tiles, so each
// wgmma's B descriptor points into one tile, as at 128 keys (fp8.cuh's issue_pv_e4m3).
inline constexpr std::uint32_t kVtTileBytes = std::uint32_t(kRowBytes) * kRowBytes;
LADDER_HOST_DEVICE constexpr int vt_tiles(int block_n) { return (block_n + kRowBytes - 1) / kRowBytes; }
LADDER_HOST_DEVICE constexpr std::uint32_t vt_offset(int d, int slot) {
  return std::uint32_t(slot / kRowBytes) * kVtTileBytes + swizzled_offset(d, slot % kRowBytes);
}

// The same 192 keys packed (step 47's three_stages): the first 128 keys as above, the last 64 in a
// tile of 64-byte rows in the 64-byte swizzle right after it, 8 KB where a second 128-key tile
// takes 16, so that a third ring stage fits. P·V reads that tile with a 64-byte-row descriptor.
inline constexpr int kTailKeys = 64;
LADDER_HOST_DEVICE constexpr std::uint32_t vt_offset_packed(int d, int slot) {
  return slot < kRowBytes ? swizzled_offset(d, slot) : kVtTileBytes + swizzled_offset(d, slot - kRowBytes, kTailKeys);
}

// ---- The matrix transpose: ldmatrix.trans, PRMT, stmatrix ---------------------------------------
// A unit is one 16-byte head-dim chunk c (head dims 16c .. 16c + 15) of one k32 slice kk (keys
// 32kk .. 32kk + 31): 512 bytes in, 512 out, 32 units a 128 × 128 tile (matrix_units: 8 a slice),
// 16 at D = 64 (4 a slice).
//
// In: ldmatrix.x4.trans.b16 loads four 8 × 8 matrices of 16-bit elements, each 8 rows of 16
// bytes, lanes 8i .. 8i + 7 naming matrix i's rows. Matrix i = 2h + half is the 8 keys
// 32kk + 16h + 8half + 0..7 at chunk c. Transposed, lane (q = lane / 4, t = lane % 4) receives from
// matrix i the byte pairs of keys 2t and 2t + 1 (of those 8) at head dims 16c + 2q, 16c + 2q + 1:
//     R[i] = V[k][d], V[k][d + 1], V[k + 1][d], V[k + 1][d + 1],   k = 32kk + 16h + 8half + 2t.
// Rows are 8 consecutive keys, so their chunks c ^ (key % 8) are 8 different ones: no conflict.
// At D = 64 the 8 rows are 512 bytes: keys 2j and 2j + 1 share a 128-byte line, halves apart, and
// c ^ (j % 4) differs for the four j: 8 different 16-byte bank groups again.
//
// PRMT: bytes 0 and 2 of R[2h] and of R[2h + 1] are keys 2t, 2t + 1, 8 + 2t, 9 + 2t of the
// 16-key half h at head dim d: exactly slots 16h + 4t .. 16h + 4t + 3 of Vᵀ row d in P's order
// (permuted_key). Bytes 1 and 3 are row d + 1. So two PRMTs turn a pair of loaded registers into
// two words of Vᵀ, rows 16c + 2q + e (e = 0, 1).
//
// Out: stmatrix.x4.b16 stores four 8 × 8 matrices, lane (q, t)'s register i going to row q,
// bytes 4t .. 4t + 3, of matrix i. Rows 16c + 2q + e for one e would be 8 rows with only four
// values of row % 8, two to a swizzled chunk: a 2-way conflict. So matrix i = 2h + σ takes, in its
// row q, Vᵀ row 16c + 2q + (σ ^ [q ≥ 4]): rows 0, 2, 4, 6 then 9, 11, 13, 15 of the chunk (σ = 0),
// eight different row % 8. The lanes with q ≥ 4 swap which of their two words they store where,
// and that is free: it is only which PRMT selector they use (prmt_selector).
inline constexpr int kMatrixUnits = 32;  // of a 128-key block at D = 128
LADDER_HOST_DEVICE constexpr int matrix_units(int block_n, int head_dim = kRowBytes) {
  return (head_dim / kChunkBytes) * (block_n / kK);
}
static_assert(matrix_units(kRowBytes) == kMatrixUnits);
inline constexpr std::uint32_t kSelectEven = 0x6420;  // bytes 0, 2 of each register: head dim d
inline constexpr std::uint32_t kSelectOdd = 0x7531;   // bytes 1, 3: head dim d + 1

// A unit's chunk and slice: 8 chunks a slice at D = 128, 4 at D = 64 (a power of two either way).
LADDER_HOST_DEVICE constexpr int matrix_unit_chunk(int unit, int head_dim = kRowBytes) {
  return unit & (head_dim / kChunkBytes - 1);
}
LADDER_HOST_DEVICE constexpr int matrix_unit_slice(int unit, int head_dim = kRowBytes) {
  return int(std::uint32_t(unit) / std::uint32_t(head_dim / kChunkBytes));
}
static_assert(matrix_unit_chunk(13, 64) == 1 && matrix_unit_slice(13, 64) == 3 && matrix_unit_slice(13) == 1);

// Byte offset in V (rows of head_dim bytes) of the row this lane names for ldmatrix.
LADDER_HOST_DEVICE constexpr std::uint32_t matrix_load_offset(int unit, int lane, int head_dim = kRowBytes) {
  const int i = lane >> 3, r = lane & 7;
  const int key = kK * matrix_unit_slice(unit, head_dim) + 16 * (i / 2) + 8 * (i % 2) + r;
  return swizzled_offset(key, kChunkBytes * matrix_unit_chunk(unit, head_dim), head_dim);
}
// Vᵀ's row in row q of store matrix i = 2h + σ.
LADDER_HOST_DEVICE constexpr int matrix_store_row(int unit, int sigma, int q, int head_dim = kRowBytes) {
  return 16 * matrix_unit_chunk(unit, head_dim) + 2 * q + (sigma ^ (q >= 4 ? 1 : 0));
}
// Byte offset in Vᵀ of the row this lane names for stmatrix (`packed`: vt_offset_packed's layout).
LADDER_HOST_DEVICE constexpr std::uint32_t matrix_store_offset(int unit, int lane, int head_dim = kRowBytes,
                                                               bool packed = false) {
  const int i = lane >> 3, r = lane & 7;
  const int row = matrix_store_row(unit, i % 2, r, head_dim), slot = kK * matrix_unit_slice(unit, head_dim) + 16 * (i / 2);
  return packed ? vt_offset_packed(row, slot) : vt_offset(row, slot);
}
// The selector that makes this lane's store register 2h + σ from R[2h], R[2h + 1].
LADDER_HOST_DEVICE constexpr std::uint32_t prmt_selector(int sigma, int lane) {
  return (sigma ^ (lane / 4 >= 4 ? 1 : 0)) ? kSelectOdd : kSelectEven;
}

// ---- The word transpose: 32-bit loads, PRMT, 32-bit stores --------------------------------------
// The first way (the chapter's ablation row): a unit is a 4 × 4 byte block, four keys' words (4 head
// dims each) in, a 4 × 4 byte transpose in registers, four head dims' words (4 slots each) out; a
// warp-iteration is 32 such units, 32 of them a tile. Iteration `it`, lane (t0, t1, dg0, h, kk0)
// with its bits a, b, kk1, dg3, dg4 handles k32 slice kk = 2kk1 + kk0, half h, quad position t,
// head-dim group dg = dg0 | (h ^ a) << 1 | (kk0 ^ b) << 2 | dg34 << 3: a load's bank
// ((dg / 4) ^ (2t + f % 2))·4 + dg % 4 and a store's ((2kk + h) ^ (4·(dg % 2) + i))·4 + t are then
// one-to-one over the warp, one wavefront per access, but an access is 4 bytes a lane.
inline constexpr int kWordIterations = 32;
// The 4 × 4 byte transpose: interleave the bytes of two keys' words (x0: bytes 0, 1 of each; x1:
// bytes 2, 3), then the 16-bit halves of two such pairs; word i ends up with byte i of every key.
inline constexpr std::uint32_t kWordBytesLow = 0x5140, kWordBytesHigh = 0x7362;
inline constexpr std::uint32_t kWordHalvesLow = 0x5410, kWordHalvesHigh = 0x7632;

struct WordUnit {
  int kk, h, t, dg;
};
LADDER_HOST_DEVICE constexpr WordUnit word_unit(int it, int lane) {
  const int t = lane & 3, dg0 = (lane >> 2) & 1, h = (lane >> 3) & 1, kk0 = (lane >> 4) & 1;
  const int a = it & 1, b = (it >> 1) & 1, kk1 = (it >> 2) & 1, dg34 = it >> 3;
  return {2 * kk1 + kk0, h, t, dg0 | ((h ^ a) << 1) | ((kk0 ^ b) << 2) | (dg34 << 3)};
}
// Key f's word (head dims 4dg .. 4dg + 3) in V.
LADDER_HOST_DEVICE constexpr std::uint32_t word_load_offset(const WordUnit& u, int f) {
  return swizzled_offset(kK * u.kk + permuted_key(16 * u.h + 4 * u.t + f), 4 * u.dg);
}
// Head dim 4dg + i's word (slots 16h + 4t .. + 3 of slice kk) in Vᵀ.
LADDER_HOST_DEVICE constexpr std::uint32_t word_store_offset(const WordUnit& u, int i) {
  return swizzled_offset(4 * u.dg + i, kK * u.kk + 16 * u.h + 4 * u.t);
}

}  // namespace ladder::fp8
