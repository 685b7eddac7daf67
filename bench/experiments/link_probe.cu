// NVLink probe of two GPUs in one process: the rate at which a peer's memory takes each store
// flavour (weak, volatile, relaxed.sys, streaming), pulls and cudaMemcpyPeer, one direction and
// both at once; how long an LL128 line stream takes to reach its reader; and the FP8 all_reduce's
// skeleton at 2 ranks without its codec (P1 -> P2 -> P3 line streams, with and without the HBM
// traffic of the data), the floor the FP8 kernel is measured against.
// Build and run: nvcc -O3 -arch=sm_90 -std=c++17 bench/experiments/link_probe.cu -o link_probe
// && ./link_probe (results: bench/results/h200x2_2026-11-28/0800_fp8_two_rank_kernel/probe).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cstring>
#include <algorithm>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)

template <int kMode>
__global__ void __launch_bounds__(512) write_peer(char* dst, int64_t bytes, uint64_t v) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * 16, w = int64_t(blockIdx.x) * 16 + (threadIdx.x >> 5);
  for (int64_t off = w * 512; off < bytes; off += warps * 512) {
    char* p = dst + off + 16 * lane;
    if (kMode == 0) asm volatile("st.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(v), "l"(v + 1) : "memory");
    if (kMode == 1) asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(v), "l"(v + 1) : "memory");
    if (kMode == 2) asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(v), "l"(v + 1) : "memory");
    if (kMode == 3) asm volatile("st.global.cs.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(v), "l"(v + 1) : "memory");
  }
}

// Pull: reads the peer's memory (sum kept so the loads stay).
__global__ void __launch_bounds__(512) read_peer(const char* src, int64_t bytes, uint64_t* sink) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * 16, w = int64_t(blockIdx.x) * 16 + (threadIdx.x >> 5);
  uint64_t acc = 0;
  for (int64_t off = w * 512; off < bytes; off += warps * 512) {
    uint64_t a, b;
    asm volatile("ld.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(src + off + 16 * lane));
    acc += a ^ b;
  }
  if (acc == 0x1234567) *sink = acc;
}

// LL128 stream: each warp writes `lines` lines (flag in the last 8 bytes) at its place in the
// peer's buffer, 4 lines a warp store, then waits until its twin's lines have landed in its own.
// stamps[w] = ns from kernel entry to all lines received (warp 0 of every block).
template <bool kVolatile>
__global__ void __launch_bounds__(512) ll128_exchange(char* peer, const char* mine, int lines,
                                                      uint64_t flag, unsigned long long* stamps) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const int lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
  const int64_t w = int64_t(blockIdx.x) * 16 + (threadIdx.x >> 5);
  const int64_t base = w * int64_t(lines) * 128;
  for (int l = 0; l < lines; l += 4) {
    if (l + g < lines) {
      char* p = peer + base + int64_t(l + g) * 128 + 16 * j;
      const uint64_t w0 = flag ^ 0x55, w1 = j == 7 ? flag : flag ^ 0x77;
      if (kVolatile) asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
      else asm volatile("st.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
    }
  }
  for (int l = 0; l < lines; l += 4) {
    for (int spin = 0;; ++spin) {
      uint64_t a = 0, b = flag;
      if (l + g < lines)
        asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(mine + base + int64_t(l + g) * 128 + 16 * j));
      if (!__any_sync(0xffffffffu, j == 7 && b != flag)) break;
      if (spin > (1 << 26)) { if (lane == 0) printf("timeout\n"); return; }
    }
  }
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if ((threadIdx.x & 511) == 0) stamps[blockIdx.x] = t1 - t0;
}


