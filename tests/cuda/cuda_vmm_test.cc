// GPU tests of the VMM peer memory of the cuda backend (peer_mem=vmm: cuMemCreate allocations
// exported as POSIX fds, passed over Unix sockets): PeerMemory itself (zeroed buffers, every
// rank writing into every peer's buffer, the allocation really being VMM and not cudaMalloc,
// ranks as threads, create/close loops without leaks, ranks disagreeing on the path), then the
// cuda backend's correctness coverage with the peer_mem hint (every all_reduce dtype/op/size,
// every collective, 3-4 ranks sharing GPUs, graph capture and replay, two comms with different
// paths, comms destroyed and recreated, the hierarchical path). Ranks are processes forked before
// any CUDA call. Skips without a GPU; the option parsing tests run everywhere.
// Layer: tests (label gpu).
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "cuda/collective_checks.h"
#include "cuda/peer_memory.h"
#include "cuda/vmm_memory.h"

namespace commx::testing {
namespace {

using cuda::PeerMemKind;
using cuda::PeerMemory;

const Hints kVmm = {{"peer_mem", "vmm"}};

// A pointer attribute through the driver API (fetched at run time, like the backend does).
// With `ok`, a failing query sets *ok = false instead of failing the rank.
uint64_t pointer_attribute(const void* p, CUpointer_attribute a, bool* ok = nullptr) {
  using Fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static Fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &f, 12000, cudaEnableDefault, &q);
    return reinterpret_cast<Fn>(f);
  }();
  RANK_CHECK(fn != nullptr, "no cuPointerGetAttribute entry point");
  uint64_t v = 0;
  CUresult r = fn(&v, a, reinterpret_cast<CUdeviceptr>(p));
  if (ok)
    *ok = r == CUDA_SUCCESS;
  else
    RANK_CHECK(r == CUDA_SUCCESS, "cuPointerGetAttribute failed: " + std::to_string(r));
  return v;
}

void store_barrier(Store& s, const std::string& key, int rank, int world) {
  s.set_str(key + "/" + std::to_string(rank), "1");
  for (int r = 0; r < world; ++r) s.get(key + "/" + std::to_string(r));
}

size_t free_bytes() {
  size_t f = 0, t = 0;
  CU(cudaMemGetInfo(&f, &t));
  return f;
}

// Every rank writes (rank + 1) into its slot of every rank's buffer; then each checks its own.
void check_peer_memory(PeerMemory& pm, Store& store, int rank, int world, uint64_t bytes,
                       const std::string& tag) {
  RANK_CHECK(pm.problem().empty(), pm.problem());
  RANK_CHECK(pm.bytes() == bytes, tag + ": bytes()");
  auto own = from_dev(pm.base(rank), bytes);
  for (size_t i = 0; i < own.size(); ++i)
    RANK_CHECK(own[i] == 0, tag + ": buffer not zeroed at byte " + std::to_string(i));
  store_barrier(store, tag + "/checked", rank, world);  // nobody writes before all have looked
  const uint64_t slot = bytes / world;
  for (int p = 0; p < world; ++p) {
    RANK_CHECK(pm.base(p) != nullptr, tag + ": no mapping of rank " + std::to_string(p));
    CU(cudaMemset(pm.base(p) + slot * rank, rank + 1, slot));
  }
  CU(cudaDeviceSynchronize());
  store_barrier(store, tag + "/written", rank, world);
  own = from_dev(pm.base(rank), bytes);
  for (int r = 0; r < world; ++r)
    for (uint64_t i = slot * r; i < slot * (r + 1); i += 4099)
      RANK_CHECK(own[i] == r + 1, tag + ": byte " + std::to_string(i) + " is " +
                                      std::to_string(own[i]) + ", expected rank " +
                                      std::to_string(r) + "'s write");
  store_barrier(store, tag + "/read", rank, world);
}

// --- option parsing (no GPU needed) ---

