// kvbm-scheduler-example: a continuous-batching scheduler on kvbm.
//
// Runs the scheduler of scheduler.h over a synthetic workload (shared system
// prompts, follow-up turns, beam search) on a KvBlockManager with G1, G2
// and G3, and prints what it did: admissions with prefix reuse per tier,
// preemptions as offload to G2, resumes as onboarding, beam forks with
// copy-on-write, byte verification, and the pools' final accounting.
// Exits 1 when a byte check failed or a pool does not balance, 2 on bad
// options.
//
//   kvbm-scheduler-example [--requests N] [--seed S] [--g1-blocks N]
//                          [--g2-blocks N] [--g3-blocks N] [--beams B]
//                          [--metadata-only] [--quiet]

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "kvbm/kv_block_manager.h"
#include "kvbm/logging.h"
#include "scheduler/scheduler.h"
#include "scheduler/setup.h"
#include "scheduler/workload.h"

namespace {

using kvbm_example::SchedulerStats;

struct Options {
  kvbm_example::WorkloadConfig workload;
  kvbm_example::TierSizes tiers;
  bool quiet = false;
};

[[noreturn]] void usage(const char* argv0, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "%s: %s\n", argv0, error.c_str());
  std::fprintf(stderr,
               "usage: %s [--requests N] [--seed S] [--g1-blocks N] [--g2-blocks N]\n"
               "          [--g3-blocks N] [--beams B] [--metadata-only] [--quiet]\n"
               "  --requests N     requests in the synthetic workload (default 128)\n"
               "  --seed S         seed of the workload (default 1)\n"
               "  --g1-blocks N    device blocks (default 96; 16 tokens, 4 KiB each)\n"
               "  --g2-blocks N    pinned host blocks (default 192)\n"
               "  --g3-blocks N    disk blocks, 0 for none (default 1536)\n"
               "  --beams B        beams of each beam-search request, 2 .. 8 (default 3)\n"
               "  --metadata-only  move no bytes (and check none)\n"
               "  --quiet          print only the summary\n",
               argv0);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto number = [&](std::size_t lo, std::size_t hi) -> std::size_t {
      if (i + 1 >= argc) usage(argv[0], std::string(arg) + " needs a value");
      const char* text = argv[++i];
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(text, &end, 10);
      if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v < lo || v > hi) {
        usage(argv[0], std::string(arg) + ": expected a number in " + std::to_string(lo) + " .. " +
                           std::to_string(hi) + ", got '" + text + "'");
      }
      return static_cast<std::size_t>(v);
    };
    if (arg == "--requests") {
      o.workload.requests = number(1, 100000);
    } else if (arg == "--seed") {
      o.workload.seed = number(0, ~0ULL);
    } else if (arg == "--g1-blocks") {
      o.tiers.g1_blocks = number(1, 1u << 20);
    } else if (arg == "--g2-blocks") {
      o.tiers.g2_blocks = number(1, 1u << 20);
    } else if (arg == "--g3-blocks") {
      o.tiers.g3_blocks = number(0, 1u << 20);
    } else if (arg == "--beams") {
      o.workload.beams = static_cast<std::uint32_t>(number(2, 8));
    } else if (arg == "--metadata-only") {
      o.tiers.move_bytes = false;
    } else if (arg == "--quiet") {
      o.quiet = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0], "");
    } else {
      usage(argv[0], "unknown option '" + std::string(arg) + "'");
    }
  }
  o.workload.block_size = o.tiers.block_size;
  // The longest request (prompt and answer) plus the admission watermark must fit in G1.
  const std::size_t longest = (o.workload.max_tokens + o.tiers.block_size - 1) / o.tiers.block_size;
  const std::size_t g1_min = longest + 1 + kvbm_example::SchedulerConfig{}.watermark_blocks;
  if (o.tiers.g1_blocks < g1_min) {
    usage(argv[0], "--g1-blocks must be at least " + std::to_string(g1_min) +
                       " (the longest request is " + std::to_string(longest) + " blocks)");
  }
  return o;
}