// The FP8 all_reduce's skeleton at 2 ranks without its codec: per warp, P1 sends U units of
// 5 lines each; P2 takes each twin's P1 unit as it lands and sends a unit back; P3 takes the
// twin's P2 units. kHbm: each unit also reads 1 KiB of input and writes 1 KiB of output.
template <bool kHbm>
__global__ void __launch_bounds__(512) ll128_chain(char* peer, const char* mine, int units,
                                                   uint64_t flag, const char* in, char* out,
                                                   unsigned long long* stamps) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const int lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
  const int64_t w = int64_t(blockIdx.x) * 16 + (threadIdx.x >> 5);
  const int64_t warps = int64_t(gridDim.x) * 16;
  const int lines = 5 * units;
  const int64_t base1 = w * int64_t(lines) * 128, base2 = (warps + w) * int64_t(lines) * 128;
  uint64_t acc = 0;
  auto send_unit = [&](int64_t base, int t, uint64_t x) {
    for (int l = 0; l < 5; l += 4)
      if (l + g < 5) {
        char* p = peer + base + int64_t(5 * t + l + g) * 128 + 16 * j;
        const uint64_t w0 = x, w1 = j == 7 ? flag : x;
        asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(w0), "l"(w1) : "memory");
      }
  };
  auto recv_unit = [&](int64_t base, int t) -> uint64_t {
    uint64_t s = 0;
    for (int l = 0; l < 5; l += 4) {
      for (int spin = 0;; ++spin) {
        uint64_t a = 0, b = flag;
        if (l + g < 5)
          asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(mine + base + int64_t(5 * t + l + g) * 128 + 16 * j));
        if (!__any_sync(0xffffffffu, j == 7 && b != flag)) { s += a; break; }
        if (spin > (1 << 26)) { if (lane == 0) printf("timeout\n"); return 0; }
      }
    }
    return s;
  };
  auto hbm_in = [&](int64_t t, int ph) -> uint64_t {
    if (!kHbm) return 0;
    const uint4 v = *reinterpret_cast<const uint4*>(in + ((ph * units + t) * warps + w) * 1024 + 32 * lane);
    const uint4 v2 = *reinterpret_cast<const uint4*>(in + ((ph * units + t) * warps + w) * 1024 + 32 * lane + 16);
    return uint64_t(v.x ^ v2.y) + v.z + v2.w;
  };
  auto hbm_out = [&](int64_t t, int ph, uint64_t x) {
    if (!kHbm) return;
    uint4 v = make_uint4(uint32_t(x), uint32_t(x >> 32), 1, 2);
    *reinterpret_cast<uint4*>(out + ((ph * units + t) * warps + w) * 1024 + 32 * lane) = v;
    *reinterpret_cast<uint4*>(out + ((ph * units + t) * warps + w) * 1024 + 32 * lane + 16) = v;
  };
  for (int t = 0; t < units; ++t) send_unit(base1, t, hbm_in(t, 0) + flag);
  for (int t = 0; t < units; ++t) {
    const uint64_t own = hbm_in(t, 1);
    const uint64_t x = recv_unit(base1, t) + own;
    send_unit(base2, t, x);
    hbm_out(t, 0, x);
  }
  for (int t = 0; t < units; ++t) acc += recv_unit(base2, t), hbm_out(t, 1, acc);
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if ((threadIdx.x & 511) == 0) stamps[blockIdx.x] = t1 - t0;
  if (acc == 0x12345) stamps[4095] = acc;
}

