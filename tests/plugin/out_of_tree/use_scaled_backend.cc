// Loads the out-of-tree backend as a plugin (COMMX_PLUGIN_DIR) and checks its all_reduce:
// exit 0 when bf16 and f32 tensors come back scaled by SCALED_BACKEND_FACTOR=3. Layer: tests.
#include <commx/comm.h>
#include <commx/error.h>
#include <commx/numeric.h>
#include <commx/store.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace commx;
  CommOptions o;
  o.store = make_hash_store();
  o.rank = 0;
  o.size = 1;
  auto comm = Comm::create("scaled", Device::cpu(), "out-of-tree", o);
  std::vector<float> f = {1, -2, 0.5f, 7};
  comm->all_reduce(make_tensor(f.data(), 4), ReduceOp::SUM);
  std::vector<uint16_t> b = {float_to_bf16(1), float_to_bf16(-4)};
  comm->all_reduce(Tensor(b.data(), 2, DataType::kBFloat16), ReduceOp::SUM);
  const bool ok = f == std::vector<float>{3, -6, 1.5f, 21} && bf16_to_float(b[0]) == 3 &&
                  bf16_to_float(b[1]) == -12;
  bool refused = false;
  try {
    int32_t i[1] = {1};
    comm->all_reduce(make_tensor(i, 1), ReduceOp::SUM);
  } catch (const Error& e) {
    refused = e.code() == ErrorCode::kUnsupported;
  }
  comm->finalize();
  std::printf("scaled backend: results %s, unclaimed op %s\n", ok ? "ok" : "WRONG",
              refused ? "refused" : "NOT refused");
  return ok && refused ? 0 : 1;
}