TEST(CudaVmmOptions, EnvAndHintChooseThePath) {
  unsetenv("COMMX_CUDA_PEER_MEM");
  EXPECT_EQ(cuda::resolve_peer_mem_kind({}, ""), PeerMemKind::kIpc);
  EXPECT_EQ(cuda::resolve_peer_mem_kind(kVmm, ""), PeerMemKind::kVmm);
  setenv("COMMX_CUDA_PEER_MEM", "vmm", 1);
  EXPECT_EQ(cuda::resolve_peer_mem_kind({}, ""), PeerMemKind::kVmm);
  EXPECT_EQ(cuda::resolve_peer_mem_kind({{"peer_mem", "ipc"}}, ""), PeerMemKind::kIpc);
  setenv("COMMX_CUDA_PEER_MEM", "ipc", 1);
  EXPECT_EQ(cuda::resolve_peer_mem_kind({}, ""), PeerMemKind::kIpc);
  setenv("COMMX_CUDA_PEER_MEM", "fd", 1);
  try {
    cuda::resolve_peer_mem_kind({}, "[ctx] ");
    ADD_FAILURE() << "no error for COMMX_CUDA_PEER_MEM=fd";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("COMMX_CUDA_PEER_MEM='fd'"), std::string::npos)
        << e.what();
  }
  unsetenv("COMMX_CUDA_PEER_MEM");
  try {
    cuda::resolve_peer_mem_kind({{"peer_mem", "VMM"}}, "");
    ADD_FAILURE() << "no error for peer_mem=VMM";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("peer_mem='VMM'"), std::string::npos) << e.what();
  }
}

TEST(CudaVmmOptions, MissingSupportIsExplained) {
  // In a child (the parent stays CUDA-free for fork): without a GPU or driver the reason says so;
  // with one, an H100/H200 supports VMM with POSIX fds (an empty reason).
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string why = cuda::vmm_unsupported_reason(0);
    (void)!write(p[1], why.data(), why.size());
    _exit(0);
  }
  close(p[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof(buf))) > 0) why.append(buf, n);
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (gpu_count() == 0)
    EXPECT_FALSE(why.empty()) << "no GPU, yet VMM looks supported";
  else
    EXPECT_EQ(why, "") << "this GPU should support VMM with POSIX fds";
  std::cout << "vmm_unsupported_reason(0): '" << why << "'\n";
}

// --- PeerMemory directly ---