int main(int argc, char** argv) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) { printf("needs 2 GPUs\n"); return 0; }
  const int64_t cap = 64ll << 20;
  char* buf[2]; cudaStream_t st[2]; cudaEvent_t e0[2], e1[2]; unsigned long long* stamps[2]; uint64_t* sink[2];
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaMalloc(&buf[d], cap)); CK(cudaMemset(buf[d], 0, cap));
    CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[d])); CK(cudaEventCreate(&e1[d]));
    CK(cudaMalloc(&stamps[d], 4096 * 8)); CK(cudaMalloc(&sink[d], 8));
  }
  const int64_t sizes[] = {1 << 20, 1415 << 10, 4 << 20, 4505 << 10, 16 << 20, 64 << 20};
  const char* names[] = {"st.weak", "st.volatile", "st.relaxed.sys", "st.cs", "ld.pull", "memcpyPeer"};
  auto launch = [&](int mode, int d, int64_t bytes, int grid) {
    char* dst = buf[1 - d];
    switch (mode) {
      case 0: write_peer<0><<<grid, 512, 0, st[d]>>>(dst, bytes, 1); break;
      case 1: write_peer<1><<<grid, 512, 0, st[d]>>>(dst, bytes, 1); break;
      case 2: write_peer<2><<<grid, 512, 0, st[d]>>>(dst, bytes, 1); break;
      case 3: write_peer<3><<<grid, 512, 0, st[d]>>>(dst, bytes, 1); break;
      case 4: read_peer<<<grid, 512, 0, st[d]>>>(dst, bytes, sink[d]); break;
      case 5: CK(cudaMemcpyPeerAsync(dst, 1 - d, buf[d], d, bytes, st[d])); break;
    }
  };
  const int reps = 50;
  printf("SMs %d\n", sms);
  printf("%-15s %5s %9s %12s %12s\n", "mode", "grid", "bytes", "one-dir GB/s", "both GB/s");
  for (int grid : {sms, sms / 2}) for (int mode = 0; mode < 6; ++mode) for (int64_t bytes : sizes) {
    if (mode == 5 && grid != sms) continue;
    double res[2];
    for (int both = 0; both < 2; ++both) {
      for (int d = 0; d < 1 + both; ++d) { CK(cudaSetDevice(d)); for (int i = 0; i < 5; ++i) launch(mode, d, bytes, grid); }
      for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
      for (int d = 0; d < 1 + both; ++d) { CK(cudaSetDevice(d)); CK(cudaEventRecord(e0[d], st[d])); }
      for (int i = 0; i < reps; ++i)
        for (int d = 0; d < 1 + both; ++d) { CK(cudaSetDevice(d)); launch(mode, d, bytes, grid); }
      for (int d = 0; d < 1 + both; ++d) { CK(cudaSetDevice(d)); CK(cudaEventRecord(e1[d], st[d])); }
      float ms = 0;
      for (int d = 0; d < 1 + both; ++d) { CK(cudaSetDevice(d)); CK(cudaEventSynchronize(e1[d])); float m; CK(cudaEventElapsedTime(&m, e0[d], e1[d])); ms = m > ms ? m : ms; }
      res[both] = double(bytes) * reps / (ms * 1e-3) / 1e9;
    }
    printf("%-15s %5d %9lld %12.1f %12.1f\n", names[mode], grid, (long long)bytes, res[0], res[1]);
  }
  // Both GPUs' ops (one() launches one on each) timed back to back: ms for `reps` of them (the
  // slower GPU's), and GPU 0's per-block stamps sorted into h.
  auto timed_exchange = [&](auto&& one, int grid, std::vector<unsigned long long>& h) {
    for (int i = 0; i < 5; ++i) one();
    for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
    for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaEventRecord(e0[d], st[d])); }
    for (int i = 0; i < reps; ++i) one();
    float ms = 0;
    for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaEventRecord(e1[d], st[d])); }
    for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaEventSynchronize(e1[d])); float m; CK(cudaEventElapsedTime(&m, e0[d], e1[d])); ms = m > ms ? m : ms; }
    h.resize(grid);
    CK(cudaSetDevice(0)); CK(cudaMemcpy(h.data(), stamps[0], grid * 8, cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    return ms;
  };
  // LL128 exchange: both GPUs send a stream per warp and wait for the twin's (one op a launch,
  // the flag changes every op).
  printf("\nLL128 exchange (both directions): lines/warp, payload bytes a direction, us per op, "
         "warp-0 finish ns min/median/max\n");
  for (int vol = 1; vol >= 0; --vol) for (int lines : {5, 10, 20, 40, 80}) {
    const int grid = sms;
    const int64_t bytes = int64_t(grid) * 16 * lines * 128;
    uint64_t flag = 0x1000 + lines * 1000 + vol * 100000;
    auto one = [&]() {
      ++flag;
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        if (vol) ll128_exchange<true><<<grid, 512, 0, st[d]>>>(buf[1 - d], buf[d], lines, flag, stamps[d]);
        else ll128_exchange<false><<<grid, 512, 0, st[d]>>>(buf[1 - d], buf[d], lines, flag, stamps[d]);
      }
    };
    std::vector<unsigned long long> h;
    const float ms = timed_exchange(one, grid, h);
    printf("%s lines %3d  bytes %9lld  %8.2f us  %llu / %llu / %llu ns  (%.1f GB/s payload-lines)\n",
           vol ? "volatile" : "weak    ", lines, (long long)bytes, ms * 1e3 / reps, h[0], h[grid / 2], h[grid - 1],
           double(bytes) / (ms * 1e-3 / reps) / 1e9);
  }

  printf("\nChain P1 -> P2 -> P3 (both directions), units/warp, us per op, warp-0 finish ns min/median/max\n");
  char *in[2], *out[2];
  for (int d = 0; d < 2; ++d) { CK(cudaSetDevice(d)); CK(cudaMalloc(&in[d], 64ll << 20)); CK(cudaMalloc(&out[d], 64ll << 20)); CK(cudaMemset(in[d], 1, 64ll << 20)); }
  for (int hbm = 0; hbm < 2; ++hbm) for (int units : {1, 2, 4, 8}) {
    const int grid = sms;
    uint64_t flag = 0x900000 + units * 1000 + hbm * 100000;
    auto one = [&]() {
      ++flag;
      for (int d = 0; d < 2; ++d) {
        CK(cudaSetDevice(d));
        if (hbm) ll128_chain<true><<<grid, 512, 0, st[d]>>>(buf[1 - d], buf[d], units, flag, in[d], out[d], stamps[d]);
        else ll128_chain<false><<<grid, 512, 0, st[d]>>>(buf[1 - d], buf[d], units, flag, in[d], out[d], stamps[d]);
      }
    };
    std::vector<unsigned long long> h;
    const float ms = timed_exchange(one, grid, h);
    const double bytes = 2.0 * grid * 16 * units * 5 * 128;
    printf("%s units %d  lines-bytes a direction %9.0f  %8.2f us  %llu / %llu / %llu ns  (%.1f GB/s)\n", hbm ? "hbm " : "link", units, bytes,
           ms * 1e3 / reps, h[0], h[grid / 2], h[grid - 1], bytes / (ms * 1e-3 / reps) / 1e9);
  }
  return 0;
}