double pct(std::size_t part, std::size_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

void print_pool(const char* name, const kvbm::PoolCounts& c) {
  std::printf("  %-3s total %5zu  free %5zu  cached %5zu  in use %3zu  %s\n", name, c.total,
              c.reset, c.inactive, c.in_use, c.balanced() ? "balanced" : "NOT BALANCED");
}

void print_summary(const SchedulerStats& s, double seconds, bool bytes_checked) {
  std::printf(
      "steps                 %zu in %.2f s (%zu decode tokens, at most %zu sequences at once)\n",
      s.steps, seconds, s.decode_tokens, s.max_running);
  std::printf("requests              %zu admitted, %zu finished (%zu sequences with the beams)\n",
              s.admitted, s.requests_finished, s.sequences_finished);
  std::printf(
      "admission             %zu prompt blocks: %zu reused from G1 (%.1f%%), %zu onboarded from "
      "G2, %zu from G3, %zu computed\n",
      s.prompt_blocks, s.admit_g1, pct(s.admit_g1, s.prompt_blocks), s.admit_g2, s.admit_g3,
      s.admit_computed);
  std::printf(
      "preemption            %zu sequences swapped out; their %zu blocks: %zu already in G2 "
      "(write-through), %zu copied by the swap-out, %zu failed\n",
      s.preempted, s.swap_out_blocks, s.swap_out_present, s.swap_out_copied, s.swap_out_failed);
  std::printf(
      "resume                %zu sequences; %zu blocks needed: %zu still in G1, %zu onboarded "
      "from G2, %zu from G3, %zu recomputed (+%zu tail tokens)\n",
      s.resumed, s.resume_blocks, s.resume_g1, s.resume_g2, s.resume_g3, s.resume_recomputed,
      s.tail_tokens_recomputed);
  std::printf(
      "beam search           %zu forks sharing %zu full blocks; %zu copy-on-write tail copies "
      "(%zu token slots)\n",
      s.beam_forks, s.fork_shared_blocks, s.cow_copies, s.cow_tokens);
  std::printf("blocks                %zu computed and registered\n", s.blocks_registered);
  if (bytes_checked) {
    std::printf("verification          %zu blocks checked byte for byte, %zu mismatches\n",
                s.blocks_verified, s.verify_mismatches);
  } else {
    std::printf("verification          metadata only: no bytes moved or checked\n");
  }
  if (s.onboard_shortfall > 0) {
    std::printf(
        "onboarding            %zu blocks cut from onboarded prefixes (failed copy or no room)\n",
        s.onboard_shortfall);
  }
}

int run(const Options& o) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines interleave with kvbm's log lines
  if (o.quiet) kvbm::logger()->set_level(spdlog::level::err);
  kvbm_example::ScratchDir dir;
  auto kv = kvbm::KvBlockManager::build(kvbm_example::make_config(o.tiers, dir.path()));
  if (o.tiers.move_bytes && !kv->device_emulated()) {
    // G1 is real device memory: the example cannot write it through host
    // pointers, so it runs metadata only.
    std::printf("G1 is on a GPU: running metadata only (no byte checks)\n");
    kv.reset();
    auto tiers = o.tiers;
    tiers.move_bytes = false;
    kv = kvbm::KvBlockManager::build(kvbm_example::make_config(tiers, dir.path()));
  }
  const bool bytes = kv->config().move_bytes;
  const auto workload = kvbm_example::make_workload(o.workload);
  if (!o.quiet) {
    std::printf(
        "kvbm scheduler example: %zu requests (seed %llu), G1 %zu / G2 %zu / G3 %zu blocks of "
        "%u tokens (%zu bytes), %s\n",
        workload.size(), static_cast<unsigned long long>(o.workload.seed), o.tiers.g1_blocks,
        o.tiers.g2_blocks, o.tiers.g3_blocks, kv->block_size(), kv->block_bytes(),
        bytes ? "moving bytes" : "metadata only");
  }

  kvbm_example::SchedulerConfig sc;
  sc.verify_bytes = bytes;
  kvbm_example::Scheduler scheduler(*kv, workload, sc);
  const auto start = std::chrono::steady_clock::now();
  std::size_t last_preempted = 0;
  while (!scheduler.done()) {
    scheduler.step();
    const auto& s = scheduler.stats();
    if (!o.quiet && (s.steps % 50 == 0 || s.preempted != last_preempted)) {
      std::printf(
          "  step %4zu: running %2zu  swapped %2zu  waiting %2zu  finished %3zu  preempted %zu  "
          "G1 free %zu\n",
          s.steps, scheduler.running(), scheduler.swapped(), scheduler.waiting(),
          s.requests_finished, s.preempted, kv->device().available_blocks());
      last_preempted = s.preempted;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Shutdown: every request has released its blocks; let the offloads finish,
  // then every pool must balance with nothing in use.
  kv->drain();
  const SchedulerStats& s = scheduler.stats();
  print_summary(s, seconds, bytes);
  std::string audit = kv->audit();
  bool idle = kv->device().pool_counts().in_use == 0;
  std::printf("pools after drain\n");
  print_pool("G1", kv->device().pool_counts());
  if (kv->host() != nullptr) {
    print_pool("G2", kv->host()->pool_counts());
    idle = idle && kv->host()->pool_counts().in_use == 0;
  }
  if (kv->disk() != nullptr) {
    print_pool("G3", kv->disk()->pool_counts());
    idle = idle && kv->disk()->pool_counts().in_use == 0;
  }
  kv->shutdown();
  if (audit.empty()) audit = kv->audit();
  std::printf("audit                 %s\n", audit.empty() ? "clean" : audit.c_str());

  const bool ok =
      audit.empty() && idle && s.verify_mismatches == 0 && s.requests_finished == workload.size();
  if (!ok) {
    std::printf("FAILED:%s%s%s\n", audit.empty() ? "" : " audit",
                idle ? "" : " blocks still in use",
                s.verify_mismatches == 0 ? "" : " byte mismatches");
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvbm-scheduler-example: %s\n", e.what());
    return 1;
  }
}
