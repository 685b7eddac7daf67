// commx-bench: nccl-tests-style measurements of every commx collective, for one or several
// backends side by side, and in a CUDA build the GPU sweep (eager vs graph-captured, FP8
// variants; sweep.h) (see docs/bench.md). Layer: tools (public API only, plus the tuning
// table format from the core).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>

#include "args.h"
#include "commx/comm.h"
#include "commx/error.h"
#include "header.h"
#include "launch.h"
#include "memory.h"
#include "png.h"
#include "report.h"
#include "runner.h"
#include "sweep.h"
#include "tune.h"

using namespace commx;
using namespace commx::bench;

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) {
    std::cerr << "commx-bench: cannot write " << path << "\n";
    return false;
  }
  return true;
}

// nccl-tests' "# Using devices" lines of every rank, in rank order (meaningful on rank 0).
std::vector<std::string> gather_device_lines(Comm& control, const Device& device) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string mine = device_line(control.rank(), 0, static_cast<long>(::getpid()), host,
                                 this_device(device));
  std::vector<char> in(kDeviceLineBytes, 0), all(kDeviceLineBytes * control.size(), 0);
  std::memcpy(in.data(), mine.data(), std::min(mine.size(), kDeviceLineBytes - 1));
  control.all_gather_single(Tensor(all.data(), static_cast<int64_t>(all.size()), DataType::kUInt8),
                            Tensor(in.data(), static_cast<int64_t>(in.size()), DataType::kUInt8));
  std::vector<std::string> lines;
  for (int r = 0; r < control.size(); ++r) lines.emplace_back(all.data() + r * kDeviceLineBytes);
  return lines;
}

