// examples/scheduler/scheduler.h: a continuous-batching scheduler on kvbm.
//
// Algorithm 2 of the continuous-batching design, with kvbm as the block
// allocator and the block tables of block_table.h (Algorithm 3):
//
//   queues      waiting (arrived, not admitted), running, swapped (preempted)
//   each step   1. retire finished sequences (their blocks stay cached in G1)
//               2. fork beam-search sequences that finished their prefill
//               3. reserve the block every running sequence's next token
//                  needs (a fresh tail, or a copy-on-write copy of a shared
//                  one); when G1 has none, preempt the lowest-priority,
//                  latest-arrived sequence: make sure G2 holds its registered
//                  blocks (KvBlockManager::offload, then wait), release them,
//                  move it to the swapped queue
//               4. unless step 3 preempted: resume swapped sequences, oldest
//                  first, while G1 has room: onboard their hashes back
//                  (G1 hits, G2 and G3 copies) instead of recomputing them
//               5. unless anything is still swapped: admit waiting requests
//                  while G1 has room: onboard the longest cached prefix,
//                  allocate the rest
//               6. the "forward pass": prefill what was admitted or resumed,
//                  decode one token for every other running sequence; every
//                  block that fills is staged and registered with a
//                  precondition (a HostEvent) that the end of the pass
//                  signals, after which write-through copies it to G2
//
// Bytes: with a host-addressable G1 (emulated, move_bytes) each token's KV
// bytes are written as kv_bytes.h describes, and every block brought in by
// onboarding, and every block when it fills (after copy-on-write), is
// compared with what its tokens say it must hold.
//
// Thread-safety: none; one thread drives the scheduler. kvbm's own threads
// (offload pipelines, copy engines) run beside it.

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvbm/kv_block_manager.h"
#include "kvbm/offload/precondition.h"
#include "kvbm/token_block_sequence.h"
#include "scheduler/block_table.h"
#include "scheduler/kv_bytes.h"
#include "scheduler/workload.h"

namespace kvbm_example {

/// What the scheduler did; every count since construction.
struct SchedulerStats {
  std::size_t steps = 0;
  std::size_t admitted = 0;            ///< requests admitted from the waiting queue
  std::size_t requests_finished = 0;   ///< requests whose every beam finished
  std::size_t sequences_finished = 0;  ///< sequences (beams count one each)
  std::size_t preempted = 0;           ///< sequences swapped out
  std::size_t resumed = 0;             ///< sequences swapped back in
  std::size_t max_running = 0;         ///< most sequences running at once
  std::size_t decode_tokens = 0;       ///< tokens decoded
  std::size_t blocks_registered = 0;   ///< blocks the forward pass computed and registered

  // Admission: the prompt's full blocks, by where they came from.
  std::size_t prompt_blocks = 0;
  std::size_t admit_g1 = 0;        ///< reused from G1
  std::size_t admit_g2 = 0;        ///< onboarded from G2
  std::size_t admit_g3 = 0;        ///< onboarded from G3
  std::size_t admit_computed = 0;  ///< computed by the prefill

  // Preemption: what the swap-out offload did with the victim's blocks.
  std::size_t swap_out_blocks = 0;   ///< registered blocks of the victims
  std::size_t swap_out_copied = 0;   ///< copied to G2 by the swap-out
  std::size_t swap_out_present = 0;  ///< already in G2 (write-through had copied them)
  std::size_t swap_out_failed = 0;   ///< could not be offloaded (recomputed on resume)

  // Resume: the full blocks a swapped sequence needed back, by source.
  std::size_t resume_blocks = 0;
  std::size_t resume_g1 = 0;               ///< still cached in G1
  std::size_t resume_g2 = 0;               ///< onboarded from G2
  std::size_t resume_g3 = 0;               ///< onboarded from G3
  std::size_t resume_recomputed = 0;       ///< nowhere to be found: recomputed
  std::size_t tail_tokens_recomputed = 0;  ///< partial tail blocks are never offloaded

