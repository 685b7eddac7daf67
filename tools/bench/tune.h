// Turns measured rows into a tuning table: for each collective and size, which algorithm of the
// first backend ran fastest ("cpu:ring" vs "cpu:one_shot" ...), merged into size ranges.
// Layer: tools/bench (the table format and loader live in src/core/tuning.h).
#pragma once

#include <vector>

#include "core/tuning.h"
#include "row.h"

namespace commx::bench {

// Only rows of backend `name` whose label carries an algorithm ("name:algo") take part; per
// collective the first dtype/op seen and out-of-place rows (in-place where there are none).
// Size k's winner covers (size k-1, size k]; the first starts at 0, the last extends to max.
// Entries carry the rows' world size and link (Row::link: "shm", "tcp", "nvlink", ...).
TuningTable tuning_from_rows(const std::vector<Row>& rows, const std::string& name);

// `existing` with `measured` laid over it: entries of a (collective, world size, link) that
// `measured` covers are replaced, the others kept, so runs at several world sizes and over
// several links fill one file.
TuningTable merge_tuning(const TuningTable& existing, const TuningTable& measured);

}  // namespace commx::bench
