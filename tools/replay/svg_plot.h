// replay/svg_plot.h: the parts kvbm-replay's plots share (report.cpp's
// capacity sweep, cluster_report.cpp's cluster sweep): one frame geometry,
// the document's head, the percentage grid with its frame and axis titles,
// and a legend entry. Each plot draws its own x axis and series.
//
// Thread-safety: plain functions over values.

#pragma once

#include <string>

#include <fmt/format.h>

#include "replay/report.h"

namespace kvbm::replay {

/// A plot area: the document's size and the margins around the plot.
struct PlotFrame {
  double width = 760, height = 480, left = 80, right = 190, top = 50, bottom = 60;
  [[nodiscard]] double plot_width() const noexcept { return width - left - right; }
  [[nodiscard]] double plot_height() const noexcept { return height - top - bottom; }
  /// The y coordinate of ratio `v` on an axis from 0 to `ymax`.
  [[nodiscard]] double y(double v, double ymax) const noexcept {
    return top + plot_height() * (1.0 - v / ymax);
  }
};

/// Returns the XML head, the <svg> element, a white background and `title`.
inline std::string svg_head(const PlotFrame& f, const std::string& title) {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"15\" font-weight=\"bold\">{3}</text>\n",
      f.width, f.height, f.left, xml_escape(title));
}

/// Returns the y grid (0 to `ymax` in tenths, every other one labelled as a
/// percentage), the frame and the two axis titles.
inline std::string percent_grid(const PlotFrame& f, double ymax, const std::string& x_title,
                                const std::string& y_title) {
  std::string s;
  for (int i = 0; i <= 10; ++i) {
    const double v = ymax * i / 10.0;
    s += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#eee\"/>\n",
                     f.left, f.y(v, ymax), f.left + f.plot_width(), f.y(v, ymax));
    if (i % 2 == 0) {
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.0f}%</text>\n",
                       f.left - 8, f.y(v, ymax) + 4, v * 100);
    }
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
      f.left, f.top, f.plot_width(), f.plot_height());
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                   f.left + f.plot_width() / 2, f.height - 18, xml_escape(x_title));
  s += fmt::format(
      "<text transform=\"translate(20 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      f.top + f.plot_height() / 2, xml_escape(y_title));
  return s;
}

/// Returns a legend entry at height `y` right of the plot: a line (dashed
/// when asked) in `color`, then `name`.
inline std::string legend_entry(const PlotFrame& f, double y, const std::string& color,
                                const std::string& name, bool dashed = false) {
  const double x = f.left + f.plot_width();
  return fmt::format(
      "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
      "stroke-width=\"{4}\"{5}/>\n<text x=\"{6}\" y=\"{7:.1f}\">{8}</text>\n",
      x + 16, y, x + 40, color, dashed ? "1.5" : "2", dashed ? " stroke-dasharray=\"5,4\"" : "",
      x + 46, y + 4, xml_escape(name));
}

}  // namespace kvbm::replay