TEST(CudaVmmPeerMemory, MapsZeroedVmmBuffersOfEveryRank) {
  REQUIRE_GPUS(1);
  for (int world : {2, 3}) {
    std::string err = run_ranks(world, two_gpus(), [](RankCtx& ctx) {
      CU(cudaSetDevice(ctx.device));
      const uint64_t bytes = (3u << 20) + 4096;  // not a multiple of the VMM granularity
      for (PeerMemKind kind : {PeerMemKind::kVmm, PeerMemKind::kIpc}) {
        const std::string tag = cuda::peer_mem_name(kind);
        auto store = make_prefix_store(tag, ctx.store);
        auto pm =
            PeerMemory::create(*store, ctx.rank, ctx.world, ctx.device, bytes, "[test] ", kind);
        RANK_CHECK(pm->kind() == kind, tag);
        // The VMM path must not be cudaMalloc memory under another name (and the reverse).
        const bool vmm = kind == PeerMemKind::kVmm;
        for (int r = 0; r < ctx.world; ++r) {
          uint64_t ipc =
              pointer_attribute(pm->base(r), CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE);
          if (r == ctx.rank || vmm)
            RANK_CHECK((ipc != 0) == !vmm, tag + ": legacy-IPC-capable is " + std::to_string(ipc) +
                                               " for rank " + std::to_string(r));
        }
        if (vmm) {
          bool ok = false;  // (a driver that cannot answer this one is not a failure)
          uint64_t types =
              pointer_attribute(pm->base(ctx.rank), CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, &ok);
          RANK_CHECK(!ok || (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     "not exportable as an fd");
        }
        check_peer_memory(*pm, *store, ctx.rank, ctx.world, bytes, tag);
        pm->close();
        pm->close();  // idempotent
        RANK_CHECK(pm->base(ctx.rank) == nullptr, "close() left the own buffer");
      }
    });
    EXPECT_EQ(err, "") << "world " << world;
  }
}

TEST(CudaVmmPeerMemory, RanksAsThreadsOfOneProcess) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(1, 1, [](RankCtx&) {
    const int world = 2, gpus = two_gpus();
    auto store = make_hash_store();
    store->set_timeout(std::chrono::seconds(60));
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        try {
          CU(cudaSetDevice(r % gpus));
          const uint64_t bytes = 2u << 20;
          auto pm =
              PeerMemory::create(*store, r, world, r % gpus, bytes, "[thread] ", PeerMemKind::kVmm);
          check_peer_memory(*pm, *store, r, world, bytes, "threads");
          store_barrier(*store, "closing", r, world);
          pm->close();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
      RANK_CHECK(errors[r].empty(), "thread rank " + std::to_string(r) + ": " + errors[r]);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmPeerMemory, CreateAndCloseInALoopFreesEverything) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    CU(cudaSetDevice(ctx.device));
    const uint64_t bytes = 64u << 20;
    size_t base = 0;
    for (int i = 0; i < 12; ++i) {
      auto store = make_prefix_store("loop" + std::to_string(i), ctx.store);
      auto pm = PeerMemory::create(*store, ctx.rank, ctx.world, ctx.device, bytes, "[loop] ",
                                   PeerMemKind::kVmm);
      RANK_CHECK(pm->problem().empty(), pm->problem());
      CU(cudaMemset(pm->base(1 - ctx.rank), 1, 4096));
      CU(cudaDeviceSynchronize());
      store_barrier(*store, "used", ctx.rank, ctx.world);
      if (i % 2) pm->close();  // else the destructor closes
      pm.reset();
      store_barrier(*store, "closed", ctx.rank, ctx.world);
      if (i == 0) base = free_bytes();
    }
    size_t now = free_bytes();
    RANK_CHECK(
        now + (8u << 20) >= base,
        "free GPU memory fell by " + std::to_string((base - now) >> 20) + " MiB over 11 cycles");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmPeerMemory, RanksDisagreeingOnThePathFail) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    CU(cudaSetDevice(ctx.device));
    PeerMemKind kind = ctx.rank == 0 ? PeerMemKind::kIpc : PeerMemKind::kVmm;
    expect_error(
        [&] { PeerMemory::create(*ctx.store, ctx.rank, ctx.world, ctx.device, 1u << 20, "", kind); },
        ErrorCode::kInvalidArgument, {"peer_mem=vmm"}, "ipc on rank 0 and vmm on rank 1");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmPeerMemory, ARankThatCannotAllocateFailsTheOthersAtOnce) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    CU(cudaSetDevice(ctx.device));
    for (PeerMemKind kind : {PeerMemKind::kVmm, PeerMemKind::kIpc}) {
      auto store = make_prefix_store(cuda::peer_mem_name(kind), ctx.store);
      // Rank 1 asks for 1 PiB: its allocation fails; rank 0 must hear of it, not wait 60 s.
      const uint64_t bytes = ctx.rank == 1 ? (1ull << 50) : (1u << 20);
      auto t0 = std::chrono::steady_clock::now();
      try {
        PeerMemory::create(*store, ctx.rank, ctx.world, ctx.device, bytes, "", kind);
        RANK_CHECK(false, "no error");
      } catch (const Error& e) {
        std::string m = e.what();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        RANK_CHECK(s < 10, "took " + std::to_string(s) + " s: " + m);
        if (ctx.rank == 0)
          RANK_CHECK(m.find("rank 1 could not set up its peer memory") != std::string::npos, m);
      }
    }
  });
  EXPECT_EQ(err, "");
}

// --- the cuda backend with peer_mem=vmm ---

TEST(CudaVmmBackend, AllReduceEveryDtypeOpAndSize) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "vmm_ar", kVmm);
    check_allreduce_coverage(*c, ctx, "vmm");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, EveryCollectiveAndChunking) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "vmm_coll", kVmm);
    uint64_t seed = 11;
    for (int64_t n : {0, 1, 7, 1001, 65536 + 3}) check_collectives(*c, ctx, n, seed++, false);
    if (nccl_loadable() && gpu_count() >= 2) check_collectives(*c, ctx, 1001, seed++, true);
    Hints small = kVmm;
    small["buffer_bytes"] = "1M";
    auto d = make_comm(ctx, "cuda", "vmm_chunks", small);
    for (const char* a : {"flat", "tree"})
      check_allreduce(*d, ctx, DataType::kFloat32, ReduceOp::SUM, (1 << 20) + 7, 5, algo(a));
    check_collectives(*d, ctx, 300001, 7, false);
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, ThreeAndFourRanksShareGpus) {
  REQUIRE_GPUS(1);
  for (int world : {3, 4}) {
    std::string err = run_ranks(world, gpu_count() >= 2 && world == 3 ? 2 : 1, [](RankCtx& ctx) {
      auto c = make_comm(ctx, "cuda", "vmm_shared", kVmm);
      for (const char* a : {"flat", "tree"}) {
        check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 5003, 21, algo(a));
        check_allreduce(*c, ctx, DataType::kBFloat16, ReduceOp::MIN, 33, 22, algo(a));
      }
      check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 24, algo("ll"));
      check_collectives(*c, ctx, 999, 23, false);
    });
    EXPECT_EQ(err, "") << "world " << world;
  }
  if (gpu_count() >= 2) {  // 4 ranks on 2 GPUs: 2 per GPU, P2P and same-GPU pairs in one comm
    std::string err = run_ranks(4, 2, [](RankCtx& ctx) {
      auto c = make_comm(ctx, "cuda", "vmm_mixed", kVmm);
      check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 70001, 31, algo("tree"));
      check_collectives(*c, ctx, 1001, 32, false);
    });
    EXPECT_EQ(err, "") << "4 ranks on 2 GPUs";
  }
}

