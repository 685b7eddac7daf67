// TCP transport (see tcp_transport.h): lazy symmetric connections with a hello handshake, and an
// exchange() that drives every send and receive of a step with non-blocking sockets and poll().
// Layer: transport.
//
// Wire format, per direction of a connection: frames of a 56-byte header {payload bytes, sequence
// number, magic, the sender's call (OpFingerprint)} followed by the payload; the receiver checks
// the call against its own before it takes a byte of the payload. Sends go out with one sendmsg()
// of header + payload iovecs (no copy); receives land in a small per-link staging buffer (so a
// small message costs one recv()), while long payloads are read straight into the caller's buffer.
#include "transport/tcp_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <vector>

#include "commx/error.h"
#include "core/env.h"
#include "transport/peer_auth.h"
#include "transport/socket_addr.h"

namespace commx {
namespace {

constexpr uint32_t kHelloMagic = 0x54584d43;  // "CMXT"
constexpr uint32_t kFrameMagic = 0x46584d43;  // "CMXF"
// A frame without payload whose `bytes` is the rank the sender lost: it gave up on the comm. Its
// `seq` is kLostStalled when the sender timed out waiting for that rank, kLostDead otherwise.
constexpr uint32_t kAbortMagic = 0x41584d43;  // "CMXA"
constexpr uint32_t kLostDead = 0;
constexpr uint32_t kLostStalled = 1;
// A frame without payload whose `bytes` is the rank whose call (in `call`) did not match the
// sender's: it gave up on the comm.
constexpr uint32_t kMismatchMagic = 0x4d584d43;  // "CMXM"
constexpr uint8_t kUnknownCall = 0xff;           // OpFingerprint::type of a call a rank did not see
// 2: the call's fingerprint in every frame header; 3: the hello says whether a token proof follows.
constexpr uint32_t kProtocolVersion = 3;
constexpr size_t kMaxCommName = 4096;
constexpr size_t kStageBytes = 64 << 10;
// A payload remainder at least this long is received straight into the caller's buffer.
constexpr size_t kDirectRecvMin = 8 << 10;
constexpr int kMaxIov = 64;
constexpr int kMaxBackoffMs = 200;
constexpr int kTieBreakWaitMs = 50;
// How long a rank whose link to a peer broke looks for that peer's verdict (published before it
// closed its links when it gave up), and the most a timed-out rank waits for its pending peers'.
constexpr std::chrono::milliseconds kVerdictLookupWait{20};
constexpr std::chrono::milliseconds kVerdictGraceMax{1000};
// How long an accepted connection may take to answer the token challenge.
constexpr std::chrono::milliseconds kProofTimeout{10000};
constexpr size_t kProofBytes = sizeof(auth::Digest);
constexpr size_t kChallengeBytes = sizeof(auth::Nonce) + kProofBytes;

struct Hello {
  uint32_t magic;
  uint32_t version;
  int32_t from;
  int32_t to;
  int32_t size;
  uint32_t name_len;
  uint32_t proves_token;  // 1: the connector's nonce follows the name, and it answers a challenge
};

enum class Verdict : uint32_t {
  kOk = 1,
  kTieBreak,  // both sides connected at once: the lower rank's connection wins
  kWrongComm,
  kWrongRank,
  kWrongSize,
  kDuplicate,
  kNeedsToken,  // this rank has the job token and the connector did not offer to prove it
  kNoToken,     // the connector offers a token proof, but this rank has no token to check it
};

struct HelloReply {
  uint32_t magic;
  Verdict verdict;
};

struct FrameHeader {
  uint64_t bytes;
  uint32_t seq;
  uint32_t magic;
  OpFingerprint call;
};
static_assert(sizeof(FrameHeader) == 56);

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "accepted";
    case Verdict::kTieBreak:
      return "tie-break";
    case Verdict::kWrongComm:
      return "it belongs to another comm";
    case Verdict::kWrongRank:
      return "it is another rank";
    case Verdict::kWrongSize:
      return "its comm has another size";
    case Verdict::kDuplicate:
      return "it already has a connection to this rank";
    case Verdict::kNeedsToken:
      return "it requires the job token (COMMX_AUTH_TOKEN), which this process does not have";
    case Verdict::kNoToken:
      return "it has no job token while this process has one (COMMX_AUTH_TOKEN must be set for "
             "every rank or none)";
  }
  return "unknown verdict";
}

