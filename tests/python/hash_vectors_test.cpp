// tests/python/hash_vectors_test.cpp: the C++ side of "Python hashes equal C++ hashes".
//
// tests/python/data/hash_vectors.txt holds random token sequences (block
// sizes, LoRA names, cache salts and multimodal keys included) with the block
// and sequence hashes the C++ API computes for them. This test recomputes
// every case with kvbm::hash_blocks, SaltBuilder and TokenBlockSequence and
// compares; tests/python/test_hashing.py computes the same cases through the
// Python bindings. Together: Python == the file == C++.
//
//   KVBM_WRITE_HASH_VECTORS=path ./python_tests              writes fresh random cases to path
//                                                             (seeded, seed printed) and checks
//                                                             them
//
// File format, one case per four lines ('#' lines are comments):
//   case <block_size> <lora or -> <cache_salt or -> <k> [<token offset> <content hash>]*k
//   tokens <n> <token>*n
//   block <m> <block hash>*m
//   sequence <m> <sequence hash value>*m

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include <kvbm/hashing.h>
#include <kvbm/token_block_sequence.h>

namespace kvbm {
namespace hash_vectors_test {

struct Case {
  std::uint32_t block_size = 0;
  std::string lora = "-";
  std::string cache_salt = "-";
  std::vector<std::pair<std::uint32_t, std::uint64_t>> mm;
  std::vector<Token> tokens;
  std::vector<std::uint64_t> block_hashes;
  std::vector<std::uint64_t> sequence_hashes;
};

SaltHash salt_of(const Case& c) {
  SaltBuilder b;
  if (c.lora != "-") b.lora(c.lora);
  if (c.cache_salt != "-") b.cache_salt(c.cache_salt);
  return b.build();
}

// The hashes of the case's full blocks, by hash_blocks().
void compute(const Case& c, std::vector<std::uint64_t>& blocks,
             std::vector<std::uint64_t>& sequence) {
  std::vector<ExtraKey> keys;
  for (const auto& [offset, content] : c.mm) keys.push_back(ExtraKey::multimodal(offset, content));
  const std::size_t full = c.tokens.size() / c.block_size * c.block_size;
  std::vector<SequenceHash> seq;
  blocks.clear();
  hash_blocks(std::span<const Token>(c.tokens).first(full), c.block_size, salt_of(c), std::nullopt,
              blocks, seq, keys);
  sequence.clear();
  for (const auto& h : seq) sequence.push_back(h.value());
}

std::vector<Case> read_cases(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<Case> cases;
  std::string line;
  auto read_list = [&](const char* tag, auto& out) {
    std::getline(in, line);
    std::istringstream s(line);
    std::string t;
    std::size_t n = 0;
    s >> t >> n;
    EXPECT_EQ(t, tag) << "in " << path << ": " << line;
    out.resize(n);
    for (auto& v : out) s >> v;
  };
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string tag;
    Case c;
    std::size_t k = 0;
    s >> tag >> c.block_size >> c.lora >> c.cache_salt >> k;
    EXPECT_EQ(tag, "case") << line;
    c.mm.resize(k);
    for (auto& [offset, content] : c.mm) s >> offset >> content;
    read_list("tokens", c.tokens);
    read_list("block", c.block_hashes);
    read_list("sequence", c.sequence_hashes);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string random_name(std::mt19937_64& rng) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789_";
  std::string s(1 + rng() % 12, 'a');
  for (auto& ch : s) ch = kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

void write_cases(const std::string& path, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  out << "# kvbm hash vectors: written by tests/python/hash_vectors_test.cpp (seed " << seed
      << ")\n"
      << "# checked by that test against C++ and by tests/python/test_hashing.py against Python\n";
  const std::uint32_t sizes[] = {1, 4, 16, 32, 64};
  for (int i = 0; i < 48; ++i) {
    Case c;
    c.block_size = sizes[rng() % 5];
    if (rng() % 3 == 0) c.lora = random_name(rng);
    if (rng() % 3 == 0) c.cache_salt = random_name(rng);
    const std::size_t n = rng() % (c.block_size * 9 + 1);
    for (std::size_t t = 0; t < n; ++t)
      c.tokens.push_back(static_cast<Token>(rng() % (i % 2 ? 4096 : 200'000)));
    const std::size_t full = n / c.block_size * c.block_size;
    if (full > 0 && rng() % 3 == 0) {
      std::vector<std::uint32_t> offsets(1 + rng() % 3);
      for (auto& o : offsets) o = static_cast<std::uint32_t>(rng() % full);
      std::sort(offsets.begin(), offsets.end());
      for (auto o : offsets) c.mm.emplace_back(o, rng());
    }
    compute(c, c.block_hashes, c.sequence_hashes);
    out << "case " << c.block_size << ' ' << c.lora << ' ' << c.cache_salt << ' ' << c.mm.size();
    for (const auto& [offset, content] : c.mm) out << ' ' << offset << ' ' << content;
    out << "\ntokens " << c.tokens.size();
    for (Token t : c.tokens) out << ' ' << t;
    out << "\nblock " << c.block_hashes.size();
    for (auto h : c.block_hashes) out << ' ' << h;
    out << "\nsequence " << c.sequence_hashes.size();
    for (auto h : c.sequence_hashes) out << ' ' << h;
    out << '\n';
  }
}

TEST(HashVectors, FileMatchesTheCppApi) {
  std::string path = KVBM_SOURCE_DIR "/tests/python/data/hash_vectors.txt";
  if (const char* w = std::getenv("KVBM_WRITE_HASH_VECTORS")) {
    path = w;
    write_cases(path, test::test_seed64());
  }
  const auto cases = read_cases(path);
  ASSERT_GE(cases.size(), 40u);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::vector<std::uint64_t> blocks, sequence;
    compute(c, blocks, sequence);
    EXPECT_EQ(blocks, c.block_hashes) << "case " << i;
    EXPECT_EQ(sequence, c.sequence_hashes) << "case " << i;
    if (!c.mm.empty()) continue;
    // The same hashes through TokenBlockSequence, as a scheduler computes them.
    TokenBlockSequence seq(c.block_size, salt_of(c));
    seq.extend(c.tokens);
    ASSERT_EQ(seq.num_blocks(), c.sequence_hashes.size()) << "case " << i;
    for (std::size_t b = 0; b < seq.num_blocks(); ++b) {
      EXPECT_EQ(seq.sequence_hashes()[b].value(), c.sequence_hashes[b])
          << "case " << i << " block " << b;
    }
  }
}

}  // namespace hash_vectors_test
}  // namespace kvbm
