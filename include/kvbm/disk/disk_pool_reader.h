// kvbm/disk/disk_pool_reader.h: reads the blocks of a persistent disk pool that
// another process owns.
//
// A persistent pool file belongs to one process (DiskStorage holds its lock).
// Some engines replicate a block's bytes on several processes and write them
// from one only: SGLang backs MLA pages up from TP rank 0 alone and asks every
// rank whether a page is stored. A DiskPoolReader lets the other ranks read
// the owner's file: it opens it read-only (DiskStorage::open_read_only), keeps
// an index of sequence hash -> slot built by recover() from the slot headers,
// and serves read() from it.
//
// The index is a snapshot: refresh() rebuilds it (reopening the file, which
// may have appeared, been reset or resized since). It may name a slot the
// owner has since rewritten; every read verifies the slot's header, the hash
// asked for, the layout and namespace fingerprint and the payload checksum, so
// such a read, like one racing the owner's write, is a miss (and drops the
// entry), never wrong bytes.
//
// Thread-safety: every member may be called concurrently. refresh() reads the
// headers of the whole file (docs/benchmarks.md: about 0.1 s per 10,000 slots on a
// shared disk); call it when a lookup misses, at a bounded rate.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "kvbm/blocks/block_id.h"
#include "kvbm/detail/mutex.h"
#include "kvbm/storage/layout.h"

namespace kvbm {

class DiskStorage;

/// Which pool a DiskPoolReader reads: what its owner's DiskStorageOptions say.
struct DiskPoolReaderOptions {
  std::filesystem::path directory{};  ///< the owner's directory
  LayoutConfig config{};              ///< the owner's layout
  std::string file_name{};            ///< empty: "kvbm.slots", the persistent default
  std::string namespace_id{};         ///< the owner's namespace
};

/// A read-only index over another process's persistent disk pool.
class DiskPoolReader {
 public:
  /// Checks the options (UsageError as DiskStorage::create() would); opens
  /// nothing: the file may not exist yet. Call refresh().
  explicit DiskPoolReader(DiskPoolReaderOptions options);
  ~DiskPoolReader();
  DiskPoolReader(const DiskPoolReader&) = delete;
  DiskPoolReader& operator=(const DiskPoolReader&) = delete;

  /// Reopens the file and rebuilds the index from its slot headers; returns
  /// the number of blocks indexed. A file that does not exist (yet) or is not
  /// a pool of this layout and namespace leaves the index empty and says why
  /// in last_error(). Never throws for what the file holds.
  std::size_t refresh();
  /// Returns true when the last refresh() indexed `hash` (and no read of it failed since).
  [[nodiscard]] bool contains(std::uint64_t hash) const;
  /// Returns the number of blocks indexed.
  [[nodiscard]] std::size_t size() const;
  /// Bytes of one block: LayoutConfig::block_bytes().
  [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }
  /// Why the last refresh() found nothing to read ("" when the file was read).
  [[nodiscard]] std::string last_error() const;
  /// Reads the block of `hash` into `dst` (block_bytes()) and returns true when
  /// it was indexed and verified; false otherwise (`dst` is then unspecified,
  /// and a failed entry is dropped from the index). Throws UsageError when
  /// dst.size() != block_bytes().
  bool read(std::uint64_t hash, std::span<std::byte> dst);
  /// read() into segments whose sizes add up to block_bytes(), in order (a
  /// page whose halves lie apart).
  bool read(std::uint64_t hash, std::span<const std::span<std::byte>> segments);

 private:
  DiskPoolReaderOptions options_;
  std::size_t block_bytes_ = 0;
  mutable detail::Mutex mu_;
  /// Null before a refresh() that found the file.
  std::shared_ptr<const DiskStorage> storage_ KVBM_GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, BlockId> slots_ KVBM_GUARDED_BY(mu_);  // hash -> slot
  std::string last_error_ KVBM_GUARDED_BY(mu_);
};

}  // namespace kvbm
