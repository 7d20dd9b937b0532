// src/python/hybrid_block_manager.cpp: HybridBlockManager<G1> in Python (groups.h).
//
// HybridBlockManagerG1 is kvbm/groups/hybrid_block_manager.h on the G1 marker:
// one pool per group, sized by `block_counts`, with the hybrid hit rules. A
// request's life is the C++ one:
//
//     m = kvbm.HybridBlockManagerG1(groups, block_counts)
//     _, hashes = kvbm.hash_tokens(tokens, m.hash_block_size)   # chained values
//     hit = m.find_prefix(hashes, len(prompt) - 1)              # hit.tokens, hit.held_blocks
//     r = m.start_request(hit)                                  # the hit's blocks move in
//     m.allocate(r, r.computed_tokens + step)  -> bool          # every group or none
//     m.commit(r, hashes, r.computed_tokens + step)
//     m.finish(r, hashes)
//     assert m.audit() == ""
//
// `hashes` are chained sequence-hash values (a list or 1-D integer array) at
// hash_block_size tokens per block, from the sequence's first block. A
// PrefixHitG1 or HybridRequestG1 holds its blocks until start_request() moves
// them, finish(), or the object is dropped; either may outlive the manager.
// No call waits on I/O, so none releases the GIL.

#include "kvbm/groups/hybrid_block_manager.h"

#include <cstddef>
#include <cstdint>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "python/bindings.h"
#include "python/groups.h"

// HybridBlockManager's copy constructor is declared (its pools are not copyable, so
// using it would not compile): tell nanobind it has none, so that it binds no copy.
template <>
struct nanobind::detail::is_copy_constructible<kvbm::HybridBlockManager<kvbm::G1>>
    : std::false_type {};

