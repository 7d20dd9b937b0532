// Compiled instead of remote_store.cpp when kvbm is built without hiredis:
// the remote tier's API links, and create() says how to get it.

#include "kvbm/error.h"
#include "kvbm/remote/remote_store.h"

namespace kvbm {

struct RemoteStore::Impl {};

RemoteStore::RemoteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteStore::~RemoteStore() = default;

std::unique_ptr<RemoteStore> RemoteStore::create(RemoteStoreOptions) {
  KVBM_CHECK(false,
             "kvbm was built without the remote tier (hiredis not found): install libhiredis-dev "
             "(bash scripts/deps.sh) and reconfigure; kvbm/config.h says KVBM_HAVE_REDIS 0");
  return nullptr;
}
std::vector<bool> RemoteStore::exists(std::span<const std::uint64_t>) { return {}; }
std::vector<RemoteStatus> RemoteStore::put(std::span<const RemotePut>) { return {}; }
std::vector<RemoteStatus> RemoteStore::get(std::span<const RemoteGet>) { return {}; }
std::size_t RemoteStore::block_bytes() const noexcept { return 0; }
std::uint64_t RemoteStore::fingerprint() const noexcept { return 0; }
std::string RemoteStore::key_of(std::uint64_t) const { return {}; }
std::size_t RemoteStore::server_of(std::uint64_t) const noexcept { return 0; }
std::size_t RemoteStore::server_count() const noexcept { return 0; }
bool RemoteStore::cluster() const noexcept { return false; }
bool RemoteStore::server_available(std::size_t) const { return false; }
RemoteStoreStats RemoteStore::stats() const { return {}; }

}  // namespace kvbm
