// Output of commx-bench: nccl-tests-style text rows, the JSON file and the SVG plot.
// Layer: tools/bench.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "row.h"

namespace commx::bench {

// The nccl-tests header lines (with a backend column and, for several backends, a ratio column).
void print_header(std::ostream& os, bool several_backends);
// One text line: out-of-place and in-place results of one size and backend (either may be null).
void print_row(std::ostream& os, const Row* oop, const Row* ip, bool several_backends);

std::string json_escape(const std::string& s);
// {"header": {...machine...}, "rows": [{...}, ...]}
std::string to_json(const MachineInfo& m, const std::vector<Row>& rows);
// Markdown: the machine and command, then per collective/dtype/op/placement a table with one row
// per size and, per backend, median time (us), its min-max, busbw (GB/s) and the ratio to the
// first backend.
std::string to_markdown(const MachineInfo& m, const std::vector<Row>& rows);
// Latency and busbw against size (log axes), one panel pair per collective, one line per backend
// (the median) over a band from min to max.
std::string to_svg(const MachineInfo& m, const std::vector<Row>& rows);

}  // namespace commx::bench
