// End to end with the real HostTransferEngine: random bytes written into G1
// blocks (the device tier emulated in host memory, layer-separated) are
// offloaded to G2 (fully contiguous) through the whole pipeline, with a
// precondition and a policy on the way, and every byte is compared.

#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "kvbm/storage/layout.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/host_engine.h"
#include "offload/offload_test_util.h"

namespace kvbm {
namespace end_to_end_test {

using test::chain;
using Bytes = std::vector<std::uint8_t>;

Bytes block_bytes(const Layout& layout, BlockId b) {
  std::vector<Region> regions;
  layout.append_regions(b, regions);
  Bytes out;
  for (const Region& r : regions) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(r.addr);
    out.insert(out.end(), p, p + r.size);
  }
  return out;
}

TEST(OffloadEndToEnd, HostEngineCopiesEveryByteG1ToG2) {
  constexpr std::size_t kG1 = 48;
  constexpr std::size_t kG2 = 40;
  LayoutConfig c;
  c.num_layers = 3;
  c.outer_dim = 2;
  c.page_size = 4;  // = the managers' block size
  c.inner_dim = 24;
  c.dtype_bytes = 2;

  // G1: one allocation per (layer, outer) region; G2: one contiguous block array.
  std::vector<std::unique_ptr<Storage>> g1_storage;
  std::vector<std::uintptr_t> bases;
  for (std::size_t r = 0; r < c.regions_per_block(); ++r) {
    g1_storage.push_back(make_host_storage(kG1 * c.region_bytes(), 64));
    bases.push_back(g1_storage.back()->base());
  }
  Layout g1_layout = Layout::layer_separated(c, kG1, bases);
  auto g2_storage = make_host_storage(kG2 * c.block_bytes());
  std::memset(reinterpret_cast<void*>(g2_storage->base()), 0, g2_storage->size());
  Layout g2_layout = Layout::fully_contiguous(c, kG2, g2_storage->base());

  const std::uint32_t seed = test::test_seed();
  std::mt19937_64 rng(seed);
  for (auto& s : g1_storage) {
    auto* p = reinterpret_cast<std::uint8_t*>(s->base());
    for (std::size_t i = 0; i < s->size(); ++i) p[i] = static_cast<std::uint8_t>(rng());
  }

  test::Tiers t(kG1, kG2);
  {
    HostEngineOptions o;
    o.threads = 2;
    o.min_bytes_per_thread = 1024;
    o.name = "g1_to_g2";
    auto engine = std::make_shared<HostTransferEngine>(g1_layout, g2_layout, o);
    PipelineConfig config;  // the spec's defaults
    auto pipeline = OffloadPipeline<G1, G2>::builder()
                        .source(t.g1)
                        .destination(t.g2)
                        .engine(engine)
                        .policy(std::make_shared<PresencePolicy<G2>>(t.g2.registry()))
                        .config(config)
                        .build();

    // Three sequences of 10 blocks; each forward pass signals its own event.
    std::vector<std::vector<ImmutableBlock<G1>>> seqs;
    std::vector<TransferHandle> handles;
    std::vector<std::shared_ptr<HostEvent>> events;
    for (std::uint32_t s = 0; s < 3; ++s) {
      seqs.push_back(test::make_registered(t.g1, chain(10, s)));
      events.push_back(std::make_shared<HostEvent>());
      handles.push_back(pipeline->enqueue(seqs.back(), events.back()));
    }
    for (auto& e : events) e->signal();
    for (auto& h : handles) {
      ASSERT_TRUE(h.wait_for(std::chrono::seconds(20)));
      EXPECT_EQ(h.status(), TransferStatus::kDone);
      EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 10u);
    }
    // Every byte of every offloaded block matches its source.
    for (std::uint32_t s = 0; s < 3; ++s) {
      const auto hashes = chain(10, s);
      auto copies = t.g2.match_blocks(hashes);
      ASSERT_EQ(copies.size(), 10u);
      for (std::size_t i = 0; i < 10; ++i) {
        EXPECT_EQ(block_bytes(g2_layout, copies[i].block_id()),
                  block_bytes(g1_layout, seqs[s][i].block_id()))
            << "sequence " << s << " block " << i;
      }
    }
    // Offloading the same blocks again copies nothing (presence policy).
    auto again = pipeline->enqueue(seqs[0]);
    ASSERT_TRUE(again.wait_for(std::chrono::seconds(20)));
    EXPECT_EQ(again.report().count(BlockOutcome::kFiltered), 10u);
    pipeline.reset();
  }
  test::expect_clean(t);
}

}  // namespace end_to_end_test
}  // namespace kvbm
