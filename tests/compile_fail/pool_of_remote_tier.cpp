// Must not compile: G4 has no pool in a KvBlockManager, so KvBlockManager::pool<G4>() is
// rejected by the PooledTier concept (kvbm/tier.h) instead of failing at link time or
// returning null. Registered in tests/CMakeLists.txt with kvbm_add_compile_fail_test(); the
// control build (-DKVBM_COMPILE_FAIL_CONTROL) must compile.

#include <kvbm/kv_block_manager.h>

[[maybe_unused]] void pools(kvbm::KvBlockManager& kv) {
  [[maybe_unused]] kvbm::BlockManager<kvbm::G3>* ok = kv.pool<kvbm::G3>();
#ifndef KVBM_COMPILE_FAIL_CONTROL
  [[maybe_unused]] auto* bad = kv.pool<kvbm::G4>();
#endif
}

int main() { return 0; }
