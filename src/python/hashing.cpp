// src/python/hashing.cpp: kvbm's sequence hashing in Python (kvbm/hashing.h).
//
// hash_tokens() is hash_blocks() over the full blocks of a token array: the
// values are those the C++ API computes (tests/python/hash_vectors_test.cpp and
// tests/python/test_hashing.py check one file of vectors from both sides).
// hash_key() is not a C++ API: it maps an engine's opaque block key (vLLM's
// OffloadKey bytes, SGLang's page hash string) to a 64-bit value that the
// integrations use as a flat sequence hash: XXH3-64 seeded with kKeySeed, so
// that a key never hashes like a token block (whose seed is a salt).

#define XXH_INLINE_ALL
#include "kvbm/hashing.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <xxhash.h>

#include "python/array.h"
#include "python/bindings.h"
#include "python/integers.h"

namespace kvbm::python {

namespace {

using namespace nb::literals;

constexpr std::uint64_t kKeySeed = 0x6b76626d2d6b6579ULL;  // "kvbm-key"

using U64 = nb::ndarray<nb::numpy, std::uint64_t, nb::ndim<1>>;

/// A multimodal key as Python gives it: (token offset, content hash or content id).
using MmKey = std::tuple<std::uint32_t, nb::object>;

std::vector<ExtraKey> block_keys_of(const std::vector<MmKey>& keys) {
  std::vector<ExtraKey> out;
  out.reserve(keys.size());
  for (const auto& [offset, content] : keys) {
    if (nb::isinstance<nb::int_>(content)) {
      out.push_back(ExtraKey::multimodal(offset, nb::cast<std::uint64_t>(content)));
    } else {
      out.push_back(ExtraKey::multimodal(offset, nb::cast<std::string>(content)));
    }
  }
  return out;
}

std::pair<U64, U64> hash_span(std::span<const Token> tokens, std::uint32_t block_size,
                              std::uint64_t salt, const std::vector<ExtraKey>& keys) {
  KVBM_CHECK(block_size > 0, "hash_tokens: block_size must be > 0");
  const std::size_t full = tokens.size() / block_size * block_size;
  std::vector<std::uint64_t> block_hashes;
  std::vector<SequenceHash> sequence;
  {
    nb::gil_scoped_release release;
    hash_blocks(tokens.first(full), block_size, SaltHash(salt), std::nullopt, block_hashes,
                sequence, keys);
  }
  std::vector<std::uint64_t> values(sequence.size());
  for (std::size_t i = 0; i < sequence.size(); ++i) values[i] = sequence[i].value();
  return {to_numpy(std::move(block_hashes)), to_numpy(std::move(values))};
}

std::uint64_t key_hash(std::string_view bytes) noexcept {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kKeySeed);
}

std::string_view bytes_of_key(const nb::handle& key) {
  if (nb::isinstance<nb::bytes>(key)) {
    nb::bytes b = nb::borrow<nb::bytes>(key);
    return {b.c_str(), b.size()};
  }
  if (nb::isinstance<nb::str>(key)) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(key.ptr(), &size);
    if (data == nullptr) throw nb::python_error();
    return {data, static_cast<std::size_t>(size)};
  }
  throw nb::type_error("hash_key: a key is bytes or str");
}

}  // namespace

void bind_hashing(nb::module_& m) {
  m.def(
      "salt",
      [](std::optional<std::string> lora, std::optional<std::string> cache_salt) {
        SaltBuilder b;
        if (lora) b.lora(*lora);
        if (cache_salt) b.cache_salt(*cache_salt);
        return b.build().value();
      },
      "lora"_a = nb::none(), "cache_salt"_a = nb::none(),
      "Returns the SaltHash value of a LoRA adapter name and a cache salt (0 when neither).");

  const char* doc =
      "Hashes the full blocks of `tokens` (a list or 1-D array of token ids, any integer dtype; "
      "each must fit 32 bits) (a tail shorter than block_size is left out) and "
      "returns (block_hashes, sequence_hashes), two uint64 arrays, the values C++'s "
      "hash_blocks() computes. `salt` is kvbm.salt(...); `mm_keys` are (token offset, content "
      "hash int or content id str) pairs of multimodal items.";
  m.def(
      "hash_tokens",
      [](nb::handle tokens, std::uint32_t block_size, std::uint64_t salt,
         const std::vector<MmKey>& mm_keys) {
        const std::vector<Token> ids = integers_of<Token>(tokens, "hash_tokens: tokens");
        return hash_span(ids, block_size, salt, block_keys_of(mm_keys));
      },
      "tokens"_a, "block_size"_a, "salt"_a = 0, "mm_keys"_a = std::vector<MmKey>{}, doc);

  m.def(
      "hash_key", [](const nb::handle& key) { return key_hash(bytes_of_key(key)); }, "key"_a,
      "Returns the 64-bit flat sequence hash of an opaque block key (bytes or str): XXH3-64 "
      "seeded apart from token hashing. The engine integrations key blocks this way.");
  m.def(
      "hash_keys",
      [](const nb::sequence& keys) {
        std::vector<std::uint64_t> out;
        out.reserve(nb::len(keys));
        for (nb::handle k : keys) out.push_back(key_hash(bytes_of_key(k)));
        return to_numpy(std::move(out));
      },
      "keys"_a, "Returns hash_key() of every key as a uint64 array.");
}

}  // namespace kvbm::python