TEST(CudaVmmBackend, GraphCaptureAndReplay) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto c = make_comm(ctx, "cuda", "vmm_graph", kVmm);
    check_graph_replay(*c, ctx, "vmm graph");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, IpcAndVmmCommsAtOnce) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    auto a = make_comm(ctx, "cuda", "vmm_a", kVmm);
    auto b = make_comm(ctx, "cuda", "ipc_b", {{"peer_mem", "ipc"}});
    for (int i = 0; i < 4; ++i) {
      check_allreduce(*a, ctx, DataType::kFloat32, ReduceOp::SUM, 1000 + i, 400 + i, algo("flat"));
      check_allreduce(*b, ctx, DataType::kBFloat16, ReduceOp::SUM, 20000 + i, 500 + i,
                      algo("tree"));
    }
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, CommsDestroyedAndRecreatedWithoutLeaks) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(
      2, two_gpus(),
      [](RankCtx& ctx) {
        CU(cudaSetDevice(ctx.device));
        size_t base = 0;
        for (int i = 0; i < 8; ++i) {
          auto c = make_comm(ctx, "cuda", "vmm_loop" + std::to_string(i), kVmm);
          check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 70001, 600 + i, algo("tree"));
          check_allreduce(*c, ctx, DataType::kFloat32, ReduceOp::SUM, 1001, 700 + i, algo("ll"));
          // Three ways out: finalize, abort, or just the last reference going away.
          if (i % 3 == 0)
            c->finalize();
          else if (i % 3 == 1)
            c->abort();
          c.reset();
          CU(cudaDeviceSynchronize());
          store_barrier(*ctx.store, "vmm_loop_done" + std::to_string(i), ctx.rank, ctx.world);
          if (i == 0) base = free_bytes();
        }
        size_t now = free_bytes();
        // Each comm maps 2 x 512 MiB here: a leak of either shows.
        RANK_CHECK(
            now + (8u << 20) >= base,
            "free GPU memory fell by " + std::to_string((base - now) >> 20) + " MiB over 7 comms");
      },
      std::chrono::seconds(300));
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, BadPeerMemHintIsRefused) {
  REQUIRE_GPUS(1);
  std::string err = run_ranks(2, two_gpus(), [](RankCtx& ctx) {
    expect_error([&] { make_comm(ctx, "cuda", "vmm_bad", {{"peer_mem", "posix"}}); },
                 ErrorCode::kInvalidArgument, {"peer_mem='posix'"}, "peer_mem=posix");
  });
  EXPECT_EQ(err, "");
}

TEST(CudaVmmBackend, HierarchicalPathWithForcedHosts) {
  REQUIRE_GPUS(2);
  if (!nccl_loadable()) GTEST_SKIP() << "libnccl.so.2 not loadable (set COMMX_NCCL_LIBRARY)";
  // 4 ranks, 2 "hosts" of 2 ranks (rank r on GPU r / 2): the local peer memory is VMM.
  std::string err = run_ranks(
      4, 2,
      [](RankCtx& ctx) {
        Hints h = kVmm;
        h["ranks_per_host"] = "2";
        auto c = make_comm(ctx, "cuda", "vmm_hier", h);
        uint64_t seed = 41;
        for (DataType t : {DataType::kFloat32, DataType::kBFloat16})
          for (int64_t n : {1, 1001, 1000003})
            check_allreduce(*c, ctx, t, ReduceOp::SUM, n, seed++);
      },
      std::chrono::seconds(180), 2);
  EXPECT_EQ(err, "");
}

}  // namespace
}  // namespace commx::testing
