// The on-disk kernel cache (see disk_cache.h for the contract).
//
// Entry file layout (all integers little-endian uint64):
//   "PLDCACHE1\n"            magic and format version
//   key_size, key bytes     the full key, so a hash collision or a foreign file is detected
//   payload_size            must equal the bytes that follow the header
//   checksum                hash_hex(payload), 32 hex digits
//   payload bytes
// The file name is hash_hex(kind + key); a reader trusts nothing but a header that matches in full.
#include "backends/common/disk_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

namespace palladium::backend {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "PLDCACHE1\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
constexpr const char* kEntrySuffix = ".plc";
constexpr uint64_t kDefaultMaxMegabytes = 1024;
// Temporary files older than this are left over from a crashed writer and may be removed.
constexpr auto kStaleTemporaryAge = std::chrono::hours(1);

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string cache_root() {
  if (std::string d = env_or_empty("PALLADIUM_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = env_or_empty("XDG_CACHE_HOME"); !x.empty()) return x + "/palladium";
  if (std::string h = env_or_empty("HOME"); !h.empty()) return h + "/.cache/palladium";
  return "/tmp/palladium-cache";
}

uint64_t max_bytes_from_env() {
  const std::string v = env_or_empty("PALLADIUM_CACHE_MAX_MB");
  if (v.empty()) return kDefaultMaxMegabytes << 20;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0') return kDefaultMaxMegabytes << 20;  // unparsable: keep the default
  return static_cast<uint64_t>(mb) << 20;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (in.size() < pos + 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + static_cast<size_t>(i)])) << (8 * i);
  pos += 8;
  return true;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return false;
  out = std::move(ss).str();
  return true;
}

// Parses an entry; returns the payload if the header matches `key` and the checksum holds.
std::optional<std::string> parse_entry(const std::string& bytes, const std::string& key) {
  if (bytes.size() < kMagicSize || bytes.compare(0, kMagicSize, kMagic) != 0) return std::nullopt;
  size_t pos = kMagicSize;
  uint64_t key_size = 0, payload_size = 0;
  if (!get_u64(bytes, pos, key_size) || key_size != key.size() || bytes.size() < pos + key_size) return std::nullopt;
  if (bytes.compare(pos, key_size, key) != 0) return std::nullopt;
  pos += key_size;
  if (!get_u64(bytes, pos, payload_size)) return std::nullopt;
  constexpr size_t kChecksumSize = 32;
  if (bytes.size() < pos + kChecksumSize) return std::nullopt;
  const std::string checksum = bytes.substr(pos, kChecksumSize);
  pos += kChecksumSize;
  if (bytes.size() - pos != payload_size) return std::nullopt;
  std::string payload = bytes.substr(pos);
  if (hash_hex(payload) != checksum) return std::nullopt;
  return payload;
}

// A name no other writer (thread or process) uses at the same time.
std::string temporary_name(const std::string& final_path) {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream os;
  os << final_path << ".tmp-" << ::getpid() << "-" << std::hash<std::thread::id>{}(std::this_thread::get_id()) << "-"
     << counter.fetch_add(1);
  return os.str();
}

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The finaliser of SplitMix64: every input bit affects every output bit.
uint64_t avalanche(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::string hash_hex(const std::string& text) {
  // Two 64-bit lanes, each absorbing 8-byte words with a multiply-rotate step and different
  // constants, then crossed and finalised. Not cryptographic: keys come from our own code.
  uint64_t h1 = 0x9e3779b97f4a7c15ull ^ text.size();
  uint64_t h2 = 0xc2b2ae3d27d4eb4full + text.size();
  size_t i = 0;
  auto absorb = [&](uint64_t w) {
    h1 = rotl(h1 ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full + 0x52dce729;
    h2 = rotl(h2 ^ (w * 0x4cf5ad432745937full), 33) * 0x87c37b91114253d5ull + 0x38495ab5;
    h1 += h2;
    h2 += h1;
  };
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, text.data() + i, 8);
    absorb(w);
  }
  uint64_t tail = 0;
  for (size_t j = 0; i + j < text.size(); ++j) tail |= static_cast<uint64_t>(static_cast<unsigned char>(text[i + j])) << (8 * j);
  absorb(tail ^ 0x80);  // the marker keeps "a" and "a\0" apart
  h1 = avalanche(h1 + h2);
  h2 = avalanche(h2 ^ rotl(h1, 17));
  char out[33];
  std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(h1), static_cast<unsigned long long>(h2));
  return out;
}

DiskCache::DiskCache(std::string kind) : kind_(std::move(kind)), max_bytes_(max_bytes_from_env()) {
  const std::string root = cache_root();
  if (root == "off") return;  // disabled: dir_ stays empty
  std::error_code ec;
  const fs::path dir = fs::path(root) / kind_;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) return;  // unwritable: behave as disabled rather than fail every call
  dir_ = dir.string();
}

std::string DiskCache::path_for(const std::string& key) const {
  if (!enabled()) return "";
  return dir_ + "/" + hash_hex(kind_ + '\0' + key) + kEntrySuffix;
}

std::optional<std::string> DiskCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  const std::string path = path_for(key);
  std::string bytes;
  if (!read_file(path, bytes)) return std::nullopt;
  std::optional<std::string> payload = parse_entry(bytes, kind_ + '\0' + key);
  if (!payload) {
    // Corrupt, truncated or foreign: drop it so the caller's recompiled entry replaces it.
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  // Mark as recently used for the size cap's LRU order.
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  return payload;
}

std::string DiskCache::store(const std::string& key, const std::string& payload) const {
  if (!enabled()) return "";
  const std::string path = path_for(key);
  const std::string full_key = kind_ + '\0' + key;
  std::string bytes(kMagic, kMagicSize);
  put_u64(bytes, full_key.size());
  bytes += full_key;
  put_u64(bytes, payload.size());
  bytes += hash_hex(payload);
  bytes += payload;

  const std::string tmp = temporary_name(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return "";
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return "";
    }
  }
  // rename() replaces atomically: readers see the old entry or the new one, never a mix.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return "";
  }
  enforce_cap();
  return path;
}

void DiskCache::enforce_cap() const {
  struct Entry {
    fs::path path;
    uint64_t size;
    fs::file_time_type used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (!it->is_regular_file(fe)) continue;
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    const auto mtime = it->last_write_time(fe);
    if (fe) continue;
    if (name.find(".tmp-") != std::string::npos) {
      if (now - mtime > kStaleTemporaryAge) fs::remove(p, fe);
      continue;
    }
    if (p.extension() != kEntrySuffix) continue;  // not ours: leave it alone
    const uint64_t size = it->file_size(fe);
    if (fe) continue;
    entries.push_back({p, size, mtime});
    total += size;
  }
  if (total <= max_bytes_) return;
  // Least recently used first; remove until under the cap.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= max_bytes_) break;
    std::error_code re;
    if (fs::remove(e.path, re)) total -= e.size;
  }
}

}  // namespace palladium::backend
