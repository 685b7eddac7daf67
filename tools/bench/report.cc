// Text rows, JSON and SVG output of commx-bench (see report.h). Layer: tools/bench.
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace commx::bench {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

std::string time_str(double us) { return us < 1e4 ? fmt("%7.2f", us) : fmt("%7.0f", us); }

void half(std::ostream& os, const Row* r) {
  if (r == nullptr) {
    os << "  "
       << "    N/A"
       << "  "
       << "   N/A"
       << "  "
       << "   N/A"
       << "  "
       << "  N/A";
    return;
  }
  char b[128];
  std::string wrong = r->wrong < 0 ? "N/A" : std::to_string(r->wrong);
  std::snprintf(b, sizeof(b), "  %7s  %6.2f  %6.2f  %5s", time_str(r->time_us).c_str(), r->algbw,
                r->busbw, wrong.c_str());
  os << b;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream o;
  o.precision(6);
  o << v;
  return o.str();
}

std::string xml_escape(const std::string& in) {
  std::string o;
  for (char c : in) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '\'':
        o += "&apos;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string size_label(double bytes) {
  const char* u[] = {"B", "K", "M", "G"};
  int i = 0;
  while (i < 3 && bytes >= 1024) {
    bytes /= 1024;
    ++i;
  }
  std::ostringstream o;
  o << static_cast<long long>(std::llround(bytes)) << u[i];
  return o.str();
}

// Tick labels of the value axes, all in one style at every power of ten: 0.01, 0.1, 1, 10, 100,
// 1k, 10k, 100k, 1M (never "1e+03" beside "100").
std::string tick_label(double v) {
  const struct {
    double scale;
    const char* suffix;
  } kUnits[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& u : kUnits)
    if (v >= u.scale) return fmt("%.0f", v / u.scale) + u.suffix;
  if (v >= 1) return fmt("%.0f", v);
  int digits = std::clamp(static_cast<int>(std::ceil(-std::log10(v) - 1e-9)), 1, 12);
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

struct Point {
  double x, y, lo, hi;  // the median and the min-max spread around it
};
using Series = std::pair<std::string, std::vector<Point>>;

// One log-log panel: per series its min-max band, the median line and points.
void panel(std::ostringstream& s, double x0, double y0, double w, double h,
           const std::string& title, const std::string& ylabel, const std::vector<Series>& series) {
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const auto& [name, pts] : series)
    for (const auto& p : pts) {
      if (p.x <= 0 || p.y <= 0) continue;
      xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
      ymin = std::min({ymin, p.y, p.lo > 0 ? p.lo : p.y});
      ymax = std::max({ymax, p.y, p.hi});
    }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 - 8
    << "' text-anchor='middle' font-size='14' font-weight='bold'>" << xml_escape(title)
    << "</text>\n";
  s << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
    << "' fill='white' stroke='#333'/>\n";
  if (xmin > xmax) {
    s << "<text x='" << x0 + w / 2 << "' y='" << y0 + h / 2
      << "' text-anchor='middle' font-size='12'>no data</text>\n";
    return;
  }
  double lx0 = std::floor(std::log2(xmin)), lx1 = std::ceil(std::log2(xmax));
  if (lx1 <= lx0) lx1 = lx0 + 1;
  double ly0 = std::floor(std::log10(ymin)), ly1 = std::ceil(std::log10(ymax));
  if (ly1 <= ly0) ly1 = ly0 + 1;
  auto px = [&](double x) { return x0 + (std::log2(x) - lx0) / (lx1 - lx0) * w; };
  auto py = [&](double y) { return y0 + h - (std::log10(y) - ly0) / (ly1 - ly0) * h; };
  int xstep = std::max(1, static_cast<int>(std::ceil((lx1 - lx0) / 10)));
  for (int e = static_cast<int>(lx0); e <= static_cast<int>(lx1); e += xstep) {
    double x = px(std::ldexp(1.0, e));
    s << "<line x1='" << x << "' y1='" << y0 << "' x2='" << x << "' y2='" << y0 + h
      << "' stroke='#ddd'/>\n<text x='" << x << "' y='" << y0 + h + 16
      << "' text-anchor='middle' font-size='11'>" << size_label(std::ldexp(1.0, e)) << "</text>\n";
  }
  for (int e = static_cast<int>(ly0); e <= static_cast<int>(ly1); ++e) {
    double y = py(std::pow(10.0, e));
    s << "<line x1='" << x0 << "' y1='" << y << "' x2='" << x0 + w << "' y2='" << y
      << "' stroke='#ddd'/>\n<text x='" << x0 - 6 << "' y='" << y + 4
      << "' text-anchor='end' font-size='11'>" << tick_label(std::pow(10.0, e)) << "</text>\n";
  }
  s << "<text x='" << x0 + w / 2 << "' y='" << y0 + h + 34
    << "' text-anchor='middle' font-size='12'>message size (bytes)</text>\n";
  s << "<text transform='translate(" << x0 - 52 << "," << y0 + h / 2
    << ") rotate(-90)' text-anchor='middle' font-size='12'>" << ylabel << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % 10];
    std::vector<Point> pts;
    for (const auto& p : series[i].second)
      if (p.x > 0 && p.y > 0) pts.push_back(p);
    // The band: along the max edge left to right, back along the min edge.
    if (pts.size() > 1 || (pts.size() == 1 && pts[0].hi > pts[0].lo)) {
      std::ostringstream band;
      for (size_t j = 0; j < pts.size(); ++j)
        band << (j ? " L" : "M") << px(pts[j].x) << "," << py(std::max(pts[j].hi, pts[j].y));
      for (size_t j = pts.size(); j-- > 0;)
        band << " L" << px(pts[j].x) << ","
             << py(pts[j].lo > 0 ? std::min(pts[j].lo, pts[j].y) : pts[j].y);
      s << "<path class='spread' d='" << band.str() << " Z' fill='" << color
        << "' fill-opacity='0.2' stroke='none'/>\n";
    }
    std::ostringstream path;
    for (size_t j = 0; j < pts.size(); ++j) {
      path << (j ? " L" : "M") << px(pts[j].x) << "," << py(pts[j].y);
      s << "<circle cx='" << px(pts[j].x) << "' cy='" << py(pts[j].y) << "' r='2.5' fill='"
        << color << "'/>\n";
    }
    if (!pts.empty())
      s << "<path d='" << path.str() << "' fill='none' stroke='" << color
        << "' stroke-width='2'/>\n";
    // Legend, top-left inside the panel.
    double ly = y0 + 16 + 16 * static_cast<double>(i);
    s << "<line x1='" << x0 + 10 << "' y1='" << ly - 4 << "' x2='" << x0 + 30 << "' y2='" << ly - 4
      << "' stroke='" << color << "' stroke-width='3'/>\n<text x='" << x0 + 36 << "' y='" << ly
      << "' font-size='12'>" << xml_escape(series[i].first) << "</text>\n";
  }
}

}  // namespace

