// examples/readme/facade.cpp: the README's facade snippet (G1, G2 and G3 behind
// KvBlockManager) as a program that CI builds and runs (ctest
// examples.readme.facade). The README shows the lines between the [readme]
// markers; scripts/readme_snippets.py checks that they are equal (--fix copies
// them over). The sizes are small so that it runs anywhere; G3's file goes to a
// temporary directory, removed at the end.
//
// A request is admitted and computed; its blocks are written through to G2 and
// G3. G1 is then emptied, and the same request is admitted again: its whole
// prefix comes back from G2.

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include <kvbm/kvbm.h>

namespace {

// Builds the facade of the README, its G3 file in `scratch_dir`.
std::unique_ptr<kvbm::KvBlockManager> build(const std::filesystem::path& scratch_dir) {
  // [readme]
  kvbm::KvBlockManagerConfig config;
  config.layout = {
      .num_layers = 4, .outer_dim = 2, .page_size = 16, .inner_dim = 8 * 128, .dtype_bytes = 2};
  config.device.blocks = 64;            // G1: GPU memory (host memory when there is no GPU)
  config.host.bytes = 64ull << 20;      // G2: pinned host memory
  config.disk.bytes = 128ull << 20;     // G3: a preallocated file
  config.disk_directory = scratch_dir;  // an existing directory, e.g. on NVMe
  auto kv = kvbm::KvBlockManager::build(config);  // throws UsageError naming a bad option
  // [/readme]
  return kv;
}

// Admits `seq`, computes the blocks admission could not bring in and registers
// them. Returns false when G1 has no room.
bool serve(kvbm::KvBlockManager* kv, const kvbm::TokenBlockSequence& seq,
           kvbm::OnboardCounts& from) {
  // [readme]
  auto admission = kvbm::admit(*kv, seq);  // cached prefix (G1 hits, G2/G3 copies) + fresh blocks
  if (!admission) return false;            // G1 is full: nothing new is held, try later
  std::vector<kvbm::CompleteBlock<kvbm::G1>> completed;
  for (std::size_t b = admission->prefix.size(); b < seq.num_blocks(); ++b) {
    auto& block = admission->fresh[b - admission->prefix.size()];
    // ... the forward pass writes `block` (its bytes: kv->device_layout()) ...
    completed.push_back(std::move(block).complete(seq.block(b)).value());
  }
  auto done = std::make_shared<kvbm::HostEvent>();  // met when the forward pass ends
  auto registered = kv->register_blocks(std::move(completed), done);  // offloads write-through
  done->signal();
  // ... when the request ends, release its blocks last first (eviction takes tails first):
  kvbm::release_tail_first(registered);
  kvbm::release_tail_first(admission->prefix);
  // [/readme]
  from = admission->counts;
  return true;
}

}  // namespace

int main() {
  char scratch[] = "/tmp/kvbm-readme-XXXXXX";
  if (::mkdtemp(scratch) == nullptr) return 1;
  const std::filesystem::path scratch_dir = scratch;

  kvbm::OnboardCounts first;
  kvbm::OnboardCounts second;
  bool ok = false;
  {
    auto kv = build(scratch_dir);

    kvbm::TokenBlockSequence seq(kv->block_size(), kvbm::SaltBuilder().cache_salt("a").build());
    std::vector<kvbm::Token> prompt(200);  // 12 full blocks and a tail of 8 tokens
    std::iota(prompt.begin(), prompt.end(), 1);
    seq.extend(prompt);

    const bool served = serve(kv.get(), seq, first);
    kv->drain();                         // the write-through copies have landed in G2 and G3
    kv->device().reset_inactive_pool();  // G1 forgets the request
    ok = served && serve(kv.get(), seq, second) && first.total() == 0 &&
         second.from(kvbm::TierId::kG2) == 12;
    std::printf(
        "first admission: %zu blocks cached; second: %zu from G1, %zu from G2, %zu from G3\n",
        first.total(), second.from(kvbm::TierId::kG1), second.from(kvbm::TierId::kG2),
        second.from(kvbm::TierId::kG3));
    kv->shutdown();
    ok = ok && kv->audit().empty();
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir, ec);
  return ok ? 0 : 1;
}