  // Beam search (Algorithm 3's fork and copy-on-write).
  std::size_t beam_forks = 0;          ///< sequences created by fork
  std::size_t fork_shared_blocks = 0;  ///< full blocks shared by those forks (no copy)
  std::size_t cow_copies = 0;          ///< tail blocks copied on a fork's first write
  std::size_t cow_tokens = 0;          ///< token slots those copies carried

  // Verification of bytes.
  std::size_t blocks_verified = 0;
  std::size_t verify_mismatches = 0;
  std::size_t onboard_shortfall = 0;  ///< blocks an onboarding cut (failed copy or no room)
};

/// Options of the scheduler itself (the pools are the KvBlockManager's).
struct SchedulerConfig {
  std::size_t max_running = 64;      ///< most sequences in one batch
  std::size_t watermark_blocks = 2;  ///< G1 blocks admission leaves free for decoding
  bool verify_bytes = true;          ///< write and check KV bytes (needs a host-addressable G1)
};

enum class SeqStatus { kWaiting, kRunning, kSwapped, kFinished };

/// One sequence (a request, or one beam of a beam-search request).
struct Sequence {
  explicit Sequence(std::uint32_t block_size) : tokens(block_size) {}
  std::size_t request = 0;  ///< index of its RequestSpec
  std::size_t beam = 0;     ///< which answer it decodes
  int priority = 0;         ///< higher runs first
  std::uint64_t order = 0;  ///< arrival order (beams of a request adjacent)
  SeqStatus status = SeqStatus::kWaiting;
  kvbm::TokenBlockSequence tokens;                    ///< every token known so far, hashed by block
  BlockTable table;                                   ///< its G1 blocks
  std::size_t generated = 0;                          ///< answer tokens decoded
  std::size_t beams_to_fork = 1;                      ///< >1 until the beams are forked
  std::vector<kvbm::MutableBlock<kvbm::G1>> pending;  ///< blocks the next prefill computes
  bool decode_now = false;                            ///< a slot was reserved for this step's token
};

/// The scheduler; see the file comment.
class Scheduler {
 public:
  Scheduler(kvbm::KvBlockManager& kv, std::vector<RequestSpec> workload,
            SchedulerConfig config = {})
      : kv_(kv),
        specs_(std::move(workload)),
        config_(config),
        bytes_(config.verify_bytes ? &kv.device_layout() : nullptr),
        beams_left_(specs_.size()) {
    for (std::size_t i = 0; i < specs_.size(); ++i) beams_left_[i] = specs_[i].beams();
  }

  /// Returns true once every request has finished.
  [[nodiscard]] bool done() const noexcept { return stats_.requests_finished == specs_.size(); }

  /// Runs one scheduling step and its forward pass; see the file comment.
  /// Throws std::runtime_error when a request can never fit in G1.
  void step() {
    ++stats_.steps;
    arrive();
    retire_finished();
    fork_beams();
    const bool preempted = reserve_decode_slots();
    std::vector<Sequence*> prefill;
    if (!preempted) bring_in(swapped_, prefill, /*resume=*/true);
    if (!preempted && swapped_.empty()) bring_in(waiting_, prefill, /*resume=*/false);
    stats_.max_running = std::max(stats_.max_running, running_.size());
    forward_pass(prefill);
    check_progress(prefill.empty());
  }

  /// Steps until done(); returns the number of steps taken.
  std::size_t run(std::size_t max_steps = 1'000'000) {
    while (!done() && stats_.steps < max_steps) step();
    return stats_.steps;
  }