void print_header(std::ostream& os, bool several) {
  os << "#" << std::string(several ? 73 : 61, ' ')
     << "out-of-place                       in-place\n";
  os << "#" << (several ? "     backend" : "")
     << "        size         count      type   redop    root"
     << "     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
     << (several ? "   ratio" : "") << "\n";
  os << "#" << (several ? "            " : "")
     << "         (B)    (elements)                        "
     << "       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
     << (several ? "         " : "") << "\n";
}

void print_row(std::ostream& os, const Row* oop, const Row* ip, bool several) {
  const Row* r = oop ? oop : ip;
  if (r == nullptr) return;
  char b[256];
  if (several) {
    std::snprintf(b, sizeof(b), " %12s", r->backend.c_str());
    os << b;
  }
  std::snprintf(b, sizeof(b), " %12llu  %12lld  %8s  %6s  %6d",
                static_cast<unsigned long long>(r->size), static_cast<long long>(r->count),
                r->dtype.c_str(), r->op.c_str(), r->root);
  os << b;
  half(os, oop);
  half(os, ip);
  if (several) {
    if (r->ratio > 0)
      os << fmt("  %6.2fx", r->ratio);
    else
      os << "       -";
  }
  os << "\n";
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '<':
        o += "\\u003c";
        break;  // also safe inside SVG text
      case '>':
        o += "\\u003e";
        break;
      case '&':
        o += "\\u0026";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o;
}

