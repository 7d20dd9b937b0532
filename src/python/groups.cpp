// src/python/groups.cpp: KV cache group specs and vLLM's shapes in Python (groups.h).
//
// KvCacheGroupSpec crosses as a value class with the C++ fields (id as an int);
// the vLLM structs of kvbm/groups/vllm_kv_cache_spec.h live in the submodule
// vllm_spec under their vLLM names, and vllm_spec.from_vllm() is the C++
// conversion. Every check is the C++ one: a bad spec raises kvbm.UsageError.

#include "python/groups.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <string>
#include <vector>

#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/groups/snapshot_policy.h"
#include "kvbm/groups/vllm_kv_cache_spec.h"

namespace kvbm::python {

namespace {

namespace nb = nanobind;
using namespace nb::literals;

std::string repr(const KvCacheGroupSpec& g) {
  return "<kvbm.KvCacheGroupSpec id=" + std::to_string(to_index(g.id)) + " " + g.kind_label() +
         " tokens_per_block=" + std::to_string(g.tokens_per_block) +
         " bytes_per_block=" + std::to_string(g.bytes_per_block) +
         " layers=" + std::to_string(g.layers.size()) + ">";
}

void bind_kind_and_policy(nb::module_& m) {
  nb::enum_<AttentionKind>(m, "AttentionKind", "How a group's layers attend to earlier tokens.")
      .value("FULL", AttentionKind::kFull)
      .value("SLIDING_WINDOW", AttentionKind::kSlidingWindow)
      .value("CHUNKED_LOCAL", AttentionKind::kChunkedLocal)
      .value("RECURRENT_STATE", AttentionKind::kRecurrentState);
  using P = SnapshotPolicy;
  nb::class_<P>(m, "SnapshotPolicy",
                "Which recurrent-state snapshots are registered (kvbm/groups/snapshot_policy.h).")
      .def_static("every_block", &P::every_block, "Every block boundary (vLLM's 'all').")
      .def_static("every_kth_block", &P::every_kth_block, "k"_a, "Every k-th boundary.")
      .def_static("request_end", &P::request_end, "The last boundary, at finish().")
      .def_static("step_end", &P::step_end,
                  "Only each step's end state, on a block boundary (vLLM's 'align').")
      .def_prop_ro("every", [](const P& p) { return p.every; })
      .def_prop_ro("name",
                   [](const P& p) -> std::string {
                     if (p.kind == P::Kind::kEveryKthBlock) return "every_kth_block";
                     if (p.kind == P::Kind::kStepEnd) return "step_end";
                     return p.kind == P::Kind::kRequestEnd ? "request_end" : "every_block";
                   })
      .def(
          "__eq__", [](const P& a, const P& b) { return a == b; }, nb::is_operator());
}

void bind_group_spec(nb::module_& m) {
  using S = KvCacheGroupSpec;
  auto id_of = [](const S& s) { return to_index(s.id); };
  nb::class_<S>(m, "KvCacheGroupSpec",
                "One KV cache group of a hybrid model (kvbm/groups/kv_cache_group_spec.h).")
      .def_static(
          "full",
          [](std::uint32_t id, std::uint32_t b, std::uint64_t bytes, std::vector<std::uint32_t> l) {
            return S::full(GroupId{id}, b, bytes, std::move(l));
          },
          "id"_a, "tokens_per_block"_a, "bytes_per_block"_a, "layers"_a)
      .def_static(
          "sliding_window",
          [](std::uint32_t id, std::uint32_t w, std::uint32_t b, std::uint64_t bytes,
             std::vector<std::uint32_t> l) {
            return S::sliding_window(GroupId{id}, w, b, bytes, std::move(l));
          },
          "id"_a, "window"_a, "tokens_per_block"_a, "bytes_per_block"_a, "layers"_a)
      .def_static(
          "chunked_local",
          [](std::uint32_t id, std::uint32_t c, std::uint32_t b, std::uint64_t bytes,
             std::vector<std::uint32_t> l) {
            return S::chunked_local(GroupId{id}, c, b, bytes, std::move(l));
          },
          "id"_a, "chunk"_a, "tokens_per_block"_a, "bytes_per_block"_a, "layers"_a)
      .def_static(
          "recurrent_state",
          [](std::uint32_t id, std::uint32_t b, std::uint64_t bytes, std::vector<std::uint32_t> l) {
            return S::recurrent_state(GroupId{id}, b, bytes, std::move(l));
          },
          "id"_a, "tokens_per_block"_a, "snapshot_bytes"_a, "layers"_a)
      .def_prop_ro("id", id_of)
      .def_ro("kind", &S::kind)
      .def_ro("window_tokens", &S::window_tokens, "W (sliding window) or C (chunk); else 0")
      .def_ro("tokens_per_block", &S::tokens_per_block)
      .def_ro("bytes_per_block", &S::bytes_per_block)
      .def_ro("layers", &S::layers)
      .def_rw("name", &S::name)
      .def("kind_label", &S::kind_label)
      .def("display_name", &S::display_name)
      .def("namespace_for", &S::namespace_for, "ns"_a)
      .def("validate", &S::validate)
      .def(
          "__eq__", [](const S& a, const S& b) { return a == b; }, nb::is_operator())
      .def("__repr__", &repr);
  m.def(
      "validate_groups", [](const std::vector<S>& g) { validate_groups(g); }, "groups"_a,
      "Raises UsageError unless the list is a valid model (ids 0..n-1, disjoint layers).");
  m.def(
      "hash_block_size", [](const std::vector<S>& g) { return hash_block_size(g); }, "groups"_a,
      "The gcd of the groups' block sizes: the block size the sequence is hashed at.");
  m.def(
      "alignment_tokens", [](const std::vector<S>& g) { return alignment_tokens(g); }, "groups"_a,
      "The lcm of the groups' block sizes: every cut is a multiple of it.");
}

void bind_vllm_attention(nb::module_& v) {
  using A = vllm::AttentionShape;
  nb::class_<A>(v, "AttentionShape", "The fields of vLLM's AttentionSpec that size a page.")
      .def(
          "__init__",
          [](A* self, std::uint32_t block_size, std::uint32_t num_kv_heads, std::uint32_t head_size,
             std::uint32_t head_size_v, std::string dtype, std::uint32_t dtype_bytes,
             std::optional<std::uint64_t> padded) {
            new (self) A{block_size,       num_kv_heads, head_size, head_size_v,
                         std::move(dtype), dtype_bytes,  padded};
          },
          "block_size"_a, "num_kv_heads"_a, "head_size"_a, "head_size_v"_a = 0, "dtype"_a = "",
          "dtype_bytes"_a, "page_size_padded"_a = nb::none())
      .def_rw("block_size", &A::block_size)
      .def_rw("page_size_padded", &A::page_size_padded);
  nb::class_<vllm::FullAttentionSpec>(v, "FullAttentionSpec")
      .def(
          "__init__",
          [](vllm::FullAttentionSpec* self, A shape, bool mla, std::optional<std::uint32_t> window,
             std::optional<std::uint32_t> chunk) {
            new (self) vllm::FullAttentionSpec{std::move(shape), mla, window, chunk};
          },
          "shape"_a, "mla"_a = false, "sliding_window"_a = nb::none(),
          "attention_chunk_size"_a = nb::none());
  nb::class_<vllm::SlidingWindowSpec>(v, "SlidingWindowSpec")
      .def(
          "__init__",
          [](vllm::SlidingWindowSpec* self, A shape, std::uint32_t window) {
            new (self) vllm::SlidingWindowSpec{std::move(shape), window};
          },
          "shape"_a, "sliding_window"_a);
  nb::class_<vllm::ChunkedLocalAttentionSpec>(v, "ChunkedLocalAttentionSpec")
      .def(
          "__init__",
          [](vllm::ChunkedLocalAttentionSpec* self, A shape, std::uint32_t chunk) {
            new (self) vllm::ChunkedLocalAttentionSpec{std::move(shape), chunk};
          },
          "shape"_a, "attention_chunk_size"_a);
}

void bind_vllm_mamba(nb::module_& v) {
  nb::class_<vllm::MambaState>(v, "MambaState", "One state tensor: its shape and element size.")
      .def(
          "__init__",
          [](vllm::MambaState* self, std::vector<std::uint64_t> shape, std::uint32_t bytes) {
            new (self) vllm::MambaState{std::move(shape), bytes};
          },
          "shape"_a, "dtype_bytes"_a);
  nb::class_<vllm::MambaSpec>(v, "MambaSpec")
      .def(
          "__init__",
          [](vllm::MambaSpec* self, std::uint32_t block_size, std::vector<vllm::MambaState> states,
             std::optional<std::uint64_t> padded, std::string type, std::string mode,
             std::uint32_t spec_blocks) {
            new (self) vllm::MambaSpec{block_size,      std::move(states), padded,
                                       std::move(type), std::move(mode),   spec_blocks};
          },
          "block_size"_a, "states"_a, "page_size_padded"_a = nb::none(), "mamba_type"_a = "mamba2",
          "mamba_cache_mode"_a = "all", "num_speculative_blocks"_a = 0);
}

void bind_vllm_config(nb::module_& v) {
  nb::class_<vllm::KVCacheGroupSpec>(v, "KVCacheGroupSpec", "Layer names and one spec.")
      .def(
          "__init__",
          [](vllm::KVCacheGroupSpec* self, std::vector<std::string> names, vllm::KVCacheSpec spec) {
            new (self) vllm::KVCacheGroupSpec{std::move(names), std::move(spec)};
          },
          "layer_names"_a, "spec"_a)
      .def_ro("layer_names", &vllm::KVCacheGroupSpec::layer_names);
  nb::class_<vllm::KVCacheConfig>(v, "KVCacheConfig", "num_blocks and kv_cache_groups.")
      .def(
          "__init__",
          [](vllm::KVCacheConfig* self, std::uint64_t n, std::vector<vllm::KVCacheGroupSpec> g) {
            new (self) vllm::KVCacheConfig{n, std::move(g)};
          },
          "num_blocks"_a, "kv_cache_groups"_a)
      .def_ro("num_blocks", &vllm::KVCacheConfig::num_blocks);
  v.def(
      "from_vllm", [](const vllm::KVCacheConfig& c) { return vllm::from_vllm(c); }, "config"_a,
      "Returns the config's groups as validated KvCacheGroupSpecs (GroupId i for group i).");
  v.def(
      "attention_page_size_bytes",
      [](const vllm::AttentionShape& s, bool mla) { return vllm::page_size_bytes(s, mla); },
      "shape"_a, "mla"_a = false, "vLLM's page_size_bytes of an attention layer.");
  v.def(
      "mamba_page_size_bytes", [](const vllm::MambaSpec& s) { return vllm::page_size_bytes(s); },
      "spec"_a, "vLLM's page_size_bytes of a Mamba layer.");
  v.def("layer_index", &vllm::layer_index, "layer_name"_a,
        "The layer index in a vLLM layer name (its first all-digit component).");
}

}  // namespace

void bind_groups(nb::module_& m) {
  bind_kind_and_policy(m);
  bind_group_spec(m);
  nb::module_ v = m.def_submodule("vllm_spec", "vLLM's KVCacheConfig shapes as plain values.");
  bind_vllm_attention(v);
  bind_vllm_mamba(v);
  bind_vllm_config(v);
  bind_hybrid_block_manager(m);
}

}  // namespace kvbm::python
