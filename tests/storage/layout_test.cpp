// Layout address arithmetic against hand-computed tables, validation errors,
// and plan_copies() merging.
//
// The small config used throughout: 2 layers x 2 outer (K, V) x 4 tokens x 8
// inner x 2 bytes. One region = 4 x 8 x 2 = 64 B (0x40); one block = 4
// regions = 256 B (0x100).

#include "kvbm/storage/layout.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvbm/error.h"

namespace kvbm {
namespace layout_test {

using ::testing::HasSubstr;

LayoutConfig small_config() {
  LayoutConfig c;
  c.num_layers = 2;
  c.outer_dim = 2;
  c.page_size = 4;
  c.inner_dim = 8;
  c.dtype_bytes = 2;
  return c;
}

const std::vector<std::uintptr_t> kSrcBases = {0x10000, 0x20000, 0x30000, 0x40000};
const std::vector<std::uintptr_t> kDstBases = {0x50000, 0x60000, 0x70000, 0x80000};

/// One row of an address table: (block, layer, outer) -> address.
struct Row {
  BlockId block;
  std::uint32_t layer;
  std::uint32_t outer;
  std::uintptr_t addr;
};

void expect_table(const Layout& layout, const std::vector<Row>& rows, std::size_t size) {
  for (const Row& r : rows) {
    const Region got = layout.region(r.block, r.layer, r.outer);
    EXPECT_EQ(got.addr, r.addr) << "block " << r.block << " layer " << r.layer << " outer "
                                << r.outer << ": got 0x" << std::hex << got.addr << ", want 0x"
                                << r.addr;
    EXPECT_EQ(got.size, size);
  }
}

/// Returns the message of the UsageError `f` throws, or fails.
template <class F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return {};
}

TEST(LayoutConfig, SizesOfTheSmallConfig) {
  const LayoutConfig c = small_config();
  EXPECT_EQ(c.region_bytes(), 64U);
  EXPECT_EQ(c.regions_per_block(), 4U);
  EXPECT_EQ(c.block_bytes(), 256U);
  EXPECT_NO_THROW(c.validate());
}

TEST(LayoutConfig, ValidateNamesTheField) {
  auto with = [](auto mutate) {
    LayoutConfig c = small_config();
    mutate(c);
    return usage_error_of([&] { c.validate(); });
  };
  EXPECT_THAT(with([](LayoutConfig& c) { c.num_layers = 0; }), HasSubstr("num_layers"));
  EXPECT_THAT(with([](LayoutConfig& c) { c.outer_dim = 0; }), HasSubstr("outer_dim"));
  EXPECT_THAT(with([](LayoutConfig& c) { c.outer_dim = 3; }), HasSubstr("outer_dim"));
  EXPECT_THAT(with([](LayoutConfig& c) { c.page_size = 0; }), HasSubstr("page_size"));
  EXPECT_THAT(with([](LayoutConfig& c) { c.inner_dim = 0; }), HasSubstr("inner_dim"));
  for (std::uint32_t bad : {0U, 3U, 5U, 16U}) {
    EXPECT_THAT(with([&](LayoutConfig& c) { c.dtype_bytes = bad; }), HasSubstr("dtype_bytes"));
  }
  for (std::uint32_t good : {1U, 2U, 4U, 8U}) {
    LayoutConfig c = small_config();
    c.dtype_bytes = good;
    EXPECT_NO_THROW(c.validate());
  }
  const std::string overflow = with([](LayoutConfig& c) {
    c.page_size = 1U << 31;
    c.inner_dim = 1U << 31;
    c.dtype_bytes = 8;
  });
  EXPECT_THAT(overflow, HasSubstr("overflows"));
  const std::string block_overflow = with([](LayoutConfig& c) {
    c.num_layers = 0xFFFFFFFFU;
    c.page_size = 1U << 30;
    c.inner_dim = 1U << 20;
  });
  EXPECT_THAT(block_overflow, HasSubstr("overflows"));
}

// The sizes of a config never wrap: an overflowing product throws instead
// of returning a small, wrong figure (validate() or not).
TEST(LayoutConfig, SizesThatOverflowThrowInsteadOfWrapping) {
  LayoutConfig region = small_config();
  region.page_size = 0xFFFFFFFFU;
  region.inner_dim = 0xFFFFFFFFU;
  region.dtype_bytes = 2;  // (2^32 - 1)^2 x 2 > 2^64
  EXPECT_THAT(usage_error_of([&] { (void)region.region_bytes(); }), HasSubstr("overflows"));
  EXPECT_THAT(usage_error_of([&] { (void)region.block_bytes(); }), HasSubstr("overflows"));

  LayoutConfig block = small_config();
  block.num_layers = 1U << 22;
  block.page_size = 1U << 20;
  block.inner_dim = 1U << 20;  // a region fits (2^41 bytes), the block does not (2^23 x 2^41)
  block.dtype_bytes = 2;
  EXPECT_NO_THROW((void)block.region_bytes());
  EXPECT_THAT(usage_error_of([&] { (void)block.block_bytes(); }), HasSubstr("overflows"));
  EXPECT_THAT(usage_error_of([&] { block.validate(); }), HasSubstr("overflows"));

  // The largest block that fits is accepted to the byte: 64 x (2^58 - 1) = 2^64 - 64.
  LayoutConfig edge;
  edge.num_layers = 1;
  edge.outer_dim = 2;
  edge.page_size = (1U << 31) - 4;
  edge.inner_dim = (1U << 29) + 1;
  edge.dtype_bytes = 8;
  EXPECT_NO_THROW(edge.validate());
  EXPECT_EQ(edge.block_bytes(), ~std::size_t{0} - 63);
}

TEST(LayoutKind, ToString) {
  EXPECT_EQ(to_string(LayoutKind::kFullyContiguous), "fully_contiguous");
  EXPECT_EQ(to_string(LayoutKind::kLayerSeparated), "layer_separated");
}

TEST(Layout, FullyContiguousAddressTable) {
  const auto l = Layout::fully_contiguous(small_config(), 3, 0x1000);
  EXPECT_EQ(l.kind(), LayoutKind::kFullyContiguous);
  EXPECT_EQ(l.num_blocks(), 3U);
  EXPECT_EQ(l.stride(), 0x100U);
  ASSERT_EQ(l.bases().size(), 1U);
  EXPECT_EQ(l.bases()[0], 0x1000U);
  // clang-format off
  expect_table(l, {
      {0, 0, 0, 0x1000}, {0, 0, 1, 0x1040}, {0, 1, 0, 0x1080}, {0, 1, 1, 0x10C0},
      {1, 0, 0, 0x1100}, {1, 0, 1, 0x1140}, {1, 1, 0, 0x1180}, {1, 1, 1, 0x11C0},
      {2, 0, 0, 0x1200}, {2, 0, 1, 0x1240}, {2, 1, 0, 0x1280}, {2, 1, 1, 0x12C0},
  }, 64);
  // clang-format on
  EXPECT_EQ(l.block_region(0), (Region{0x1000, 256}));
  EXPECT_EQ(l.block_region(1), (Region{0x1100, 256}));
  EXPECT_EQ(l.block_region(2), (Region{0x1200, 256}));
  EXPECT_EQ(l.bytes_per_base(), 768U);
}

TEST(Layout, FullyContiguousWithStrideAddressTable) {
  // Blocks 0x180 (384) apart: 128 bytes of padding after each block.
  const auto l = Layout::fully_contiguous(small_config(), 3, 0x1000, 0x180);
  EXPECT_EQ(l.stride(), 0x180U);
  // clang-format off
  expect_table(l, {
      {0, 0, 0, 0x1000}, {0, 0, 1, 0x1040}, {0, 1, 0, 0x1080}, {0, 1, 1, 0x10C0},
      {1, 0, 0, 0x1180}, {1, 0, 1, 0x11C0}, {1, 1, 0, 0x1200}, {1, 1, 1, 0x1240},
      {2, 0, 0, 0x1300}, {2, 0, 1, 0x1340}, {2, 1, 0, 0x1380}, {2, 1, 1, 0x13C0},
  }, 64);
  // clang-format on
  EXPECT_EQ(l.block_region(2), (Region{0x1300, 256}));
  EXPECT_EQ(l.bytes_per_base(), 2U * 384 + 256);  // 1024
}

TEST(Layout, LayerSeparatedAddressTable) {
  // Bases in (layer, outer) order: L0 K, L0 V, L1 K, L1 V.
  const auto l = Layout::layer_separated(small_config(), 3, kSrcBases);
  EXPECT_EQ(l.kind(), LayoutKind::kLayerSeparated);
  EXPECT_EQ(l.stride(), 0x40U);
  ASSERT_EQ(l.bases().size(), 4U);
  // clang-format off
  expect_table(l, {
      {0, 0, 0, 0x10000}, {0, 0, 1, 0x20000}, {0, 1, 0, 0x30000}, {0, 1, 1, 0x40000},
      {1, 0, 0, 0x10040}, {1, 0, 1, 0x20040}, {1, 1, 0, 0x30040}, {1, 1, 1, 0x40040},
      {2, 0, 0, 0x10080}, {2, 0, 1, 0x20080}, {2, 1, 0, 0x30080}, {2, 1, 1, 0x40080},
  }, 64);
  // clang-format on
  EXPECT_EQ(l.bytes_per_base(), 192U);
}

TEST(Layout, LayerSeparatedWithStrideAddressTable) {
  const auto l = Layout::layer_separated(small_config(), 3, kSrcBases, 0x60);
  // clang-format off
  expect_table(l, {
      {0, 0, 0, 0x10000}, {0, 0, 1, 0x20000}, {0, 1, 0, 0x30000}, {0, 1, 1, 0x40000},
      {1, 0, 0, 0x10060}, {1, 0, 1, 0x20060}, {1, 1, 0, 0x30060}, {1, 1, 1, 0x40060},
      {2, 0, 0, 0x100C0}, {2, 0, 1, 0x200C0}, {2, 1, 0, 0x300C0}, {2, 1, 1, 0x400C0},
  }, 64);
  // clang-format on
  EXPECT_EQ(l.bytes_per_base(), 2U * 0x60 + 64);  // 256
}

TEST(Layout, MlaConfigAddressTable) {
  // 3 layers x 1 outer x 2 tokens x 4 inner x 1 byte: region 8 B, block 24 B.
  LayoutConfig c;
  c.num_layers = 3;
  c.outer_dim = 1;
  c.page_size = 2;
  c.inner_dim = 4;
  c.dtype_bytes = 1;
  const auto fc = Layout::fully_contiguous(c, 2, 0);
  expect_table(
      fc, {{0, 0, 0, 0}, {0, 1, 0, 8}, {0, 2, 0, 16}, {1, 0, 0, 24}, {1, 1, 0, 32}, {1, 2, 0, 40}},
      8);
  const auto ls = Layout::layer_separated(c, 2, {0x100, 0x200, 0x300});
  expect_table(ls,
               {{0, 0, 0, 0x100},
                {0, 1, 0, 0x200},
                {0, 2, 0, 0x300},
                {1, 0, 0, 0x108},
                {1, 1, 0, 0x208},
                {1, 2, 0, 0x308}},
               8);
}

TEST(Layout, AppendRegionsInLayerOuterOrder) {
  std::vector<Region> out = {{0xDEAD, 1}};
  Layout::fully_contiguous(small_config(), 3, 0x1000).append_regions(1, out);
  EXPECT_EQ(out, (std::vector<Region>{
                     {0xDEAD, 1}, {0x1100, 64}, {0x1140, 64}, {0x1180, 64}, {0x11C0, 64}}));
  out.clear();
  Layout::layer_separated(small_config(), 3, kSrcBases).append_regions(2, out);
  EXPECT_EQ(out, (std::vector<Region>{{0x10080, 64}, {0x20080, 64}, {0x30080, 64}, {0x40080, 64}}));
}

TEST(Layout, IndexOutOfRangeThrows) {
  const auto fc = Layout::fully_contiguous(small_config(), 3, 0x1000);
  const auto ls = Layout::layer_separated(small_config(), 3, kSrcBases);
  for (const Layout* l : {&fc, &ls}) {
    EXPECT_THAT(usage_error_of([&] { (void)l->region(3, 0, 0); }), HasSubstr("block 3"));
    EXPECT_THAT(usage_error_of([&] { (void)l->region(0, 2, 0); }), HasSubstr("layer 2"));
    EXPECT_THAT(usage_error_of([&] { (void)l->region(0, 0, 2); }), HasSubstr("outer 2"));
    std::vector<Region> out;
    EXPECT_THROW(l->append_regions(3, out), UsageError);
    EXPECT_TRUE(out.empty());
  }
  EXPECT_THROW((void)fc.block_region(3), UsageError);
  EXPECT_THAT(usage_error_of([&] { (void)ls.block_region(0); }), HasSubstr("layer-separated"));
}

TEST(Layout, FactoryErrors) {
  const LayoutConfig c = small_config();
  LayoutConfig bad = c;
  bad.num_layers = 0;
  EXPECT_THAT(usage_error_of([&] { (void)Layout::fully_contiguous(bad, 3, 0x1000); }),
              HasSubstr("num_layers"));
  EXPECT_THAT(usage_error_of([&] { (void)Layout::layer_separated(bad, 3, {}); }),
              HasSubstr("num_layers"));
  EXPECT_THAT(usage_error_of([&] { (void)Layout::fully_contiguous(c, 0, 0x1000); }),
              HasSubstr("num_blocks"));
  EXPECT_THAT(usage_error_of([&] { (void)Layout::layer_separated(c, 0, kSrcBases); }),
              HasSubstr("num_blocks"));
  // Stride below the minimum.
  EXPECT_THAT(usage_error_of([&] { (void)Layout::fully_contiguous(c, 3, 0x1000, 255); }),
              HasSubstr("block_stride"));
  EXPECT_THAT(usage_error_of([&] { (void)Layout::layer_separated(c, 3, kSrcBases, 63); }),
              HasSubstr("region_stride"));
  EXPECT_NO_THROW((void)Layout::fully_contiguous(c, 3, 0x1000, 256));
  EXPECT_NO_THROW((void)Layout::layer_separated(c, 3, kSrcBases, 64));
  // Wrong number of bases: num_layers x outer_dim = 4.
  EXPECT_THAT(usage_error_of([&] {
                (void)Layout::layer_separated(c, 3, {0x1000, 0x2000, 0x3000});
              }),
              HasSubstr("expected 4 base addresses"));
  EXPECT_THROW((void)Layout::layer_separated(c, 3, {1, 2, 3, 4, 5}), UsageError);
  // Addresses that overflow.
  constexpr auto kMax = std::numeric_limits<std::uintptr_t>::max();
  EXPECT_THAT(usage_error_of([&] { (void)Layout::fully_contiguous(c, 3, kMax - 767); }),
              HasSubstr("overflows"));
  // One past the last byte must be an address too.
  EXPECT_NO_THROW((void)Layout::fully_contiguous(c, 3, kMax - 768));
  EXPECT_THAT(usage_error_of([&] {
                (void)Layout::layer_separated(c, 3, {0, 0, kMax - 100, 0});
              }),
              HasSubstr("overflows"));
  EXPECT_THROW((void)Layout::fully_contiguous(c, std::size_t{1} << 60, 0, 1U << 10), UsageError);
}

// ---- plan_copies -------------------------------------------------------------------------

std::vector<CopyOp> plan(const Layout& src, const Layout& dst,
                         const std::vector<std::pair<BlockId, BlockId>>& pairs) {
  std::vector<BlockId> s;
  std::vector<BlockId> d;
  for (auto [a, b] : pairs) {
    s.push_back(a);
    d.push_back(b);
  }
  std::vector<CopyOp> out;
  plan_copies(src, s, dst, d, out);
  return out;
}

TEST(PlanCopies, ContiguousToContiguousOneOpPerBlockMerged) {
  const auto src = Layout::fully_contiguous(small_config(), 3, 0x1000);
  const auto dst = Layout::fully_contiguous(small_config(), 4, 0x8000);
  // Consecutive on both sides: one op.
  EXPECT_EQ(plan(src, dst, {{0, 1}, {1, 2}}), (std::vector<CopyOp>{{0x1000, 0x8100, 512}}));
  EXPECT_EQ(plan(src, dst, {{0, 1}, {1, 2}, {2, 3}}), (std::vector<CopyOp>{{0x1000, 0x8100, 768}}));
  // A gap in the source.
  EXPECT_EQ(plan(src, dst, {{0, 1}, {2, 2}}),
            (std::vector<CopyOp>{{0x1000, 0x8100, 256}, {0x1200, 0x8200, 256}}));
  // Adjacent in the source only.
  EXPECT_EQ(plan(src, dst, {{0, 2}, {1, 1}}),
            (std::vector<CopyOp>{{0x1000, 0x8200, 256}, {0x1100, 0x8100, 256}}));
  // Adjacent, but in descending order: not merged.
  EXPECT_EQ(plan(src, dst, {{1, 2}, {0, 1}}),
            (std::vector<CopyOp>{{0x1100, 0x8200, 256}, {0x1000, 0x8100, 256}}));
}

TEST(PlanCopies, ContiguousWithPaddingDoesNotMerge) {
  const auto src = Layout::fully_contiguous(small_config(), 3, 0x1000, 0x180);
  const auto dst = Layout::fully_contiguous(small_config(), 3, 0x8000);
  EXPECT_EQ(plan(src, dst, {{0, 0}, {1, 1}}),
            (std::vector<CopyOp>{{0x1000, 0x8000, 256}, {0x1180, 0x8100, 256}}));
}

TEST(PlanCopies, SeparatedToSeparatedMergesPerRegion) {
  const auto src = Layout::layer_separated(small_config(), 3, kSrcBases);
  const auto dst = Layout::layer_separated(small_config(), 4, kDstBases);
  EXPECT_EQ(plan(src, dst, {{0, 1}, {1, 2}}), (std::vector<CopyOp>{
                                                  {0x10000, 0x50040, 128},
                                                  {0x20000, 0x60040, 128},
                                                  {0x30000, 0x70040, 128},
                                                  {0x40000, 0x80040, 128},
                                              }));
  EXPECT_EQ(plan(src, dst, {{2, 0}}), (std::vector<CopyOp>{
                                          {0x10080, 0x50000, 64},
                                          {0x20080, 0x60000, 64},
                                          {0x30080, 0x70000, 64},
                                          {0x40080, 0x80000, 64},
                                      }));
  // Not consecutive in the destination: one op per region and block.
  EXPECT_EQ(plan(src, dst, {{0, 0}, {1, 2}}).size(), 8U);
}

TEST(PlanCopies, ContiguousToSeparatedOneOpPerRegion) {
  const auto src = Layout::fully_contiguous(small_config(), 3, 0x1000);
  const auto dst = Layout::layer_separated(small_config(), 4, kDstBases);
  EXPECT_EQ(plan(src, dst, {{2, 1}}), (std::vector<CopyOp>{
                                          {0x1200, 0x50040, 64},
                                          {0x1240, 0x60040, 64},
                                          {0x1280, 0x70040, 64},
                                          {0x12C0, 0x80040, 64},
                                      }));
}

TEST(PlanCopies, SeparatedToContiguousOneOpPerRegion) {
  const auto src = Layout::layer_separated(small_config(), 3, kSrcBases);
  const auto dst = Layout::fully_contiguous(small_config(), 3, 0x8000);
  // Region by region: the same region of the two blocks is adjacent in the
  // source but 256 B apart in the destination, so nothing merges.
  EXPECT_EQ(plan(src, dst, {{0, 0}, {1, 1}}), (std::vector<CopyOp>{
                                                  {0x10000, 0x8000, 64},
                                                  {0x10040, 0x8100, 64},
                                                  {0x20000, 0x8040, 64},
                                                  {0x20040, 0x8140, 64},
                                                  {0x30000, 0x8080, 64},
                                                  {0x30040, 0x8180, 64},
                                                  {0x40000, 0x80C0, 64},
                                                  {0x40040, 0x81C0, 64},
                                              }));
}

TEST(PlanCopies, AppendsWithoutMergingIntoEarlierOps) {
  const auto src = Layout::fully_contiguous(small_config(), 3, 0x1000);
  const auto dst = Layout::fully_contiguous(small_config(), 3, 0x8000);
  // The op already in `out` ends exactly where the new one starts.
  std::vector<CopyOp> out = {{0x0F00, 0x7F00, 0x100}};
  const std::vector<BlockId> s = {0};
  const std::vector<BlockId> d = {0};
  plan_copies(src, s, dst, d, out);
  EXPECT_EQ(out, (std::vector<CopyOp>{{0x0F00, 0x7F00, 0x100}, {0x1000, 0x8000, 256}}));
}

TEST(PlanCopies, ErrorsLeaveOutUnchanged) {
  const auto src = Layout::fully_contiguous(small_config(), 3, 0x1000);
  const auto dst = Layout::layer_separated(small_config(), 2, kDstBases);
  LayoutConfig other = small_config();
  other.page_size = 8;
  const auto mismatched = Layout::fully_contiguous(other, 3, 0x9000);
  const std::vector<CopyOp> before = {{1, 2, 3}};
  std::vector<CopyOp> out = before;
  const std::vector<BlockId> one = {0};
  const std::vector<BlockId> two = {0, 1};
  const std::vector<BlockId> src_oob = {0, 3};
  const std::vector<BlockId> dst_oob = {0, 2};

  EXPECT_THAT(usage_error_of([&] { plan_copies(src, one, mismatched, one, out); }),
              HasSubstr("LayoutConfig differs"));
  EXPECT_THAT(usage_error_of([&] { plan_copies(src, two, dst, one, out); }),
              HasSubstr("2 source blocks but 1 destination"));
  EXPECT_THAT(usage_error_of([&] { plan_copies(src, src_oob, dst, two, out); }),
              HasSubstr("source block 3 (index 1) out of range"));
  EXPECT_THAT(usage_error_of([&] { plan_copies(src, two, dst, dst_oob, out); }),
              HasSubstr("destination block 2 (index 1) out of range"));
  EXPECT_EQ(out, before);
  // An empty batch plans nothing.
  plan_copies(src, {}, dst, {}, out);
  EXPECT_EQ(out, before);
}

}  // namespace layout_test
}  // namespace kvbm