std::string to_json(const MachineInfo& m, const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "{\n\"header\": {\"tool\": \"commx-bench\", \"hostname\": \"" << json_escape(m.hostname)
    << "\", \"cpu_model\": \"" << json_escape(m.cpu_model) << "\", \"cores\": " << m.cores
    << ", \"gpus\": [";
  for (size_t i = 0; i < m.gpus.size(); ++i)
    o << (i ? ", " : "") << '"' << json_escape(m.gpus[i]) << '"';
  o << "], \"date\": \"" << m.date << "\", \"command_line\": \"" << json_escape(m.command_line)
    << "\", \"world_size\": " << m.world_size << ", \"backends\": [";
  for (size_t i = 0; i < m.backends.size(); ++i)
    o << (i ? ", " : "") << '"' << json_escape(m.backends[i]) << '"';
  o << "]},\n\"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    o << (i ? ",\n" : "\n") << "{\"collective\": \"" << r.collective << "\", \"backend\": \""
      << json_escape(r.backend) << "\", \"world_size\": " << r.world_size << ", \"link\": \""
      << json_escape(r.link) << "\", \"dtype\": \""
      << r.dtype << "\", \"op\": \"" << r.op << "\", \"root\": " << r.root
      << ", \"size\": " << r.size << ", \"count\": " << r.count
      << ", \"time_us\": " << num(r.time_us) << ", \"mean_us\": " << num(r.mean_us)
      << ", \"min_us\": " << num(r.min_us) << ", \"max_us\": " << num(r.max_us)
      << ", \"algbw\": " << num(r.algbw) << ", \"busbw\": " << num(r.busbw)
      << ", \"wrong\": " << r.wrong << ", \"in_place\": " << (r.in_place ? "true" : "false")
      << ", \"graph\": " << (r.graph ? "true" : "false") << ", \"ratio\": " << num(r.ratio) << "}";
  }
  o << "\n]\n}\n";
  return o.str();
}

std::string to_markdown(const MachineInfo& m, const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "Machine: " << m.hostname << ", " << m.cpu_model << ", " << m.cores << " cores";
  for (const auto& g : m.gpus) o << ", " << g;
  o << "; " << m.world_size << " ranks; " << m.date << "\n\nCommand: `" << m.command_line << "`\n";
  // Group rows by (collective, dtype, op, in_place) in first-seen order.
  std::vector<std::string> groups;
  auto key = [](const Row& r) {
    return r.collective + "|" + r.dtype + "|" + r.op + "|" +
           (r.in_place ? "in-place" : "out-of-place");
  };
  for (const auto& r : rows)
    if (std::find(groups.begin(), groups.end(), key(r)) == groups.end()) groups.push_back(key(r));
  for (const auto& g : groups) {
    std::vector<std::string> backends;
    std::vector<uint64_t> sizes;
    for (const auto& r : rows) {
      if (key(r) != g) continue;
      if (std::find(backends.begin(), backends.end(), r.backend) == backends.end())
        backends.push_back(r.backend);
      if (std::find(sizes.begin(), sizes.end(), r.size) == sizes.end()) sizes.push_back(r.size);
    }
    std::string title = g;
    std::replace(title.begin(), title.end(), '|', ' ');
    o << "\n### " << title << "\n\n| size (B) |";
    for (size_t b = 0; b < backends.size(); ++b) {
      o << " " << backends[b] << " time (us) | " << backends[b] << " min-max (us) | "
        << backends[b] << " busbw (GB/s) |";
      if (b > 0) o << " " << backends[b] << " / " << backends[0] << " |";
    }
    o << " #wrong |\n|---:|";
    for (size_t b = 0; b < backends.size(); ++b) o << (b > 0 ? "---:|---:|---:|---:|" : "---:|---:|---:|");
    o << "---:|\n";
    for (uint64_t s : sizes) {
      o << "| " << s << " |";
      int64_t wrong = 0;
      bool checked = false;
      for (size_t b = 0; b < backends.size(); ++b) {
        const Row* hit = nullptr;
        for (const auto& r : rows)
          if (key(r) == g && r.backend == backends[b] && r.size == s) hit = &r;
        if (hit) {
          o << " " << fmt("%.2f", hit->time_us) << " | " << fmt("%.2f", hit->min_us) << "-"
            << fmt("%.2f", hit->max_us) << " | " << fmt("%.3f", hit->busbw) << " |";
          if (b > 0)
            o << " " << (hit->ratio > 0 ? fmt("%.2fx", hit->ratio) : std::string("-")) << " |";
          if (hit->wrong >= 0) wrong += hit->wrong, checked = true;
        } else {
          o << " - | - | - |" << (b > 0 ? " - |" : "");
        }
      }
      o << " " << (checked ? std::to_string(wrong) : std::string("N/A")) << " |\n";
    }
  }
  return o.str();
}