int ms_until(Clock::time_point now, Clock::time_point t) {
  if (t <= now) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string hint_or_env(const Hints& hints, const char* hint, const char* env) {
  auto it = hints.find(hint);
  if (it != hints.end()) return it->second;
  return env ? env_str(env).value_or("") : std::string();  // validated as declared
}

enum class Conn {
  kIdle,        // no socket; a connect starts when an exchange needs the peer (after retry_at)
  kConnecting,  // outgoing socket: TCP connect or hello send in progress
  kAwaitReply,  // outgoing socket: hello sent, waiting for the verdict
  kConnected,
  kBroken,  // an exchange failed midway: the byte stream can no longer be trusted
};

struct Peer {
  Conn conn = Conn::kIdle;
  int fd = -1;  // the data socket when connected, else the outgoing socket while handshaking
  std::optional<SockAddr> addr;
  // Handshake of our outgoing connection: the hello (with our nonce when proving the token),
  // then the reply (with the acceptor's nonce and proof when it is proved).
  std::string hello;
  size_t hello_core = 0;  // bytes of `hello` before the nonce: what the proofs cover
  auth::Nonce nonce{};
  size_t hello_sent = 0;
  HelloReply reply{};
  char challenge[kChallengeBytes] = {};
  size_t reply_got = 0;
  size_t challenge_got = 0;
  // Accepted connections claiming this rank that were challenged and have not answered yet.
  int awaiting_proof = 0;
  Clock::time_point retry_at{};
  std::optional<Clock::time_point> refused_since;
  int backoff_ms = 0;
  std::string last_error;
  // Stream state of the connection.
  uint32_t send_seq = 0;
  uint32_t recv_seq = 0;
  std::vector<char> stage;
  size_t rpos = 0;
  size_t rend = 0;
  ErrorCode broken_code = ErrorCode::kInternal;
  std::string broken_why;
  // Work of the exchange in progress (FIFO per direction).
  bool active = false;
  bool ready = false;  // worth trying I/O before the next poll
  std::vector<const SendReq*> sends;
  std::vector<FrameHeader> headers;
  size_t si = 0;
  size_t soff = 0;  // bytes of sends[si] (header + payload) already written
  std::vector<const RecvReq*> recvs;
  size_t ri = 0;
  size_t roff = 0;  // payload bytes of recvs[ri] already received
  bool rhdr = false;

  bool done() const { return si == sends.size() && ri == recvs.size(); }
};

struct Incoming {
  int fd = -1;
  std::vector<char> buf;
  // Set once its hello was accepted and challenged: it must answer with its proof.
  bool challenged = false;
  int from = -1;
  Clock::time_point since{};
  auth::Nonce their_nonce{}, our_nonce{};
  std::string hello_core;
  char proof[kProofBytes] = {};
  size_t proof_got = 0;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, std::shared_ptr<Store> store, std::string comm_name,
               const Hints& hints)
      : rank_(rank),
        size_(size),
        store_(std::move(store)),
        comm_name_(std::move(comm_name)),
        peers_(std::max(size, 0)) {
    prefix_ = "tcp transport of comm '" + comm_name_ + "' rank " + std::to_string(rank_) + "/" +
              std::to_string(size_) + ": ";
    if (rank_ < 0 || rank_ >= size_) {
      throw Error(ErrorCode::kInvalidArgument, prefix_ + "rank out of range");
    }
    if (comm_name_.size() > kMaxCommName) {
      throw Error(ErrorCode::kInvalidArgument, prefix_ + "comm name longer than 4096 bytes");
    }
    token_ = peer_auth::job_token();
    tag_ = hint_or_env(hints, "tcp_tag", nullptr);
    if (tag_.empty()) tag_ = "tcp";
    std::string grace = hint_or_env(hints, "tcp_refused_grace_ms", "COMMX_SOCKET_REFUSED_GRACE_MS");
    if (!grace.empty()) {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(grace.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || errno != 0 || end == grace.c_str()) {
        throw Error(ErrorCode::kInvalidArgument,
                    prefix_ + "bad refused grace '" + grace + "' (milliseconds expected)");
      }
      refused_grace_ = std::chrono::milliseconds(v);
    }
    try {
      abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (abort_fd_ < 0) throw system_error("eventfd");
      listen_on(choose_bind_address(hints));
    } catch (...) {
      close_all();  // no destructor runs for a half-built object
      throw;
    }
  }

  ~TcpTransport() override { close_all(); }

  std::string name() const override { return "tcp"; }

  void abort() override {
    aborted_.store(true);
    uint64_t one = 1;
    ssize_t rc = write(abort_fd_, &one, sizeof(one));
    (void)rc;  // the flag alone suffices when the counter is saturated
  }

  void exchange(std::span<const SendReq> sends, std::span<const RecvReq> recvs,
                Deadline deadline) override {
    if (aborted_.load()) throw aborted_error();
    validate(sends, recvs);
    copy_to_self(sends, recvs);
    start_ = Clock::now();
    for (const SendReq& s : sends) {
      if (s.peer == rank_) continue;
      Peer& p = activate(s.peer);
      p.sends.push_back(&s);
      p.headers.push_back(FrameHeader{s.bytes, p.send_seq++, kFrameMagic, call_});
    }
    for (const RecvReq& r : recvs) {
      if (r.peer != rank_) activate(r.peer).recvs.push_back(&r);
    }
    try {
      for (int q : active_) {
        if (peers_[q].conn == Conn::kBroken) throw broken_error(q);
      }
      run(deadline);
    } catch (const Error& e) {
      if ((e.code() == ErrorCode::kPeerFailure || e.code() == ErrorCode::kTimeout) &&
          lost_rank_ >= 0) {
        // First publish who is to blame, then close the links: a peer that sees a link close or
        // stay silent finds the verdict and names that rank, not this one.
        publish_verdict(lost_rank_, lost_stalled_ ? Why::kStalled : Why::kDied);
        give_up(e, FrameHeader{static_cast<uint64_t>(lost_rank_),
                               lost_stalled_ ? kLostStalled : kLostDead,
                               kAbortMagic,
                               {}});
      } else if (mismatched_rank_ >= 0) {
        publish_verdict(mismatched_rank_, Why::kMismatch);
        give_up(e, FrameHeader{static_cast<uint64_t>(mismatched_rank_), 0, kMismatchMagic,
                               mismatched_call_});
      } else {
        for (int q : active_) {
          if (!peers_[q].done()) mark_broken(q, e);
        }
      }
      finish_exchange();
      throw;
    }
    finish_exchange();
  }

 private:
  // Who a rank gave up on the comm for: a rank that died or stalled, or one whose call did not
  // match its own.
  enum class Why { kDied, kStalled, kMismatch };
  struct Blame {
    int rank;
    Why why;
  };

  // ---- setup ----

  Error system_error(const std::string& what) const {
    return Error(ErrorCode::kSystem, prefix_ + what + ": " + std::strerror(errno));
  }

  void listen_on(const std::string& host) {
    SockAddr a = resolve_address(host, 0);
    listen_fd_ = socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw system_error("socket");
    if (bind(listen_fd_, a.get(), a.len) != 0) throw system_error("bind to " + host);
    if (listen(listen_fd_, SOMAXCONN) != 0) throw system_error("listen");
    SockAddr bound;
    bound.len = sizeof(bound.storage);
    if (getsockname(listen_fd_, bound.get(), &bound.len) != 0) throw system_error("getsockname");
    address_ = bound.to_string();
    store_->set_str(addr_key(rank_), address_);
  }

  void close_all() {
    for (Peer& p : peers_) {
      if (p.fd >= 0) close(p.fd);
      p.fd = -1;
    }
    for (Incoming& in : incoming_) close(in.fd);
    incoming_.clear();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (abort_fd_ >= 0) close(abort_fd_);
    listen_fd_ = abort_fd_ = -1;
  }

  std::string addr_key(int r) const { return tag_ + "/addr/" + std::to_string(r); }

  // ---- exchange bookkeeping ----

  void validate(std::span<const SendReq> sends, std::span<const RecvReq> recvs) const {
    auto check = [&](int peer, const void* data, size_t bytes, const char* dir) {
      if (peer < 0 || peer >= size_) {
        throw Error(ErrorCode::kInvalidArgument,
                    prefix_ + dir + " peer " + std::to_string(peer) + " out of range");
      }
      if (bytes > 0 && data == nullptr) {
        throw Error(ErrorCode::kInvalidArgument,
                    prefix_ + dir + " of " + std::to_string(bytes) + " bytes with a null buffer");
      }
    };
    for (const SendReq& s : sends) check(s.peer, s.data, s.bytes, "send");
    for (const RecvReq& r : recvs) check(r.peer, r.data, r.bytes, "recv");
  }

  // Messages to oneself match in order within one exchange (nothing is buffered across calls).
  void copy_to_self(std::span<const SendReq> sends, std::span<const RecvReq> recvs) const {
    std::vector<const SendReq*> out;
    std::vector<const RecvReq*> in;
    for (const SendReq& s : sends) {
      if (s.peer == rank_) out.push_back(&s);
    }
    for (const RecvReq& r : recvs) {
      if (r.peer == rank_) in.push_back(&r);
    }
    if (out.size() != in.size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  prefix_ + "exchange has " + std::to_string(out.size()) + " sends to itself but " +
                      std::to_string(in.size()) + " receives from itself");
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i]->bytes != in[i]->bytes) {
        throw Error(ErrorCode::kInvalidArgument,
                    prefix_ + "receive of " + std::to_string(in[i]->bytes) + " bytes from itself " +
                        "matched a send of " + std::to_string(out[i]->bytes) + " bytes");
      }
      if (out[i]->bytes > 0 && out[i]->data != in[i]->data) {
        std::memmove(in[i]->data, out[i]->data, out[i]->bytes);
      }
    }
  }

  Peer& activate(int q) {
    Peer& p = peers_[q];
    if (!p.active) {
      p.active = true;
      p.ready = true;
      active_.push_back(q);
    }
    return p;
  }

  void finish_exchange() {
    for (int q : active_) {
      Peer& p = peers_[q];
      p.active = false;
      p.sends.clear();
      p.headers.clear();
      p.recvs.clear();
      p.si = p.soff = p.ri = p.roff = 0;
      p.rhdr = false;
    }
    active_.clear();
  }

  // A lost peer leaves the comm unusable: every connected peer gets one abort frame naming the
  // lost rank (unless a frame to it is half sent), then every link closes. Ranks still waiting on
  // this one (which may never talk to the lost rank) fail now, naming it, not at their timeout,
  // and can shrink the comm together.
  // A mismatched call does the same with a frame naming the rank and the call that did not match.
  void give_up(const Error& e, const FrameHeader& abort_frame) {
    const int named = static_cast<int>(abort_frame.bytes);
    for (int q = 0; q < static_cast<int>(peers_.size()); ++q) {
      if (q == rank_) continue;
      Peer& p = peers_[q];
      const bool half_sent = p.si < p.sends.size() && p.soff > 0;
      const bool tell = abort_frame.magic == kMismatchMagic || (named >= 0 && named != q);
      if (p.conn == Conn::kConnected && p.fd >= 0 && !half_sent && tell) {
        (void)!send(p.fd, &abort_frame, sizeof(abort_frame), MSG_NOSIGNAL | MSG_DONTWAIT);
        // Read what the peer sent meanwhile: closing with unread bytes resets the connection,
        // which may drop the frame before the peer reads it.
        char sink[4096];
        for (int i = 0; i < 64 && recv(p.fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
        }
      }
      mark_broken(q, e);
    }
  }

  void mark_broken(int q, const Error& e) {
    Peer& p = peers_[q];
    if (p.conn == Conn::kBroken) return;
    if (p.fd >= 0) {
      close(p.fd);
      p.fd = -1;
    }
    std::erase(handshaking_, q);
    p.conn = Conn::kBroken;
    p.broken_code = e.code();
    p.broken_why = e.what();
  }

  // ---- errors ----

  std::string peer_name(int q) const {
    const Peer& p = peers_[q];
    return "rank " + std::to_string(q) + (p.addr ? " (" + p.addr->to_string() + ")" : "");
  }

  Error aborted_error() const { return Error(ErrorCode::kAborted, prefix_ + "aborted"); }

  Error broken_error(int q) const {
    const Peer& p = peers_[q];
    return Error(p.broken_code, prefix_ + "the link to " + peer_name(q) +
                                    " is unusable after an earlier error: " + p.broken_why);
  }

  // q's link broke (closed, reset, refused). If q gave up on the comm first, its published
  // verdict names the rank that actually failed: that one is blamed, not q.
  Error peer_failure(int q, const std::string& what) const {
    if (auto b = verdict_of(q, kVerdictLookupWait)) return relayed_failure(q, *b, what);
    if (lost_rank_ < 0) lost_rank_ = q;
    return Error(ErrorCode::kPeerFailure, prefix_ + peer_name(q) + " failed: " + what);
  }

  // The error of a rank that hears from q (a frame or a verdict) that q gave up on the comm
  // because rank b.rank died or stalled.
  Error relayed_failure(int q, Blame b, const std::string& what) const {
    const std::string then = what.empty() ? "" : "; then: " + what;
    if (b.why == Why::kMismatch && mismatched_rank_ < 0) {
      mismatched_rank_ = b.rank;
      mismatched_call_ = OpFingerprint{};
      mismatched_call_.type = kUnknownCall;
    }
    if (b.why == Why::kMismatch)
      return Error(ErrorCode::kInvalidArgument,
                   prefix_ + peer_name(q) + " gave up on this comm: the call of rank " +
                       std::to_string(b.rank) + " did not match its own (this rank called " +
                       describe_call(call_) + then + ")");
    if (lost_rank_ < 0) {
      lost_rank_ = b.rank;
      lost_stalled_ = b.why == Why::kStalled;
    }
    const bool stalled = b.why == Why::kStalled;
    std::string msg = prefix_ + "rank " + std::to_string(b.rank) +
                      (stalled ? " stalled (" + peer_name(q) + " timed out waiting for it"
                               : " failed (" + peer_name(q) + " lost it") +
                      " and gave up on this comm" + then + ")";
    return Error(stalled ? ErrorCode::kTimeout : ErrorCode::kPeerFailure, msg);
  }

  // ---- verdicts: who actually failed ----

  std::string verdict_key(int r) const { return tag_ + "/verdict/" + std::to_string(r); }

  // Once, before this rank closes its links after a failure: "<rank> failed|stalled|mismatch".
  void publish_verdict(int rank, Why why) {
    if (verdict_published_ || rank < 0) return;
    verdict_published_ = true;
    const char* word = why == Why::kStalled    ? " stalled"
                       : why == Why::kMismatch ? " mismatch"
                                               : " failed";
    try {
      store_->set_str(verdict_key(rank_), std::to_string(rank) + word);
    } catch (const std::exception&) {
      // The store is gone too: peers fall back to what they see themselves.
    }
  }

  // q's verdict if it published one within `wait` (it names another rank than q and this one).
  // What rank q published: nothing (within `wait`), the ranks it timed out waiting for
  // ("waits 3 5", published at its deadline while it looks for their verdicts), or its final
  // verdict ("3 stalled", published before it closed its links).
  struct Published {
    std::optional<Blame> verdict;
    std::optional<std::vector<int>> waits;
  };
  Published published_by(int q, std::chrono::milliseconds wait) const {
    Published out;
    try {
      store_->wait({verdict_key(q)}, wait);
      std::istringstream in(store_->get_str(verdict_key(q)));
      std::string first, word;
      in >> first;
      if (first == "waits") {
        out.waits.emplace();
        for (int r; in >> r;)
          if (r >= 0 && r < size_) out.waits->push_back(r);
        return out;
      }
      const int r = std::stoi(first);
      in >> word;
      if (word == "mismatch" && r >= 0 && r < size_)
        out.verdict = Blame{r, Why::kMismatch};
      else if (r >= 0 && r < size_ && r != q && r != rank_)
        out.verdict = Blame{r, word == "stalled" ? Why::kStalled : Why::kDied};
    } catch (const std::exception&) {
      // None (in time), or the store is unreachable.
    }
    return out;
  }
  std::optional<Blame> verdict_of(int q, std::chrono::milliseconds wait) const {
    return published_by(q, wait).verdict;
  }

  Error io_failure(int q, const char* op, int err) const {
    if (err == EPIPE || err == ECONNRESET) {
      return peer_failure(
          q, std::string("connection reset during ") + op + " (peer process exited or aborted?)");
    }
    return peer_failure(q, std::string(op) + " failed: " + std::strerror(err));
  }

  // A deadline passed with peers pending. A pending peer may itself be waiting on a rank that
  // stalled or died, and give up on the comm at about the same time: for a short grace this
  // rank looks for the pending peers' verdicts, and blames the rank they name, not them. Pending
  // peers without a verdict are the ones this rank blames itself.
  Error timeout_error(Clock::time_point now, Deadline deadline) const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start_).count();
    const auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - start_);
    const Clock::time_point grace_end =
        now + std::clamp(budget / 4, std::chrono::milliseconds(10), kVerdictGraceMax);
    std::vector<int> pending;
    for (int q : active_)
      if (!peers_[q].done()) pending.push_back(q);
    // Publish whom this rank waits for, then follow what the ranks it waits for published (at
    // their own deadlines, about now): the ranks at the end of the chains, which published
    // nothing, stalled; a rank that gave up names its culprit itself.
    if (!verdict_published_) {
      std::string w = "waits";
      for (int q : pending) w += " " + std::to_string(q);
      try {
        store_->set_str(verdict_key(rank_), w);
      } catch (const std::exception&) {
      }
    }
    std::vector<int> silent;                     // pending peers that stalled themselves
    std::vector<std::pair<int, Blame>> relayed;  // (pending peer, the culprit behind it)
    std::vector<char> seen(static_cast<size_t>(size_), 0);
    seen[rank_] = 1;
    std::vector<std::pair<int, int>> todo;  // (rank to look up, the pending peer it is behind)
    for (int q : pending) {
      seen[q] = 1;
      todo.push_back({q, q});
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      const auto [r, via] = todo[i];
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(grace_end - Clock::now());
      Published p = published_by(r, std::max(left, std::chrono::milliseconds(1)));
      if (p.verdict) {
        if (p.verdict->why == Why::kMismatch) return relayed_failure(via, *p.verdict, "");
        relayed.push_back({via, *p.verdict});
      } else if (p.waits) {
        for (int x : *p.waits)
          if (!seen[x]) {
            seen[x] = 1;
            todo.push_back({x, via});
          }
      } else if (r == via) {
        silent.push_back(r);
      } else {
        relayed.push_back({via, Blame{r, Why::kStalled}});
      }
    }
    // A pending peer whose chain leads back to this rank (each waits for the other: a lost link,
    // or a deadlock) has no one behind it to blame: it is blamed itself.
    for (int q : pending) {
      const bool behind_q =
          std::any_of(relayed.begin(), relayed.end(), [q](const auto& x) { return x.first == q; });
      if (!behind_q && std::find(silent.begin(), silent.end(), q) == silent.end())
        silent.push_back(q);
    }
    if (lost_rank_ < 0) {
      if (!silent.empty()) {
        lost_rank_ = silent.front();
        lost_stalled_ = true;
      } else if (!relayed.empty()) {
        lost_rank_ = relayed.front().second.rank;
        lost_stalled_ = relayed.front().second.why == Why::kStalled;
      }
    }
    std::string behind;  // culprits this rank waited for through others
    for (const auto& [via, b] : relayed) {
      behind += "; rank " + std::to_string(b.rank) +
                (b.why == Why::kStalled ? " stalled" : " failed") + " (" + peer_name(via) +
                ", which this rank waited for, was waiting for it)";
    }
    if (silent.empty() && !relayed.empty())
      return Error(ErrorCode::kTimeout,
                   prefix_ + "exchange timed out after " + std::to_string(ms) + " ms" + behind);
    std::string what;
    for (int q : silent) {
      const Peer& p = peers_[q];
      if (!what.empty()) what += "; ";
      what += peer_name(q) + ": sent " + std::to_string(p.si) + "/" +
              std::to_string(p.sends.size()) + ", received " + std::to_string(p.ri) + "/" +
              std::to_string(p.recvs.size());
      if (p.si < p.sends.size() && p.soff > 0) {
        what += ", current send at byte " + std::to_string(p.soff) + " of " +
                std::to_string(sizeof(FrameHeader) + p.sends[p.si]->bytes);
      }
      if (p.rhdr) {
        what += ", current receive at byte " + std::to_string(p.roff) + " of " +
                std::to_string(p.recvs[p.ri]->bytes);
      }
      switch (p.conn) {
        case Conn::kIdle:
        case Conn::kConnecting:
          what += p.conn == Conn::kIdle ? ", not connected" : ", not connected (connect pending)";
          if (!p.last_error.empty()) what += " (last connect error: " + p.last_error + ")";
          break;
        case Conn::kAwaitReply:
          what += ", waiting for its answer to our hello (is it in a matching exchange?)";
          break;
        default:
          break;
      }
    }
    return Error(ErrorCode::kTimeout, prefix_ + "exchange timed out after " + std::to_string(ms) +
                                          " ms; pending: " + what + behind);
  }

  // ---- the progress loop ----

  void run(Deadline deadline) {
    std::vector<pollfd> fds;
    enum Kind { kAbort, kListen, kIncoming, kHandshake, kData };
    std::vector<std::pair<Kind, int>> who;
    for (;;) {
      bool pending = false;
      for (int q : active_) {
        Peer& p = peers_[q];
        if (p.done()) continue;
        if (p.conn == Conn::kConnected && p.ready) {
          p.ready = false;
          progress_send(q);
          progress_recv(q);
        }
        pending = pending || !p.done();
      }
      if (!pending) return;
      if (aborted_.load()) throw aborted_error();

      Clock::time_point now = Clock::now();
      Clock::time_point wake = deadline;
      for (int q : active_) {
        Peer& p = peers_[q];
        if (p.done() || p.conn != Conn::kIdle) continue;
        if (p.retry_at <= now) {
          start_connect(q);
          now = Clock::now();
        }
        if (p.conn == Conn::kIdle) wake = std::min(wake, p.retry_at);
      }
      if (now >= deadline) throw timeout_error(now, deadline);
      if (token_ && !incoming_.empty()) expire_challenges(now);

      fds.clear();
      who.clear();
      fds.push_back({abort_fd_, POLLIN, 0});
      who.push_back({kAbort, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      who.push_back({kListen, 0});
      for (size_t i = 0; i < incoming_.size(); ++i) {
        fds.push_back({incoming_[i].fd, POLLIN, 0});
        who.push_back({kIncoming, static_cast<int>(i)});
      }
      for (int q : handshaking_) {
        Peer& p = peers_[q];
        fds.push_back(
            {p.fd, static_cast<short>(p.conn == Conn::kConnecting ? POLLOUT : POLLIN), 0});
        who.push_back({kHandshake, q});
      }
      for (int q : active_) {
        Peer& p = peers_[q];
        if (p.done() || p.conn != Conn::kConnected) continue;
        short ev = 0;
        if (p.si < p.sends.size()) ev |= POLLOUT;
        if (p.ri < p.recvs.size()) ev |= POLLIN;
        fds.push_back({p.fd, ev, 0});
        who.push_back({kData, q});
      }
      int rc = poll(fds.data(), fds.size(), ms_until(now, wake));
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw system_error("poll");
      }
      if (rc == 0) continue;
      bool accept_ready = false;
      std::vector<int> incoming_ready;
      std::vector<int> handshake_ready;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        switch (who[i].first) {
          case kAbort:
            throw aborted_error();
          case kListen:
            accept_ready = true;
            break;
          case kIncoming:
            incoming_ready.push_back(who[i].second);
            break;
          case kHandshake:
            handshake_ready.push_back(who[i].second);
            break;
          case kData:
            peers_[who[i].second].ready = true;
            break;
        }
      }
      // Handshakes change handshaking_ and incoming_, so they run after the scan.
      for (int q : handshake_ready) {
        if (peers_[q].conn == Conn::kConnecting) {
          on_connect_writable(q);
        } else if (peers_[q].conn == Conn::kAwaitReply) {
          on_reply_readable(q);
        }
      }
      for (auto it = incoming_ready.rbegin(); it != incoming_ready.rend(); ++it) {
        if (on_incoming_readable(incoming_[*it])) incoming_.erase(incoming_.begin() + *it);
      }
      if (accept_ready) accept_all();
    }
  }

  // ---- data ----

  void progress_send(int q) {
    Peer& p = peers_[q];
    while (p.si < p.sends.size()) {
      iovec iov[kMaxIov];
      int n = 0;
      size_t off = p.soff;
      for (size_t i = p.si; i < p.sends.size() && n + 2 <= kMaxIov; ++i) {
        const SendReq* s = p.sends[i];
        char* hdr = reinterpret_cast<char*>(&p.headers[i]);
        char* data = static_cast<char*>(const_cast<void*>(s->data));
        if (off < sizeof(FrameHeader)) {
          iov[n++] = {hdr + off, sizeof(FrameHeader) - off};
          if (s->bytes > 0) iov[n++] = {data, s->bytes};
        } else {
          iov[n++] = {data + (off - sizeof(FrameHeader)), s->bytes - (off - sizeof(FrameHeader))};
        }
        off = 0;
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = n;
      ssize_t w = sendmsg(p.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        throw io_failure(q, "send", errno);
      }
      size_t left = static_cast<size_t>(w);
      while (p.si < p.sends.size()) {
        size_t rem = sizeof(FrameHeader) + p.sends[p.si]->bytes - p.soff;
        if (left < rem) {
          p.soff += left;
          break;
        }
        left -= rem;
        p.si++;
        p.soff = 0;
      }
    }
  }

  // Reads into the staging buffer; false when no byte is available now.
  bool fill_stage(int q) {
    Peer& p = peers_[q];
    if (p.stage.empty()) p.stage.resize(kStageBytes);
    if (p.rpos == p.rend) {
      p.rpos = p.rend = 0;
    } else if (p.rpos > 0 && p.stage.size() - p.rend < sizeof(FrameHeader) * 64) {
      std::memmove(p.stage.data(), p.stage.data() + p.rpos, p.rend - p.rpos);
      p.rend -= p.rpos;
      p.rpos = 0;
    }
    if (p.rend == p.stage.size()) {  // callers consume staged bytes first: cannot happen
      throw Error(ErrorCode::kInternal, prefix_ + "staging buffer full");
    }
    for (;;) {
      ssize_t g = recv(p.fd, p.stage.data() + p.rend, p.stage.size() - p.rend, MSG_DONTWAIT);
      if (g > 0) {
        p.rend += static_cast<size_t>(g);
        return true;
      }
      if (g == 0) throw eof_error(q);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      throw io_failure(q, "receive", errno);
    }
  }

  Error eof_error(int q) const {
    return peer_failure(q, "connection closed by the peer while receiving message #" +
                               std::to_string(peers_[q].recv_seq) +
                               " (its process exited or aborted, or it gave up on this comm "
                               "after another of its peers failed)");
  }

  void progress_recv(int q) {
    Peer& p = peers_[q];
    while (p.ri < p.recvs.size()) {
      const RecvReq* r = p.recvs[p.ri];
      if (!p.rhdr) {
        if (p.rend - p.rpos < sizeof(FrameHeader)) {
          if (!fill_stage(q)) return;
          continue;
        }
        FrameHeader h;
        std::memcpy(&h, p.stage.data() + p.rpos, sizeof(h));
        p.rpos += sizeof(h);
        if (h.magic == kAbortMagic && h.bytes < peers_.size()) {
          throw relayed_failure(
              q,
              Blame{static_cast<int>(h.bytes), h.seq == kLostStalled ? Why::kStalled : Why::kDied},
              "");
        }
        if (h.magic == kMismatchMagic && h.bytes < peers_.size()) {
          // Gives up in turn, telling its own peers (the comm is failed everywhere).
          const int other = static_cast<int>(h.bytes);
          if (mismatched_rank_ < 0) {
            mismatched_rank_ = other;
            mismatched_call_ = h.call;
          }
          const bool known = h.call.type != kUnknownCall;
          std::string theirs = other == rank_ ? "this rank's call"
                                              : "rank " + std::to_string(other) + "'s call" +
                                                    (known ? " " + describe_call(h.call) : "");
          throw Error(ErrorCode::kInvalidArgument,
                      prefix_ + peer_name(q) + " gave up on this comm: " + theirs +
                          " did not match its own (this rank called " + describe_call(call_) + ")");
        }
        if (h.magic != kFrameMagic || h.seq != p.recv_seq) {
          throw Error(ErrorCode::kInternal,
                      prefix_ + "protocol error on the link from " + peer_name(q) +
                          ": bad frame header (expected message #" + std::to_string(p.recv_seq) +
                          ", got #" + std::to_string(h.seq) + ")");
        }
        if (!fingerprints_match(h.call, call_)) {
          mismatched_rank_ = q;
          mismatched_call_ = h.call;
          throw Error(ErrorCode::kInvalidArgument,
                      prefix_ + mismatch_message(rank_, call_, q, h.call));
        }
        if (h.bytes != r->bytes) {
          throw Error(ErrorCode::kInvalidArgument,
                      prefix_ + "size mismatch: a receive of " + std::to_string(r->bytes) +
                          " bytes from rank " + std::to_string(q) + " matched a send of " +
                          std::to_string(h.bytes) + " bytes by rank " + std::to_string(q) +
                          " (message #" + std::to_string(h.seq) + " on that link)");
        }
        p.rhdr = true;
        p.roff = 0;
      }
      size_t rem = r->bytes - p.roff;
      if (rem == 0) {
        p.ri++;
        p.rhdr = false;
        p.recv_seq++;
        continue;
      }
      char* dst = static_cast<char*>(r->data) + p.roff;
      size_t avail = p.rend - p.rpos;
      if (avail > 0) {
        size_t n = std::min(avail, rem);
        std::memcpy(dst, p.stage.data() + p.rpos, n);
        p.rpos += n;
        p.roff += n;
        continue;
      }
      if (rem < kDirectRecvMin) {
        if (!fill_stage(q)) return;
        continue;
      }
      ssize_t g = recv(p.fd, dst, rem, MSG_DONTWAIT);
      if (g > 0) {
        p.roff += static_cast<size_t>(g);
      } else if (g == 0) {
        throw eof_error(q);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else if (errno != EINTR) {
        throw io_failure(q, "receive", errno);
      }
    }
  }

  // ---- connecting (our side) ----

  // Looks the peer's address up without blocking (the poll loop retries with backoff, so the
  // listener stays served and abort() and the deadline stay observed). False: not published yet.
  bool fetch_address(int q) {
    Peer& p = peers_[q];
    std::string key = addr_key(q);
    if (!store_->check({key})) {
      p.last_error = "its address is not in the store yet (key '" + key + "')";
      return false;
    }
    p.addr = parse_host_port(store_->get_str(key), "rank " + std::to_string(q));
    p.backoff_ms = 0;
    p.last_error.clear();
    return true;
  }

  void start_connect(int q) {
    Peer& p = peers_[q];
    if (!p.addr && !fetch_address(q)) {
      p.backoff_ms = std::min(std::max(2 * p.backoff_ms, 2), kMaxBackoffMs);
      p.retry_at = Clock::now() + std::chrono::milliseconds(p.backoff_ms);
      return;
    }
    int fd = socket(p.addr->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw system_error("socket");
    set_nodelay(fd);
    p.fd = fd;
    p.conn = Conn::kConnecting;
    p.hello_sent = 0;
    p.reply_got = 0;
    p.challenge_got = 0;
    handshaking_.push_back(q);
    Hello h{kHelloMagic, kProtocolVersion, rank_, q, size_,
            static_cast<uint32_t>(comm_name_.size()), token_ ? 1u : 0u};
    p.hello.assign(reinterpret_cast<const char*>(&h), sizeof(h));
    p.hello += comm_name_;
    p.hello_core = p.hello.size();
    if (token_) {  // a fresh nonce per attempt: no answer of an earlier one can be replayed
      p.nonce = auth::random_nonce();
      p.hello.append(reinterpret_cast<const char*>(p.nonce.data()), p.nonce.size());
    }
    if (connect(fd, p.addr->get(), p.addr->len) != 0 && errno != EINPROGRESS) {
      connect_failed(q, errno);
    }
  }

  void connect_failed(int q, int err) {
    Peer& p = peers_[q];
    close(p.fd);
    p.fd = -1;
    std::erase(handshaking_, q);
    p.conn = Conn::kIdle;
    p.last_error = std::strerror(err);
    Clock::time_point now = Clock::now();
    // A refusal means the peer's listener is gone: its process exited or closed the comm.
    if (err == ECONNREFUSED) {
      if (!p.refused_since) p.refused_since = now;
      if (p.active && now - *p.refused_since >= refused_grace_) {
        throw peer_failure(q, "it refuses connections (its process exited or closed the comm?)");
      }
    }
    p.backoff_ms = std::min(std::max(2 * p.backoff_ms, 5), kMaxBackoffMs);
    p.retry_at = now + std::chrono::milliseconds(p.backoff_ms);
  }

  void on_connect_writable(int q) {
    Peer& p = peers_[q];
    if (p.hello_sent == 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) return connect_failed(q, err);
    }
    while (p.hello_sent < p.hello.size()) {
      ssize_t w = send(p.fd, p.hello.data() + p.hello_sent, p.hello.size() - p.hello_sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        p.hello_sent += static_cast<size_t>(w);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else if (errno != EINTR) {
        return connect_failed(q, errno);
      }
    }
    p.conn = Conn::kAwaitReply;
  }

  // Reads into `buf` until `got` reaches `want`. False: not yet (or the connect failed).
  bool read_reply(int q, char* buf, size_t& got, size_t want) {
    Peer& p = peers_[q];
    while (got < want) {
      ssize_t g = recv(p.fd, buf + got, want - got, MSG_DONTWAIT);
      if (g > 0) {
        got += static_cast<size_t>(g);
      } else if (g == 0) {
        connect_failed(q, ECONNRESET);
        return false;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return false;
      } else if (errno != EINTR) {
        connect_failed(q, errno);
        return false;
      }
    }
    return true;
  }

  void on_reply_readable(int q) {
    Peer& p = peers_[q];
    if (p.reply_got < sizeof(p.reply)) {
      if (!read_reply(q, reinterpret_cast<char*>(&p.reply), p.reply_got, sizeof(p.reply))) return;
      if (p.reply.magic != kHelloMagic) {
        throw peer_failure(q, "the listener published for it is not a commx tcp transport");
      }
      // Only an acceptance with a token carries a challenge.
      if (p.reply.verdict != Verdict::kOk || !token_) p.challenge_got = kChallengeBytes;
    }
    if (!read_reply(q, p.challenge, p.challenge_got, kChallengeBytes)) return;
    // Drops this connection and waits a while for the peer's own, which is the link.
    auto wait_for_its_connection = [&] {
      close(p.fd);
      p.fd = -1;
      std::erase(handshaking_, q);
      p.conn = Conn::kIdle;
      p.retry_at = Clock::now() + std::chrono::milliseconds(kTieBreakWaitMs);
    };
    switch (p.reply.verdict) {
      case Verdict::kOk:
        if (token_ && !answer_challenge(q)) return;
        std::erase(handshaking_, q);
        adopt(q, p.fd);
        return;
      case Verdict::kNeedsToken:
      case Verdict::kNoToken:
        throw Error(ErrorCode::kInvalidArgument,
                    prefix_ + peer_name(q) + " refused this rank's connection: " +
                        verdict_text(p.reply.verdict));
      case Verdict::kDuplicate:
        // An accepted connection of that peer is being checked here: it becomes the link.
        if (p.awaiting_proof > 0) {
          return wait_for_its_connection();
        }
        throw peer_failure(q, std::string("the listener published for it rejected our hello: ") +
                                  verdict_text(p.reply.verdict) + " (stale store keys?)");
      case Verdict::kTieBreak:
        // It is connecting to us too and its connection wins: wait for it to arrive.
        return wait_for_its_connection();
      default:
        throw peer_failure(q, std::string("the listener published for it rejected our hello: ") +
                                  verdict_text(p.reply.verdict) + " (stale store keys?)");
    }
  }

  // Checks the acceptor's proof of the token and sends ours. False when the send failed (the
  // connect is retried).
  bool answer_challenge(int q) {
    Peer& p = peers_[q];
    auth::Nonce theirs;
    auth::Digest proof;
    std::memcpy(theirs.data(), p.challenge, theirs.size());
    std::memcpy(proof.data(), p.challenge + theirs.size(), proof.size());
    std::string_view core(p.hello.data(), p.hello_core);
    if (!auth::digests_equal(proof, peer_auth::acceptor_proof(*token_, core, p.nonce, theirs))) {
      throw Error(ErrorCode::kInvalidArgument,
                  prefix_ + "the listener published for " + peer_name(q) +
                      " did not prove the job token (a stranger's listener, another job's, or a "
                      "different COMMX_AUTH_TOKEN): refusing to send it anything");
    }
    auth::Digest mine = peer_auth::connector_proof(*token_, core, p.nonce, theirs);
    // A fresh socket's send buffer takes these 32 bytes at once.
    ssize_t w = send(p.fd, mine.data(), mine.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != static_cast<ssize_t>(mine.size())) {
      connect_failed(q, w < 0 ? errno : EIO);
      return false;
    }
    return true;
  }

  void adopt(int q, int fd) {
    Peer& p = peers_[q];
    p.fd = fd;
    p.conn = Conn::kConnected;
    p.ready = true;
    p.refused_since.reset();
    p.backoff_ms = 0;
    p.last_error.clear();
    p.send_seq = p.recv_seq = 0;
    p.rpos = p.rend = 0;
    // Frames queued before the connection existed were numbered from 0 already.
    for (size_t i = 0; i < p.headers.size(); ++i) p.headers[i].seq = static_cast<uint32_t>(i);
    p.send_seq = static_cast<uint32_t>(p.headers.size());
  }

  // ---- accepting (their side) ----

  void accept_all() {
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or a transient failure (EMFILE...) retried at the next readiness
      }
      set_nodelay(fd);
      Incoming in;
      in.fd = fd;
      incoming_.push_back(std::move(in));
    }
  }

  // Reads the hello exactly (no byte past it), then answers; with a token, the answer carries a
  // challenge and the connection is adopted once its proof checks out. True when `in` is
  // finished (adopted or closed).
  bool on_incoming_readable(Incoming& in) {
    if (in.challenged) return on_proof_readable(in);
    for (;;) {
      size_t need = sizeof(Hello);
      if (in.buf.size() >= sizeof(Hello)) {
        Hello h;
        std::memcpy(&h, in.buf.data(), sizeof(h));
        if (h.magic != kHelloMagic || h.version != kProtocolVersion || h.name_len > kMaxCommName ||
            h.proves_token > 1) {
          close(in.fd);  // not one of us
          return true;
        }
        need += h.name_len + (h.proves_token ? sizeof(auth::Nonce) : 0);
      }
      if (in.buf.size() == need) break;
      char tmp[512];
      ssize_t g = recv(in.fd, tmp, std::min(sizeof(tmp), need - in.buf.size()), MSG_DONTWAIT);
      if (g > 0) {
        in.buf.insert(in.buf.end(), tmp, tmp + g);
      } else if (g < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return false;
      } else if (g == 0 || errno != EINTR) {
        close(in.fd);
        return true;
      }
    }
    Hello h;
    std::memcpy(&h, in.buf.data(), sizeof(h));
    const size_t core = sizeof(Hello) + h.name_len;
    std::string name(in.buf.begin() + sizeof(Hello), in.buf.begin() + core);
    Verdict v = judge(h, name);
    if (token_ && !h.proves_token) {
      v = Verdict::kNeedsToken;
      peer_auth::log_refusal(prefix_, "a connection claiming rank " + std::to_string(h.from) +
                                          " offered no proof of the job token");
    } else if (!token_ && h.proves_token) {
      v = Verdict::kNoToken;
    }
    std::string reply(sizeof(HelloReply), '\0');
    HelloReply head{kHelloMagic, v};
    std::memcpy(reply.data(), &head, sizeof(head));
    if (v == Verdict::kOk && token_) {
      std::memcpy(in.their_nonce.data(), in.buf.data() + core, in.their_nonce.size());
      in.our_nonce = auth::random_nonce();
      in.hello_core.assign(in.buf.data(), core);
      auth::Digest proof =
          peer_auth::acceptor_proof(*token_, in.hello_core, in.their_nonce, in.our_nonce);
      reply.append(reinterpret_cast<const char*>(in.our_nonce.data()), in.our_nonce.size());
      reply.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    }
    // A fresh socket's send buffer always takes these (at most 56) bytes at once.
    ssize_t w = send(in.fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (v != Verdict::kOk || w != static_cast<ssize_t>(reply.size())) {
      close(in.fd);
      return true;
    }
    if (!token_) {
      accept_link(h.from, in.fd);
      return true;
    }
    in.challenged = true;
    in.from = h.from;
    in.since = Clock::now();
    ++peers_[h.from].awaiting_proof;
    return false;
  }

  // The connector's answer to our challenge: adopted when it proves the token, else closed.
  bool on_proof_readable(Incoming& in) {
    while (in.proof_got < kProofBytes) {
      ssize_t g = recv(in.fd, in.proof + in.proof_got, kProofBytes - in.proof_got, MSG_DONTWAIT);
      if (g > 0) {
        in.proof_got += static_cast<size_t>(g);
      } else if (g < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return false;
      } else if (g == 0 || errno != EINTR) {
        drop_challenged(in, "it hung up before answering the token challenge");
        return true;
      }
    }
    auth::Digest got;
    std::memcpy(got.data(), in.proof, got.size());
    if (!auth::digests_equal(got, peer_auth::connector_proof(*token_, in.hello_core,
                                                             in.their_nonce, in.our_nonce))) {
      drop_challenged(in, "its answer to the token challenge is wrong (no job token, or another)");
      return true;
    }
    Peer& p = peers_[in.from];
    --p.awaiting_proof;
    if (p.conn == Conn::kConnected || p.conn == Conn::kBroken) {
      close(in.fd);  // a link to that rank was made meanwhile
      return true;
    }
    accept_link(in.from, in.fd);
    return true;
  }

  void drop_challenged(Incoming& in, const std::string& why) {
    --peers_[in.from].awaiting_proof;
    peer_auth::log_refusal(prefix_, "a connection claiming rank " + std::to_string(in.from) +
                                        ": " + why);
    close(in.fd);
  }

  // Challenged connections that never answered go after kProofTimeout.
  void expire_challenges(Clock::time_point now) {
    std::erase_if(incoming_, [&](Incoming& in) {
      if (!in.challenged || now - in.since < kProofTimeout) return false;
      drop_challenged(in, "it did not answer the token challenge in time");
      return true;
    });
  }

  // Makes the accepted `fd` the link to `from` (our own connection to it, if any, loses).
  void accept_link(int from, int fd) {
    Peer& p = peers_[from];
    if (p.conn == Conn::kConnecting || p.conn == Conn::kAwaitReply) {
      close(p.fd);  // ours loses the tie-break: the peer rejects it
      std::erase(handshaking_, from);
    }
    adopt(from, fd);
  }

  Verdict judge(const Hello& h, const std::string& name) const {
    if (name != comm_name_) return Verdict::kWrongComm;
    if (h.size != size_) return Verdict::kWrongSize;
    if (h.to != rank_ || h.from < 0 || h.from >= size_ || h.from == rank_) {
      return Verdict::kWrongRank;
    }
    switch (peers_[h.from].conn) {
      case Conn::kIdle:
        return Verdict::kOk;
      case Conn::kConnecting:
      case Conn::kAwaitReply:
        return h.from < rank_ ? Verdict::kOk : Verdict::kTieBreak;
      default:
        return Verdict::kDuplicate;
    }
  }

  const int rank_;
  const int size_;
  std::shared_ptr<Store> store_;
  const std::string comm_name_;
  std::string prefix_;
  mutable int lost_rank_ = -1;  // the first rank this one lost (told to peers when it gives up)
  mutable bool lost_stalled_ = false;  // ... because it stalled (else it died)
  bool verdict_published_ = false;
  // The first rank whose call did not match (told to peers too), and its call (type
  // kUnknownCall when only a peer's verdict named it).
  mutable int mismatched_rank_ = -1;
  mutable OpFingerprint mismatched_call_{};
  std::string tag_;
  std::string address_;
  std::optional<std::string> token_;  // the job token: every connection proves it both ways
  std::chrono::milliseconds refused_grace_{2000};
  int listen_fd_ = -1;
  int abort_fd_ = -1;
  std::atomic<bool> aborted_{false};
  std::vector<Peer> peers_;
  std::vector<int> active_;       // peers with work in the exchange in progress
  std::vector<int> handshaking_;  // peers with an outgoing connection in handshake
  std::vector<Incoming> incoming_;
  Clock::time_point start_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(int rank, int size, std::shared_ptr<Store> store,
                                              const std::string& comm_name, const Hints& hints) {
  return std::make_unique<TcpTransport>(rank, size, std::move(store), comm_name, hints);
}

}  // namespace commx
