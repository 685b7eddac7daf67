// Memory-ordering and futex helpers for words that live in memory shared between processes.
// Every cross-rank flag of the shm transport and the shm algorithms goes through these; no ad-hoc
// volatile spins. Layer: transport.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace commx {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shm words must be lock free");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the futex word is the low half");

// A 64-bit counter in shared memory that waiters may sleep on. The futex is the low 32 bits of
// `value`; `waiters` tells a publisher whether a wake-up system call is needed at all.
struct alignas(64) ShmWord {
  std::atomic<uint64_t> value;
  std::atomic<uint32_t> waiters;
  // The arrive word only: a note of the call the owner made at a step of each parity (see
  // call_note), in the line a peer reads anyway to see the owner arrive.
  std::atomic<uint64_t> note[2];
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline uint32_t* futex_addr(ShmWord& w) { return reinterpret_cast<uint32_t*>(&w.value); }

inline void futex_wake_all(ShmWord& w) {
  // Shared (not PRIVATE) futex: the word is mapped by several processes.
  syscall(SYS_futex, futex_addr(w), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps while the low half of `w` equals `expected`, at most `ns` nanoseconds.
inline void futex_wait(ShmWord& w, uint32_t expected, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, futex_addr(w), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// Publishes a new value (release, and sequentially consistent with the waiters check: a waiter
// increments `waiters` before its last look at `value`, so one of the two sides sees the other).
inline void publish(ShmWord& w, uint64_t v) {
  w.value.store(v, std::memory_order_seq_cst);
  if (w.waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(w);
}

// Adds to the word (a doorbell ring) and wakes its sleepers.
inline void ring_bell(ShmWord& w) {
  w.value.fetch_add(1, std::memory_order_seq_cst);
  if (w.waiters.load(std::memory_order_seq_cst) != 0) futex_wake_all(w);
}

inline uint64_t load_acquire(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_acquire);
}

}  // namespace commx