namespace kvbm::python {

namespace {

using namespace nb::literals;
using Hybrid = HybridBlockManager<G1>;
using Request = HybridRequest<G1>;
using Hit = PrefixHit<G1>;

nb::dict counts_dict(const PoolCounts& c) {
  nb::dict d;
  d["total"] = c.total;
  d["reset"] = c.reset;
  d["inactive"] = c.inactive;
  d["evictable"] = c.evictable;
  d["in_use"] = c.in_use;
  d["mutable_out"] = c.mutable_out;
  d["immutable_out"] = c.immutable_out;
  return d;
}

void bind_hit(nb::module_& m) {
  nb::class_<Hit>(m, "PrefixHitG1",
                  "What HybridBlockManagerG1.find_prefix() found: the cut and, per group, the "
                  "blocks it reads (held until start_request() or the object is dropped).")
      .def_ro("tokens", &Hit::tokens, "the cut: tokens the engine need not compute")
      .def_ro("rounds", &Hit::rounds, "fixed-point rounds of the last try")
      .def_prop_ro("ranges", [](const Hit& h) { return ranges_of(h.ranges); })
      .def_prop_ro("held_blocks",
                   [](const Hit& h) {
                     std::vector<std::size_t> out;
                     for (const auto& b : h.blocks) out.push_back(b.size());
                     return out;
                   })
      .def(
          "block_ids",
          [](const Hit& h, std::size_t g) {
            KVBM_CHECK(g < h.blocks.size(), "PrefixHitG1.block_ids: group ", g, " of ",
                       h.blocks.size());
            std::vector<BlockId> out;
            for (const auto& b : h.blocks[g]) out.push_back(b.block_id());
            return out;
          },
          "group"_a);
}

void bind_request(nb::module_& m) {
  nb::class_<Request>(m, "HybridRequestG1",
                      "The blocks one request holds in each group (kvbm/groups/hybrid_request.h).")
      .def_prop_ro("group_count", &Request::group_count, "0 once finished")
      .def_prop_ro("computed_tokens", &Request::computed_tokens)
      .def(
          "held_range", [](const Request& r, std::size_t g) { return pair_of(r.held_range(g)); },
          "group"_a, "The block indices [first, last) group `g` holds.")
      .def("held_blocks", &Request::held_blocks, "group"_a)
      .def("registered_blocks", &Request::registered_blocks, "group"_a)
      .def("block_id", &Request::block_id, "group"_a, "index"_a)
      .def(
          "block_ids",
          [](const Request& r, std::size_t g) {
            const BlockRange range = r.held_range(g);
            std::vector<std::optional<BlockId>> out;
            for (std::size_t i = range.first; i < range.last; ++i) {
              out.push_back(r.holds_block(g, i) ? std::optional(r.block_id(g, i)) : std::nullopt);
            }
            return out;
          },
          "group"_a,
          "The pool ids of the blocks group `g` holds, in block order (None for a hole: an "
          "index a step_end() step passed over).")
      .def("holds_block", &Request::holds_block, "group"_a, "index"_a);
}

Hybrid build(const std::vector<KvCacheGroupSpec>& groups, nb::handle counts,
             const SnapshotPolicy& policy, EvictionPolicy eviction, const std::string& name) {
  std::vector<std::size_t> sizes;
  if (nb::isinstance<nb::int_>(counts)) {
    sizes.assign(groups.size(), nb::cast<std::size_t>(counts));
  } else {
    sizes = nb::cast<std::vector<std::size_t>>(counts);
  }
  KVBM_CHECK(sizes.size() == groups.size(), "HybridBlockManagerG1: ", sizes.size(),
             " block counts for ", groups.size(), " groups; give one per group (or one int)");
  auto b = Hybrid::builder().snapshot_policy(policy).eviction(eviction).pool_name(name);
  for (std::size_t g = 0; g < groups.size(); ++g) b.group(groups[g], sizes[g]);
  return b.build();
}

void bind_manager_core(nb::class_<Hybrid>& cls) {
  cls.def(
         "__init__",
         [](Hybrid* self, const std::vector<KvCacheGroupSpec>& groups, nb::handle counts,
            std::optional<SnapshotPolicy> policy, EvictionPolicy eviction,
            const std::string& name) {
           new (self) Hybrid(build(groups, counts, policy.value_or(SnapshotPolicy::every_block()),
                                   eviction, name));
         },
         "groups"_a, "block_counts"_a, "snapshot_policy"_a = nb::none(),
         "eviction"_a = EvictionPolicy::kLru, "pool_name"_a = "",
         "One G1 pool per group; block_counts is one int per group, or one for all.")
      .def_prop_ro("group_count", &Hybrid::group_count)
      .def_prop_ro("groups",
                   [](const Hybrid& h) {
                     std::vector<KvCacheGroupSpec> out;
                     for (std::size_t g = 0; g < h.group_count(); ++g) out.push_back(h.group(g));
                     return out;
                   })
      .def_prop_ro("hash_block_size", &Hybrid::hash_block_size, "tokens per hashed block (gcd)")
      .def_prop_ro("alignment_tokens", &Hybrid::alignment_tokens, "every cut's multiple (lcm)")
      .def_prop_ro("snapshot_policy", &Hybrid::snapshot_policy)
      .def("audit", &Hybrid::audit, "'' when every group's pool is consistent and balanced.")
      .def(
          "pool_counts",
          [](const Hybrid& h, std::size_t g) {
            KVBM_CHECK(g < h.group_count(), "pool_counts: group ", g, " of ", h.group_count());
            return counts_dict(h.pool(g).pool_counts());
          },
          "group"_a, "Group `g`'s pool: total, reset, inactive, evictable, in_use, ...")
      .def(
          "group_hashes",
          [](const Hybrid& h, std::size_t g, nb::handle hashes, std::size_t first,
             std::optional<std::size_t> last) {
            const auto seq = hashes_of(hashes, true, "group_hashes: hashes");
            std::vector<std::uint64_t> out;
            for (const auto& k : h.group_hashes(g, seq, first, last.value_or(SIZE_MAX))) {
              out.push_back(k.value());
            }
            return out;
          },
          "group"_a, "hashes"_a, "first"_a = 0, "last"_a = nb::none(),
          "Group `g`'s keys of its blocks [first, last) of the sequence.");
}

void bind_manager_requests(nb::class_<Hybrid>& cls) {
  cls.def(
         "find_prefix",
         [](Hybrid& h, nb::handle hashes, std::optional<std::size_t> max_tokens) {
           const auto seq = hashes_of(hashes, true, "find_prefix: hashes");
           return h.find_prefix(seq, max_tokens.value_or(SIZE_MAX));
         },
         "hashes"_a, "max_tokens"_a = nb::none(),
         "The longest cut at or below max_tokens every group can serve, holding the blocks "
         "each group reads there. Pass len(prompt) - 1 to leave a token to compute.")
      .def(
          "start_request", [](Hybrid& h, Hit& hit) { return h.start_request(std::move(hit)); },
          "hit"_a, "Starts a request from a hit (its blocks move into the request).")
      .def(
          "start_request", [](Hybrid& h) { return h.start_request(); },
          "Starts a request with no prefix hit.")
      .def("allocate", &Hybrid::allocate, "request"_a, "total_tokens"_a,
           "Room for total_tokens in every group or in none; False when a pool is short.")
      .def(
          "commit",
          [](Hybrid& h, Request& r, nb::handle hashes, std::size_t computed) {
            h.commit(r, hashes_of(hashes, true, "commit: hashes"), computed);
          },
          "request"_a, "hashes"_a, "computed_tokens"_a,
          "Records computed_tokens and registers the blocks that became full.")
      .def("release_out_of_reach", &Hybrid::release_out_of_reach, "request"_a, "computed_tokens"_a,
           "Releases, per group, the blocks the request no longer reads.")
      .def(
          "finish",
          [](Hybrid& h, Request& r, nb::handle hashes) {
            if (hashes.is_none()) {
              h.finish(r);
            } else {
              h.finish(r, hashes_of(hashes, true, "finish: hashes"));
            }
          },
          "request"_a, "hashes"_a = nb::none(),
          "Ends the request (with hashes: registers the request_end() snapshot) and releases "
          "every block, the last first.");
}

}  // namespace

void bind_hybrid_block_manager(nb::module_& m) {
  bind_hit(m);
  bind_request(m);
  nb::class_<Hybrid> cls(m, "HybridBlockManagerG1",
                         "One G1 BlockManager per KV cache group with the hybrid rules "
                         "(kvbm/groups/hybrid_block_manager.h).");
  bind_manager_core(cls);
  bind_manager_requests(cls);
}

}  // namespace kvbm::python
