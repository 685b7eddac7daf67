// Line-prefixing of child output for commx-run. Layer: tools (commx-run).
#include "line_prefixer.h"

#include <unistd.h>

#include <cerrno>

namespace commx::run {
namespace {

// A line longer than this is cut and written in pieces (each prefixed), so one child that
// never writes a newline cannot grow the launcher's memory without bound.
constexpr size_t kMaxLine = 64 * 1024;

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // our own output is gone (closed pipe): drop the line
    done += static_cast<size_t>(w);
  }
}

}  // namespace

LinePrefixer::LinePrefixer(int rank, int out_fd)
    : prefix_("[" + std::to_string(rank) + "] "), out_fd_(out_fd) {}

void LinePrefixer::feed(const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (data[i] == '\n') {
      emit(partial_);
      partial_.clear();
    } else {
      partial_ += data[i];
      if (partial_.size() >= kMaxLine) {
        emit(partial_);
        partial_.clear();
      }
    }
  }
}

void LinePrefixer::finish() {
  if (!partial_.empty()) emit(partial_);
  partial_.clear();
}

void LinePrefixer::emit(const std::string& line) {
  // One write per line: lines from different ranks stay whole.
  write_all(out_fd_, prefix_ + line + "\n");
}

}  // namespace commx::run
