// examples/scheduler/workload.h: a synthetic, seeded stream of requests.
//
// Requests are built so that prefix reuse happens the way it does in
// serving: every request starts with one of a few shared system prompts; a
// share of them are follow-up turns of an earlier conversation (the earlier
// request's prompt and answer, then a new user turn); the rest of each prompt
// and every answer are random tokens. Some requests use beam search: they
// carry one answer per beam.
//
// Answers are fixed up front (the "model" is deterministic), so a run is a
// pure function of the options and the seed.

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kvbm/hashing.h"

namespace kvbm_example {

/// Options of the synthetic workload.
struct WorkloadConfig {
  std::size_t requests = 128;        ///< number of requests
  std::uint64_t seed = 1;            ///< everything random derives from it
  std::uint32_t block_size = 16;     ///< tokens per block (beam prompts avoid block boundaries)
  std::size_t system_prompts = 4;    ///< distinct shared system prompts
  std::size_t max_tokens = 480;      ///< prompt + answer, at most
  double follow_up_share = 0.3;      ///< share of requests continuing an earlier conversation
  std::size_t beam_requests = 2;     ///< requests that use beam search
  std::uint32_t beams = 3;           ///< beams of a beam-search request (2 ..)
  std::size_t mean_arrival_gap = 1;  ///< scheduler steps between arrivals, on average
};

/// One request: when it arrives, its prompt and its answer per beam.
struct RequestSpec {
  std::size_t id = 0;              ///< index, in arrival order
  std::uint64_t arrival_step = 0;  ///< first step it may be admitted
  std::vector<kvbm::Token> prompt;
  std::vector<std::vector<kvbm::Token>> answers;  ///< one per beam (one for greedy decoding)
  /// Returns the number of beams.
  [[nodiscard]] std::size_t beams() const noexcept { return answers.size(); }
};

/// Returns `config.requests` requests in arrival order.
inline std::vector<RequestSpec> make_workload(const WorkloadConfig& config) {
  std::mt19937_64 rng(config.seed);
  auto uniform = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  auto random_tokens = [&](std::size_t n) {
    std::vector<kvbm::Token> out(n);
    for (auto& t : out) t = static_cast<kvbm::Token>(uniform(1, 31999));
    return out;
  };

  std::vector<std::vector<kvbm::Token>> system(std::max<std::size_t>(config.system_prompts, 1));
  for (auto& s : system) s = random_tokens(uniform(48, 160));

  // Beam-search requests are spread over the run.
  std::vector<bool> is_beam(config.requests, false);
  for (std::size_t k = 0; k < config.beam_requests && k < config.requests; ++k) {
    is_beam[std::min(config.requests - 1, k * config.requests / config.beam_requests + 1)] = true;
  }

  std::vector<RequestSpec> out;
  out.reserve(config.requests);
  std::uint64_t step = 0;
  for (std::size_t i = 0; i < config.requests; ++i) {
    RequestSpec r;
    r.id = i;
    r.arrival_step = step;
    step += uniform(0, 2 * config.mean_arrival_gap);
    const std::size_t answer_len = uniform(16, 112);

    // A follow-up turn: an earlier greedy conversation that still has room.
    bool continued = false;
    if (!out.empty() && std::bernoulli_distribution(config.follow_up_share)(rng)) {
      const RequestSpec& prev = out[uniform(0, out.size() - 1)];
      const std::size_t history = prev.prompt.size() + prev.answers[0].size();
      if (prev.beams() == 1 && history + 16 + answer_len <= config.max_tokens) {
        r.prompt = prev.prompt;
        r.prompt.insert(r.prompt.end(), prev.answers[0].begin(), prev.answers[0].end());
        const auto turn = random_tokens(
            uniform(16, std::min<std::size_t>(96, config.max_tokens - history - answer_len)));
        r.prompt.insert(r.prompt.end(), turn.begin(), turn.end());
        continued = true;
      }
    }
    if (!continued) {
      r.prompt = system[uniform(0, system.size() - 1)];
      const std::size_t room = config.max_tokens - r.prompt.size() - answer_len;
      const auto user = random_tokens(uniform(8, std::min<std::size_t>(128, room)));
      r.prompt.insert(r.prompt.end(), user.begin(), user.end());
    }

    const std::size_t beams = is_beam[i] ? std::max<std::uint32_t>(config.beams, 2) : 1;
    if (beams > 1 && r.prompt.size() % config.block_size == 0) {
      r.prompt.pop_back();  // leave a partial tail block for the beams to share
    }
    for (std::size_t b = 0; b < beams; ++b) r.answers.push_back(random_tokens(answer_len));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvbm_example
