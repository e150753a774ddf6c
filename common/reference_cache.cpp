#include "common/reference_cache.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <thread>

#include "common/build_info.hpp"

namespace ladder {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'L', 'R', 'E', 'F', 'v', '1', '\0', '\0'};
// A lock older than this belongs to a process that died: the longest reference of the suite (the
// large fully-checked problem) takes about a minute on the CPU.
constexpr auto kStaleLock = std::chrono::seconds(600);
constexpr auto kPoll = std::chrono::milliseconds(50);

std::optional<fs::path> cache_dir() {
  const char* dir = std::getenv("LADDER_REFERENCE_CACHE");
  if (!dir || !*dir || build_info().tree_hash.empty()) return std::nullopt;  // off: no way to know what is stale
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return std::nullopt;
  return fs::path(dir);
}

// The vectors of a reference, in a fixed order: int64 ones, then doubles.
struct Fields {
  std::vector<std::vector<std::int64_t>*> ints;
  std::vector<std::vector<double>*> reals;
};
Fields fields(AttentionRows& r) { return {{&r.rows, &r.lse_at}, {&r.o, &r.lse, &r.floor}}; }
Fields fields(BackwardRows& r) {
  return {{&r.q_rows, &r.k_rows}, {&r.dq, &r.dk, &r.dv, &r.dq_floor, &r.dk_floor, &r.dv_floor}};
}

template <class T>
void put(std::ofstream& out, const std::vector<T>& v) {
  const std::uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(n * sizeof(T)));
}
template <class T>
bool get(std::ifstream& in, std::vector<T>& v, std::uintmax_t& left) {
  std::uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || left < sizeof n) return false;
  left -= sizeof n;
  if (n > left / sizeof(T)) return false;  // a torn or foreign file: never allocate what it claims
  v.resize(n);
  left -= n * sizeof(T);
  return bool(in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(T))));
}

template <class Rows>
bool load(const fs::path& file, Rows& rows) {
  std::error_code ec;
  std::uintmax_t left = fs::file_size(file, ec);
  if (ec) return false;
  std::ifstream in(file, std::ios::binary);
  char magic[sizeof kMagic];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0) return false;
  left -= sizeof magic;
  Fields f = fields(rows);
  for (auto* v : f.ints)
    if (!get(in, *v, left)) return false;
  for (auto* v : f.reals)
    if (!get(in, *v, left)) return false;
  return left == 0;
}

template <class Rows>
void store(const fs::path& file, Rows& rows) {
  const fs::path tmp = file.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, sizeof kMagic);
    Fields f = fields(rows);
    for (auto* v : f.ints) put(out, *v);
    for (auto* v : f.reals) put(out, *v);
    if (!out) {  // a full disk: the tests go on computing, only slower
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);  // atomic: a reader sees the old name absent or the whole entry
  if (ec) fs::remove(tmp, ec);
}

bool lock_is_stale(const fs::path& lock) {
  std::error_code ec;
  const auto when = fs::last_write_time(lock, ec);
  return ec || fs::file_time_type::clock::now() - when > kStaleLock;
}

template <class Rows>
Rows cached(std::uint64_t key, const std::function<Rows()>& compute) {
  const auto dir = cache_dir();
  if (!dir) return compute();
  const fs::path file = *dir / fmt::format("{:016x}.ref", key);
  const fs::path lock = *dir / fmt::format("{:016x}.lock", key);
  Rows rows;
  for (;;) {
    if (load(file, rows)) return rows;
    // O_EXCL: exactly one process takes the lock and computes the entry.
    if (std::FILE* f = std::fopen(lock.c_str(), "wx")) {
      std::fclose(f);
      rows = compute();
      store(file, rows);
      std::error_code ec;
      fs::remove(lock, ec);
      return rows;
    }
    if (lock_is_stale(lock)) {
      std::error_code ec;
      fs::remove(lock, ec);
      continue;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

KeyHash& KeyHash::bytes(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) state_ = (state_ ^ p[i]) * 0x100000001b3ull;
  return *this;
}

KeyHash& KeyHash::shape(const AttentionShape& s) {
  value(s.batch).value(s.heads).value(s.seqlen).value(s.head_dim).value(s.causal).value(s.dtype);
  value(s.kv_heads).value(s.kv_seqlen).value(s.page_size).value(s.head_scales);
  values(std::span<const int>(s.q_lens)).value(s.q_lens.size());
  values(std::span<const int>(s.kv_lens)).value(s.kv_lens.size());
  // The code that computes the reference: any edit of the tree changes this.
  const std::string& tree = build_info().tree_hash;
  return bytes(tree.data(), tree.size());
}

AttentionRows cached_reference(std::uint64_t key, const std::function<AttentionRows()>& compute) {
  return cached<AttentionRows>(key, compute);
}
BackwardRows cached_reference(std::uint64_t key, const std::function<BackwardRows()>& compute) {
  return cached<BackwardRows>(key, compute);
}

}  // namespace ladder