std::string to_svg(const MachineInfo& m, const std::vector<Row>& rows) {
  // One panel pair per collective (its first dtype/op; out-of-place rows where they exist).
  std::vector<std::string> colls;
  for (const auto& r : rows)
    if (r.size > 0 && std::find(colls.begin(), colls.end(), r.collective) == colls.end())
      colls.push_back(r.collective);
  const double pw = 460, ph = 300, left = 80, top = 70, gap_x = 110, gap_y = 100;
  double width = left + 2 * pw + gap_x + 30;
  double height = top + std::max<size_t>(colls.size(), 1) * (ph + gap_y);
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='" << left << "' y='24' font-size='16' font-weight='bold'>commx-bench, "
    << m.world_size << " ranks, " << xml_escape(m.hostname) << " (" << xml_escape(m.cpu_model)
    << ")</text>\n<text x='" << left << "' y='44' font-size='11' fill='#444'>"
    << xml_escape(m.command_line) << " -- " << m.date
    << "</text>\n<text x='" << left << "' y='60' font-size='11' fill='#444'>lines: median per "
       "size; bands: min to max over the timed batches</text>\n";
  for (size_t ci = 0; ci < colls.size(); ++ci) {
    std::string dtype, op;
    bool have_oop = false;
    for (const auto& r : rows)
      if (r.collective == colls[ci]) {
        if (dtype.empty()) dtype = r.dtype, op = r.op;
        have_oop = have_oop || !r.in_place;
      }
    std::vector<std::string> backends;
    for (const auto& r : rows)
      if (r.collective == colls[ci] &&
          std::find(backends.begin(), backends.end(), r.backend) == backends.end())
        backends.push_back(r.backend);
    std::vector<Series> lat, bw;
    for (const auto& b : backends) {
      std::vector<Point> l, w;
      for (const auto& r : rows)
        if (r.collective == colls[ci] && r.backend == b && r.dtype == dtype && r.op == op &&
            r.in_place == !have_oop && r.size > 0) {
          double x = static_cast<double>(r.size);
          l.push_back({x, r.time_us, r.min_us, r.max_us});
          // Bandwidth scales with 1/time: the slowest batch gives the lowest busbw.
          auto bw_at = [&r](double t) { return t > 0 ? r.busbw * r.time_us / t : 0.0; };
          w.push_back({x, r.busbw, bw_at(r.max_us), bw_at(r.min_us)});
        }
      lat.emplace_back(b, l);
      bw.emplace_back(b, w);
    }
    std::string what = colls[ci] + " (" + dtype + (op == "none" ? "" : ", " + op) +
                       (have_oop ? ", out-of-place" : ", in-place") + ")";
    double y0 = top + 20 + ci * (ph + gap_y);
    panel(s, left, y0, pw, ph, what + ": latency", "time per op (us)", lat);
    panel(s, left + pw + gap_x, y0, pw, ph, what + ": bus bandwidth", "busbw (GB/s)", bw);
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace commx::bench
