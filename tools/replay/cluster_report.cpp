#include "replay/cluster_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "replay/report.h"
#include "replay/svg_plot.h"

namespace kvbm::replay {

namespace {

double share(std::uint64_t num, std::uint64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

}  // namespace

void print_cluster(std::ostream& out, const ReplayResult& r) {
  if (!r.cluster) return;
  const ClusterFigures& f = *r.cluster;
  out << fmt::format("  router {} (events {}), {} instances\n", f.policy, f.transport,
                     f.requests.size());
  out << fmt::format("    load spread (max/mean): requests {:.2f}, computed tokens {:.2f}\n",
                     f.request_imbalance, f.token_imbalance);
  out << fmt::format(
      "    simulated time to first token (prefill {} tokens/s per instance, one request at a "
      "time): mean {:.3f} s, p50 {:.3f} s, p90 {:.3f} s, p99 {:.3f} s\n",
      group_digits(static_cast<std::uint64_t>(f.prefill_tokens_per_s)), f.ttft_mean_s, f.ttft_p50_s,
      f.ttft_p90_s, f.ttft_p99_s);
  out << fmt::format(
      "    index: {} events in {} batches, {} gaps, {} replays; {} decisions on stale entries; "
      "prefix blocks expected {} / found {}\n",
      group_digits(f.events_applied), group_digits(f.batches_applied), group_digits(f.gaps),
      group_digits(f.replays), group_digits(f.stale_decisions), group_digits(f.predicted_blocks),
      group_digits(f.found_blocks));
  out << fmt::format("    {:<9} {:>9} {:>16}\n", "instance", "requests", "computed tokens");
  for (std::size_t i = 0; i < f.requests.size(); ++i) {
    out << fmt::format("    {:<9} {:>9} {:>16}\n", i, group_digits(f.requests[i]),
                       group_digits(f.computed_tokens[i]));
  }
  out << "\n";
}

nlohmann::json cluster_json(const ClusterFigures& f) {
  return {
      {"router", f.policy},
      {"events", f.transport},
      {"prefill_tokens_per_s", f.prefill_tokens_per_s},
      {"requests", f.requests},
      {"computed_tokens", f.computed_tokens},
      {"request_imbalance", f.request_imbalance},
      {"token_imbalance", f.token_imbalance},
      {"ttft_s",
       {{"mean", f.ttft_mean_s},
        {"p50", f.ttft_p50_s},
        {"p90", f.ttft_p90_s},
        {"p99", f.ttft_p99_s}}},
      {"index",
       {{"events_applied", f.events_applied},
        {"batches_applied", f.batches_applied},
        {"gaps", f.gaps},
        {"replays", f.replays}}},
      {"stale_decisions", f.stale_decisions},
      {"predicted_prefix_blocks", f.predicted_blocks},
      {"found_prefix_blocks", f.found_blocks},
  };
}

void print_cluster_sweep(std::ostream& out, const std::vector<ClusterSweepPoint>& points) {
  out << fmt::format("  {:>9} {:<12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
                     "instances", "router", "G1", "G2", "G3", "G4", "total", "req max/", "tok max/",
                     "TTFT p50", "TTFT p99", "wall s");
  out << fmt::format("  {:>9} {:<12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}\n",
                     "", "", "", "", "", "", "", "mean", "mean", "s", "s", "");
  for (const auto& p : points) {
    const auto& r = p.result;
    const ClusterFigures f = r.cluster.value_or(ClusterFigures{});
    out << fmt::format(
        "  {:>9} {:<12} {:>7.2f}% {:>7.2f}% {:>7.2f}% {:>7.2f}% {:>7.2f}% {:>9.2f} {:>9.2f} "
        "{:>9.3f} {:>9.3f} {:>7.1f}\n",
        p.instances, p.router, 100 * share(r.hit_blocks[TierId::kG1], r.blocks),
        100 * share(r.hit_blocks[TierId::kG2], r.blocks),
        100 * share(r.hit_blocks[TierId::kG3], r.blocks),
        100 * share(r.hit_blocks[TierId::kG4], r.blocks), 100 * r.block_hit_ratio(),
        f.request_imbalance, f.token_imbalance, f.ttft_p50_s, f.ttft_p99_s, r.wall_seconds);
  }
}

std::string cluster_sweep_svg(const std::vector<ClusterSweepPoint>& points,
                              const std::string& title) {
  PlotFrame f;
  f.right = 200;
  const double kL = f.left, kT = f.top, pw = f.plot_width(), ph = f.plot_height();
  std::map<std::string, std::vector<const ClusterSweepPoint*>> by_router;
  std::uint32_t nmin = 0, nmax = 0;
  double ymax = 0.1;
  for (const auto& p : points) {
    by_router[p.router].push_back(&p);
    nmin = nmin == 0 ? p.instances : std::min(nmin, p.instances);
    nmax = std::max(nmax, p.instances);
    ymax = std::max(ymax, p.result.block_hit_ratio());
  }
  for (auto& [name, v] : by_router) {
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->instances < b->instances; });
  }
  ymax = std::min(1.0, std::ceil(ymax * 10.0 + 1e-9) / 10.0);
  const double lo = std::log2(std::max<double>(nmin, 1)) - 0.3;
  const double hi = std::log2(std::max<double>(nmax, 1)) + 0.3;
  auto x = [&](double n) { return kL + pw * (std::log2(n) - lo) / (hi - lo); };
  auto y = [&](double v) { return f.y(v, ymax); };

