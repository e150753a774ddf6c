#include "common/random.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

namespace ladder {
namespace {

// splitmix64: a counter-based generator, so element i needs no state from element i-1.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double uniform_open(std::uint64_t bits) {  // in (0, 1): never 0, so log() below is finite
  return (double(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Box–Muller on the pair (2·(i/2), 2·(i/2)+1): element i takes the cosine or the sine branch.
float normal_at(std::uint64_t key, std::uint64_t i) {
  const std::uint64_t pair = i / 2;
  const double u1 = uniform_open(mix(key ^ mix(2 * pair)));
  const double u2 = uniform_open(mix(key ^ mix(2 * pair + 1)));
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  return float(i % 2 == 0 ? r * std::cos(theta) : r * std::sin(theta));
}

template <typename Fn>
void parallel_for(std::size_t count, Fn fn) {
  const std::size_t threads =
      std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 64);
  const std::size_t chunk = (count + threads - 1) / threads;
  if (count < (1u << 16) || threads == 1) {
    fn(std::size_t(0), count);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    const std::size_t begin = t * chunk, end = std::min(count, begin + chunk);
    if (begin < end) pool.emplace_back(fn, begin, end);
  }
  for (auto& th : pool) th.join();
}

}  // namespace

std::vector<float> random_normal(std::size_t count, std::uint64_t seed, std::uint64_t stream,
                                 float scale) {
  std::vector<float> out(count);
  const std::uint64_t key = mix(seed) ^ mix(stream + 0x51ED270B27u);
  parallel_for(count, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) out[i] = normal_at(key, i) * scale;
  });
  return out;
}

Tensor16 random_tensor16(std::size_t count, std::uint64_t seed, std::uint64_t stream, DType dtype,
                         float scale) {
  Tensor16 t;
  t.dtype = dtype;
  t.value = random_normal(count, seed, stream, scale);
  t.bits.resize(count);
  parallel_for(count, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      t.bits[i] = to_bits(dtype, t.value[i]);
      t.value[i] = from_bits(dtype, t.bits[i]);
    }
  });
  return t;
}

std::vector<float> random_small_integers(std::size_t count, std::uint64_t seed) {
  std::vector<float> out(count);
  const std::uint64_t key = mix(seed ^ 0xA5A5A5A5u);
  for (std::size_t i = 0; i < count; ++i) {
    const int magnitude = 1 + int(mix(key ^ mix(i)) % 8);
    const bool negative = (mix(key + i) & 1) != 0;
    out[i] = float(negative ? -magnitude : magnitude);
  }
  return out;
}

}  // namespace ladder
