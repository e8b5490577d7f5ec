// The on-disk cache of compiled kernels shared by the compiled backends (cpu: shared objects,
// cuda: cubins). Entries are keyed by a hash of everything that determines the binary (IR text,
// options, compiler and flags, target architecture, library version); each file carries a header
// with the full key and a checksum, so a corrupt, truncated or foreign entry is recompiled, never
// loaded. Writes go to a temporary file renamed into place (atomic); the cache is kept under a
// size cap by removing the least recently used entries.
//
// Directory: $PALLADIUM_CACHE_DIR, else $XDG_CACHE_HOME/palladium, else ~/.cache/palladium,
// else /tmp/palladium-cache. PALLADIUM_CACHE_MAX_MB sets the cap (default 1024). Setting
// PALLADIUM_CACHE_DIR to "off" disables the disk cache.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace palladium::backend {

class DiskCache {
 public:
  // `kind` names a subdirectory ("cpu", "cuda") and is part of every key.
  explicit DiskCache(std::string kind);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // The payload stored under `key`, if present and intact.
  std::optional<std::string> load(const std::string& key) const;
  // Stores atomically; returns the path of the entry (empty if the cache is disabled or the write failed).
  std::string store(const std::string& key, const std::string& payload) const;
  // Path a payload for `key` would have (for backends that must dlopen a real file).
  std::string path_for(const std::string& key) const;

 private:
  void enforce_cap() const;
  std::string kind_;
  std::string dir_;
  uint64_t max_bytes_;
};

// A stable 128-bit hash of a string, as 32 hex digits.
std::string hash_hex(const std::string& text);

}  // namespace palladium::backend