  std::string s = svg_head(f, title);
  std::vector<std::uint32_t> counts;
  for (const auto& p : points) counts.push_back(p.instances);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (const auto n : counts) {
    s +=
        fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ccc\"/>\n",
                    x(n), kT, kT + ph);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(n),
                     kT + ph + 18, n);
  }
  s += percent_grid(f, ymax, "engine instances (log scale)", "block hit ratio");

  const std::map<std::string, const char*> colors = {
      {"kv", "#2ca02c"}, {"round_robin", "#1f77b4"}, {"random", "#d62728"}};
  double ly = kT + 10;
  for (const auto& [name, v] : by_router) {
    const auto c = colors.find(name);
    const char* color = c != colors.end() ? c->second : "#555";
    std::string all, g1;
    for (auto* p : v) {
      all += fmt::format("{:.1f},{:.1f} ", x(p->instances), y(p->result.block_hit_ratio()));
      g1 += fmt::format("{:.1f},{:.1f} ", x(p->instances),
                        y(share(p->result.hit_blocks[TierId::kG1], p->result.blocks)));
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     all, color);
    s += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"5,4\"/>\n",
        g1, color);
    for (auto* p : v) {
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{} x{}: {:.2f}%</title>"
          "</circle>\n",
          x(p->instances), y(p->result.block_hit_ratio()), color, xml_escape(name), p->instances,
          100 * p->result.block_hit_ratio());
    }
    s += legend_entry(f, ly, color, name);
    ly += 20;
  }
  ly += 6;
  s += legend_entry(f, ly, "#555", "G1 hits only", /*dashed=*/true);
  ly += 20;
  s += legend_entry(f, ly, "#555", "all tiers");
  if (!points.empty()) {
    const auto& r = points.front().result;
    ly += 30;
    for (const std::string& line :
         {fmt::format("per instance: G1 {}", group_digits(r.capacity[TierId::kG1])),
          fmt::format("G2 {}  G3 {}", group_digits(r.capacity[TierId::kG2]),
                      group_digits(r.capacity[TierId::kG3])),
          std::string(r.remote ? "G4 shared" : "no G4"),
          fmt::format("block {} tokens", r.block_tokens)}) {
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#555\">{}</text>\n", kL + pw + 16, ly,
                       xml_escape(line));
      ly += 16;
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace kvbm::replay
