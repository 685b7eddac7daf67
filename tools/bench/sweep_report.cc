// Text, JSON and markdown of the GPU sweep (see sweep_report.h). Layer: tools/bench.
#include "sweep_report.h"

#include <cstdio>
#include <sstream>

namespace commx::bench {
namespace {

// std::to_string's six decimals cut after `decimals` of them (the markdown's number style).
std::string cut(double v, int decimals) {
  std::string s = std::to_string(v);
  return s.substr(0, s.find('.') + 1 + decimals);
}

const SweepRow* nccl_row(const std::vector<SweepRow>& rows, const SweepRow& r) {
  const SweepRow* n = nullptr;
  for (const SweepRow& x : rows)
    if (x.backend == "nccl" && x.op == r.op && x.dtype == r.dtype && x.mode == r.mode &&
        x.bytes == r.bytes)
      n = &x;
  return n;
}

}  // namespace

std::string sweep_row_line(const SweepRow& r) {
  char b[512];
  std::snprintf(b, sizeof b, "%-5s %-14s %-5s %-5s %12lu %10.2f us %8.2f GB/s busbw %8.2f GB/s wrong %ld%s\n",
                r.backend.c_str(), r.op.c_str(), r.dtype.c_str(), r.mode.c_str(),
                static_cast<unsigned long>(r.bytes), r.us, r.algbw, r.busbw,
                static_cast<long>(r.wrong),
                r.error >= 0 ? (" error " + std::to_string(r.error)).c_str() : "");
  return b;
}

std::string sweep_init_line(const std::string& backend, int ranks, double create_ms,
                            double first_ms) {
  char b[256];
  std::snprintf(b, sizeof b, "init  %-5s ranks %d create %.1f ms, create + first all_reduce %.1f ms\n",
                backend.c_str(), ranks, create_ms, first_ms);
  return b;
}

std::string sweep_json(const std::string& device, const SweepOptions& o,
                       const std::vector<SweepRow>& rows) {
  std::ostringstream js;
  js << "{\"device\": \"" << device << "\", \"ranks\": " << o.ranks << ", \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    js << "  {\"backend\": \"" << r.backend << "\", \"op\": \"" << r.op << "\", \"dtype\": \""
       << r.dtype << "\", \"mode\": \"" << r.mode << "\", \"bytes\": " << r.bytes
       << ", \"time_us\": " << r.us << ", \"algbw_gbps\": " << r.algbw
       << ", \"busbw_gbps\": " << r.busbw << ", \"wrong\": " << r.wrong;
    if (r.error >= 0) js << ", \"error\": " << r.error;
    if (r.mode == "eager") js << ", \"skew_us\": " << o.skew_us << ", \"gap_us\": " << o.gap_us;
    js << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  js << "]}\n";
  return js.str();
}

std::string sweep_markdown(const std::string& device, const SweepOptions& o,
                           const std::vector<SweepRow>& rows) {
  std::ostringstream md;
  md << "Device: " << device << " x" << o.ranks << " ranks. Median of " << o.reps
     << " batches; graph = " << o.graph_ops << " ops per captured graph.\n\n";
  md << "| op | dtype | mode | bytes | cuda us | nccl us | cuda/nccl | cuda busbw GB/s | nccl busbw GB/s | wrong |\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  char buf[512];
  for (const SweepRow& r : rows) {
    if (r.backend != "cuda") continue;
    const SweepRow* n = nccl_row(rows, r);
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %lu | %.2f | %s | %s | %.1f | %s | %ld |\n",
                  r.op.c_str(), r.dtype.c_str(), r.mode.c_str(), static_cast<unsigned long>(r.bytes),
                  r.us, n ? cut(n->us, 2).c_str() : "-",
                  n ? std::to_string(r.us / n->us).substr(0, 4).c_str() : "-", r.busbw,
                  n ? cut(n->busbw, 1).c_str() : "-",
                  static_cast<long>(r.wrong + (n ? n->wrong : 0)));
    md << buf;
  }
  bool variants = false;
  for (const SweepRow& r : rows) {
    if (r.backend == "cuda" || r.backend == "nccl") continue;
    const SweepRow* n = nccl_row(rows, r);
    if (!variants) {
      md << "\n| backend | op | dtype | mode | bytes | us | nccl us | speed-up vs nccl | busbw GB/s | error | nccl error |\n";
      md << "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
      variants = true;
    }
    std::snprintf(buf, sizeof buf, "| %s | %s | %s | %s | %lu | %.2f | %s | %s | %.1f | %s | %s |\n",
                  r.backend.c_str(), r.op.c_str(), r.dtype.c_str(), r.mode.c_str(),
                  static_cast<unsigned long>(r.bytes), r.us, n ? std::to_string(n->us).c_str() : "-",
                  n ? std::to_string(n->us / r.us).substr(0, 4).c_str() : "-", r.busbw,
                  r.error >= 0 ? std::to_string(r.error).c_str() : "-",
                  n && n->error >= 0 ? std::to_string(n->error).c_str() : "-");
    md << buf;
  }
  return md.str();
}

}  // namespace commx::bench
