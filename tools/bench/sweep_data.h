// Data of the GPU sweep, all on the host: the input patterns, the reference each result is
// checked against (#wrong), and the random normal data and float64 reference of the FP8 error
// measurement. Layer: tools/bench (unit-tested without a GPU).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commx/types.h"

namespace commx::bench {

// n elements of bf16 or f32: base * (1 + (i * 7 + rank * 13) % 17). With base 1 these are small
// integers, exact in bf16; with base 1e-12 they stay finite through many in-place sums.
std::vector<uint8_t> sweep_pattern(DataType t, int64_t n, int rank, double base);
// Elements of `got` (the op's output on `rank`: all_reduce in place, the others out of place, of
// an op over n elements in all, inputs from sweep_pattern with base 1) off by more than 1e-2
// relative to the reference.
int64_t count_wrong(const std::string& op, DataType t, const uint8_t* got, int64_t n, int rank,
                    int world);

// Random normal values of `rank` for an op of n elements (splitmix64 + Box-Muller: fast enough
// to regenerate every rank's data for the reference).
std::vector<double> normal_data(int64_t n, int rank);
// Values as the op's input dtype (fp8: the E4M3 cast of the bf16/f32 value).
std::vector<uint8_t> to_input_bytes(const std::vector<double>& v, DataType t, bool fp8);
// ||got - ref|| / ||ref|| of an all_reduce of normal_data over `world` ranks, ref summed in
// float64 from every rank's input as given to the op (bf16-rounded; before an FP8 cast). `got`
// holds n elements of `t`, or of E4M3 when `fp8`.
double relative_error(DataType t, bool fp8, const uint8_t* got, int64_t n, int world);

// nccl-tests' busbw factor of the sweep's collectives.
double sweep_bus_factor(const std::string& op, int world);

}  // namespace commx::bench