int run_rank(const Options& opts) {
  Options o = opts;
  o.device = resolve_device(o.device);
  CommOptions co;
  co.timeout = Timeout(static_cast<int64_t>(o.timeout_s * 1000));
  auto mem = make_memory(o.device);
  // A CPU comm for the harness itself: barriers before timing, max of times, sum of errors. It
  // is the only comm that bootstraps from the environment; the others share its store, so one
  // rendezvous store (and under mpirun one store file) serves the whole run.
  std::shared_ptr<Comm> control;
  std::string tried;
  for (const char* name : {"cpu", "gloo", "mpi"}) {
    try {
      create_backend(name);  // is it installed? (loads the plugin; a failed comm would not)
      control = Comm::create(name, Device::cpu(), "bench-control", co);
      break;
    } catch (const Error& e) {
      tried += std::string("\n  ") + name + ": " + e.what();
    }
  }
  if (!control)
    throw Error(ErrorCode::kUnsupported,
                "no CPU backend for the bench's own coordination:" + tried);
  co.store = control->store();
  for (const auto& [k, v] : o.comm_hints) co.hints[k] = v;
  const bool lead = control->rank() == 0;
  std::vector<BenchComm> comms;
  std::vector<std::string> labels;
  for (const auto& spec : o.backends) {
    try {
      comms.push_back({spec, Comm::create(spec.name, o.device, "bench-" + spec.label(), co)});
      labels.push_back(spec.label());
    } catch (const Error& e) {
      if (lead) std::cerr << "# note: backend " << spec.label() << " skipped: " << e.what() << "\n";
    }
  }
  if (comms.empty()) {
    if (lead) std::cerr << "commx-bench: none of the requested backends could run\n";
    return 3;
  }
  std::vector<std::string> devices = gather_device_lines(*control, o.device);
  if (lead) {
    std::cout << "# commx-bench: " << o.command_line << "\n";
    print_run_header(std::cout, o, devices);
    std::cout << "#\n# " << control->size() << " ranks, device " << o.device.str()
              << ", backends:";
    for (const auto& l : labels) std::cout << " " << l;
    std::cout << " (control comm: " << control->backend_name() << ")\n";
  }
  std::vector<Row> rows;
  int64_t wrong = 0;
  {
    Runner runner(o, *control, comms, *mem, lead ? &std::cout : nullptr);
    // -N: the whole sweep again, each printed; the files get the last cycle's rows.
    for (int cycle = 0; o.cycles == 0 || cycle < o.cycles; ++cycle) {
      if (lead && o.cycles != 1) std::cout << "#\n# cycle " << cycle + 1 << "\n";
      rows = runner.run();
    }
    wrong = runner.total_wrong();
  }
  if (lead) {
    double sum = 0;
    int n = 0;
    for (const auto& r : rows)
      if (r.backend == labels[0] && r.size > 0) sum += r.busbw, ++n;
    std::cout << "# Out of bounds values : " << wrong << (wrong ? " FAILED" : " OK") << "\n";
    std::cout << "# Avg bus bandwidth    : " << (n ? sum / n : 0) << " (" << labels[0] << ")\n#\n";
    MachineInfo m = collect_machine_info(o.command_line, control->size(), labels);
    bool ok = true;
    if (!o.json_path.empty()) ok = write_file(o.json_path, to_json(m, rows)) && ok;
    if (!o.svg_path.empty() && write_file(o.svg_path, to_svg(m, rows))) {
      std::string png = o.png_path.empty() ? png_path_beside(o.svg_path) : o.png_path, why;
      if (!svg_to_png(o.svg_path, png, why)) {
        std::cerr << "# note: no PNG beside " << o.svg_path << ": " << why << "\n";
        ok = ok && o.png_path.empty();  // only an asked-for PNG is an error
      }
    } else if (!o.svg_path.empty()) {
      ok = false;
    }
    if (!o.md_path.empty()) ok = write_file(o.md_path, to_markdown(m, rows)) && ok;
    if (!o.tune_path.empty()) {
      TuningTable t = tuning_from_rows(rows, o.backends[0].name);
      if (t.entries().empty())
        std::cerr << "# note: --tune: no rows of '" << o.backends[0].name
                  << ":<algorithm>' backends to pick winners from\n";
      // Rows of other world sizes and links already in the file stay.
      if (std::optional<TuningTable> old = TuningTable::load(o.tune_path)) t = merge_tuning(*old, t);
      ok = write_file(o.tune_path, t.to_text()) && ok;
    }
    if (!ok) return 4;
  }
  std::cout.flush();
  return wrong > 0 ? 1 : 0;
}

// The GPU sweep form (sweep_args.h): ranks from a launcher, else --ranks forked here.
int sweep_main(int argc, char** argv) {
  SweepOptions o;
  try {
    o = parse_sweep_args(argc, argv);
  } catch (const Error& e) {
    std::cerr << "commx-bench: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage() << "\n" << sweep_usage();
    return 0;
  }
  if (!sweep_available()) {
    std::cerr << "commx-bench: this build has no CUDA: the GPU sweep (--ranks, --ops, --modes, "
                 "...) is not available\n";
    return 2;
  }
  try {
    if (launcher_world_size() == 0)
      return spawn_local_ranks(o.ranks, [&] { return run_sweep_rank(o); });
    return run_sweep_rank(o);
  } catch (const Error& e) {
    std::cerr << "commx-bench: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (is_sweep_command(argc, argv)) return sweep_main(argc, argv);
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const Error& e) {
    std::cerr << "commx-bench: " << e.what() << "\n";
    return 2;
  }
  if (o.help) {
    std::cout << usage();
    if (sweep_available()) std::cout << "\n" << sweep_usage();
    return 0;
  }
  try {
    int launched = launcher_world_size();
    if (o.np > 0 && launched == 0) return spawn_local_ranks(o.np, [&] { return run_rank(o); });
    if (o.np > 0 && launched != o.np) {
      std::cerr << "commx-bench: --np " << o.np << " but the launcher started " << launched
                << " ranks\n";
      return 2;
    }
    return run_rank(o);
  } catch (const Error& e) {
    std::cerr << "commx-bench: " << e.what() << "\n";
    return 1;
  }
}