  [[nodiscard]] const SchedulerStats& stats() const noexcept { return stats_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Sequence>>& sequences() const noexcept {
    return all_;
  }
  [[nodiscard]] std::size_t running() const noexcept { return running_.size(); }
  [[nodiscard]] std::size_t swapped() const noexcept { return swapped_.size(); }
  [[nodiscard]] std::size_t waiting() const noexcept { return waiting_.size(); }

 private:
  // Moves requests whose arrival step has come into the waiting queue.
  void arrive() {
    while (next_spec_ < specs_.size() && specs_[next_spec_].arrival_step < stats_.steps) {
      const RequestSpec& spec = specs_[next_spec_++];
      auto s = std::make_unique<Sequence>(kv_.block_size());
      s->request = spec.id;
      s->order = spec.id * 1024;
      s->beams_to_fork = spec.beams();
      s->tokens.extend(spec.prompt);
      waiting_.push_back(s.get());
      all_.push_back(std::move(s));
    }
  }

  // Phase 1: finished sequences release their blocks (Algorithm 3's free).
  void retire_finished() {
    std::erase_if(running_, [this](Sequence* s) {
      if (s->generated < answer(*s).size()) return false;
      s->table.clear();
      s->status = SeqStatus::kFinished;
      ++stats_.sequences_finished;
      if (--beams_left_[s->request] == 0) ++stats_.requests_finished;
      return true;
    });
  }

  // Phase 2: a beam-search sequence whose prompt is computed forks into its
  // beams; every fork shares the parent's blocks, tail included.
  void fork_beams() {
    std::vector<Sequence*> forks;
    for (Sequence* s : running_) {
      if (s->beams_to_fork <= 1 || !s->pending.empty()) continue;
      for (std::size_t b = 1; b < s->beams_to_fork; ++b) {
        auto f = std::make_unique<Sequence>(kv_.block_size());
        f->request = s->request;
        f->beam = b;
        f->priority = s->priority;
        f->order = s->order + b;
        f->status = SeqStatus::kRunning;
        f->tokens = s->tokens;
        f->table = s->table.fork();
        f->generated = s->generated;
        stats_.fork_shared_blocks += s->table.num_full();
        ++stats_.beam_forks;
        forks.push_back(f.get());
        all_.push_back(std::move(f));
      }
      s->beams_to_fork = 1;
    }
    running_.insert(running_.end(), forks.begin(), forks.end());
  }

  // Phase 3: every running sequence gets a writable slot for its next token,
  // oldest first; preempts when G1 is out of blocks. Returns true when it did.
  bool reserve_decode_slots() {
    std::sort(running_.begin(), running_.end(), by_priority);
    bool preempted = false;
    const std::vector<Sequence*> snapshot = running_;
    for (Sequence* s : snapshot) {
      if (s->status != SeqStatus::kRunning) continue;  // preempted meanwhile
      s->decode_now = false;
      if (s->table.has_tail() && !s->table.tail_shared()) {
        s->decode_now = true;
        continue;
      }
      while (true) {
        auto fresh = kv_.device().allocate_blocks(1);
        if (fresh) {
          install_tail(*s, std::move(fresh->front()));
          s->decode_now = true;
          break;
        }
        Sequence* victim = running_.back();  // lowest priority, latest arrival
        preempt(*victim);
        preempted = true;
        if (victim == s) break;
      }
    }
    return preempted;
  }

  // Gives `s` a tail to write: `fresh` itself, or, when the tail is shared
  // with a fork, a copy of it (copy-on-write of the filled slots only).
  void install_tail(Sequence& s, kvbm::MutableBlock<kvbm::G1> fresh) {
    if (!s.table.tail_shared()) {
      s.table.set_tail(std::move(fresh));
      return;
    }
    const auto filled = static_cast<std::uint32_t>(s.tokens.tail_tokens().size());
    s.table.copy_on_write(std::move(fresh), [&](kvbm::BlockId src, kvbm::BlockId dst) {
      bytes_.copy_slots(src, dst, filled);
    });
    ++stats_.cow_copies;
    stats_.cow_tokens += filled;
  }

  // Swap-out: G2 must hold the victim's registered blocks before they are
  // released (write-through has usually copied them; offload() of a block G2
  // already holds copies nothing). The partial tail is dropped.
  void preempt(Sequence& victim) {
    const auto& full = victim.table.full();
    stats_.swap_out_blocks += full.size();
    if (kv_.host() != nullptr && !full.empty()) {
      kvbm::TransferHandle h = kv_.offload(full);
      if (h.valid()) {
        h.wait();
        const kvbm::OffloadReport r = h.report();
        stats_.swap_out_copied += r.count(kvbm::BlockOutcome::kTransferred);
        // kFiltered: the skip-present policy saw G2 holding it already.
        stats_.swap_out_present +=
            r.count(kvbm::BlockOutcome::kAlreadyPresent) + r.count(kvbm::BlockOutcome::kFiltered);
        stats_.swap_out_failed += r.failed().size();
      }
    }
    victim.table.clear();
    victim.decode_now = false;
    victim.status = SeqStatus::kSwapped;
    std::erase(running_, &victim);
    swapped_.insert(std::upper_bound(swapped_.begin(), swapped_.end(), &victim, by_priority),
                    &victim);
    ++stats_.preempted;
  }

  // Phases 4 and 5: moves sequences from `queue` to running, in order, while
  // G1 has room for their blocks; stops at the first that does not fit.
  void bring_in(std::deque<Sequence*>& queue, std::vector<Sequence*>& prefill, bool resume) {
    while (!queue.empty() && running_.size() < config_.max_running) {
      Sequence& s = *queue.front();
      if (!admit(s, resume)) break;
      queue.pop_front();
      s.status = SeqStatus::kRunning;
      running_.push_back(&s);
      prefill.push_back(&s);
      ++(resume ? stats_.resumed : stats_.admitted);
    }
  }

  // Onboards the longest prefix of `s` that any tier holds, then allocates
  // blocks for the rest (computed by the next prefill). Returns false,
  // holding nothing new, when G1 has no room.
  bool admit(Sequence& s, bool resume) {
    const std::size_t full = s.tokens.num_blocks();
    const std::size_t tail_tokens = s.tokens.tail_tokens().size();
    const std::size_t needed = full + 1;  // the prompt, and a block for the tail or next token
    if (kv_.device().available_blocks() < needed + config_.watermark_blocks) return false;

    std::vector<kvbm::ImmutableBlock<kvbm::G1>> prefix;
    kvbm::OnboardCounts counts;
    if (full > 0) {
      kvbm::OnboardHandle h = kv_.onboard(s.tokens.sequence_hashes());
      h.wait();
      counts = h.counts();
      prefix = h.take_blocks();
      stats_.onboard_shortfall += counts.failed + counts.no_space;
    }
    // Every block that came in must hold what its tokens say; a block that
    // does not is recomputed, and so is everything after it.
    for (std::size_t i = 0; i < prefix.size(); ++i) {
      ++stats_.blocks_verified;
      if (!bytes_.check_block(prefix[i].block_id(), parent_of(s, i), s.tokens.block_tokens(i))) {
        ++stats_.verify_mismatches;
        prefix.erase(prefix.begin() + static_cast<std::ptrdiff_t>(i), prefix.end());
        break;
      }
    }
    const std::size_t rest = full - prefix.size() + (tail_tokens > 0 ? 1 : 0);
    if (rest > 0) {
      auto fresh = kv_.device().allocate_blocks(rest);
      if (!fresh) return false;  // the prefix stays cached in G1
      s.pending = std::move(*fresh);
    }
    const std::size_t computed = full - prefix.size();
    if (resume) {
      stats_.resume_blocks += full;
      stats_.resume_g1 += counts.from(kvbm::TierId::kG1);
      stats_.resume_g2 += counts.from(kvbm::TierId::kG2);
      stats_.resume_g3 += counts.from(kvbm::TierId::kG3);
      stats_.resume_recomputed += computed;
      stats_.tail_tokens_recomputed += tail_tokens;
    } else {
      stats_.prompt_blocks += full;
      stats_.admit_g1 += counts.from(kvbm::TierId::kG1);
      stats_.admit_g2 += counts.from(kvbm::TierId::kG2);
      stats_.admit_g3 += counts.from(kvbm::TierId::kG3);
      stats_.admit_computed += computed;
    }
    s.table.append_full(std::move(prefix));
    return true;
  }

  // Phase 6: prefill for `prefill`, one decoded token for the rest.
  void forward_pass(const std::vector<Sequence*>& prefill) {
    // The pass's completion: blocks registered in it are offloaded after this.
    auto pass_done = std::make_shared<kvbm::HostEvent>();
    for (Sequence* s : prefill) compute_prompt(*s, pass_done);
    for (Sequence* s : running_) {
      if (s->decode_now) decode(*s, pass_done);
    }
    pass_done->signal();
  }

  // Writes and registers the blocks admission could not bring in, then the
  // tail's tokens.
  void compute_prompt(Sequence& s, const std::shared_ptr<kvbm::HostEvent>& pass_done) {
    std::vector<kvbm::CompleteBlock<kvbm::G1>> computed;
    std::size_t b = s.table.num_full();
    auto it = s.pending.begin();
    for (; b < s.tokens.num_blocks(); ++b, ++it) {
      bytes_.write_block(it->block_id(), parent_of(s, b), s.tokens.block_tokens(b));
      computed.push_back(std::move(*it).complete(s.tokens.block(b)).value());
    }
    stats_.blocks_registered += computed.size();
    if (!computed.empty()) s.table.append_full(kv_.register_blocks(std::move(computed), pass_done));
    if (it != s.pending.end()) {  // the partial tail
      bytes_.write_block(it->block_id(), parent_of(s, b), s.tokens.tail_tokens());
      s.table.set_tail(std::move(*it));
    }
    s.pending.clear();
  }

  // Decodes one token into the tail; a tail that fills is checked, staged
  // and registered.
  void decode(Sequence& s, const std::shared_ptr<kvbm::HostEvent>& pass_done) {
    const kvbm::Token token = answer(s)[s.generated];
    const std::size_t b = s.tokens.num_blocks();
    std::uint64_t seed = parent_of(s, b);
    for (const kvbm::Token t : s.tokens.tail_tokens()) seed = next_token_seed(seed, t);
    const auto slot = static_cast<std::uint32_t>(s.tokens.tail_tokens().size());
    bytes_.write_token(s.table.tail_id(), slot, next_token_seed(seed, token));
    ++s.generated;
    ++stats_.decode_tokens;
    s.decode_now = false;
    if (s.tokens.append(token) == 0) return;

    auto tail = s.table.take_tail();
    ++stats_.blocks_verified;
    if (!bytes_.check_block(tail.block_id(), parent_of(s, b), s.tokens.block_tokens(b))) {
      ++stats_.verify_mismatches;
    }
    std::vector<kvbm::CompleteBlock<kvbm::G1>> one;
    one.push_back(std::move(tail).complete(s.tokens.block(b)).value());
    auto registered = kv_.register_blocks(std::move(one), pass_done);
    s.table.append_full(std::move(registered.front()));
    ++stats_.blocks_registered;
  }

  // With nothing running and nothing brought in, either every queue is
  // empty or the next request does not fit: wait for kvbm's copies (which
  // hold G1 blocks) once, then give up.
  void check_progress(bool nothing_brought_in) {
    if (!running_.empty() || !nothing_brought_in || (waiting_.empty() && swapped_.empty())) {
      stalled_ = 0;
      return;
    }
    kv_.drain();
    if (++stalled_ > 3) {
      const Sequence& s = *(swapped_.empty() ? waiting_.front() : swapped_.front());
      throw std::runtime_error(
          "request " + std::to_string(s.request) + " needs " +
          std::to_string(s.tokens.num_blocks() + 1 + config_.watermark_blocks) +
          " G1 blocks but only " + std::to_string(kv_.device().available_blocks()) +
          " can be freed; give G1 more blocks");
    }
  }

  [[nodiscard]] const std::vector<kvbm::Token>& answer(const Sequence& s) const {
    return specs_[s.request].answers[s.beam];
  }
  // The seed before block `b`'s first token: its parent's sequence hash.
  [[nodiscard]] static std::uint64_t parent_of(const Sequence& s, std::size_t b) {
    return b == 0 ? kFirstBlockSeed : s.tokens.sequence_hashes()[b - 1].value();
  }
  // Higher priority first, then earlier arrival.
  static bool by_priority(const Sequence* a, const Sequence* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->order < b->order;
  }

  kvbm::KvBlockManager& kv_;
  std::vector<RequestSpec> specs_;
  SchedulerConfig config_;
  KvBytes bytes_;
  SchedulerStats stats_;
  std::vector<std::size_t> beams_left_;
  std::size_t next_spec_ = 0;
  std::size_t stalled_ = 0;
  std::vector<std::unique_ptr<Sequence>> all_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  std::deque<Sequence*> swapped_;
};

}  // namespace kvbm_example
