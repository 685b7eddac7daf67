// Splits a child's output stream into lines and writes each whole line prefixed with "[rank] ",
// so lines of different ranks never mix. Layer: tools (commx-run).
#pragma once

#include <string>

namespace commx::run {

class LinePrefixer {
 public:
  // Writes to file descriptor `out_fd` (the launcher's stdout or stderr).
  LinePrefixer(int rank, int out_fd);
  // Feeds bytes read from the child; complete lines go out at once.
  void feed(const char* data, size_t n);
  // End of stream: a last line without a newline goes out with one.
  void finish();

 private:
  void emit(const std::string& line);
  std::string prefix_;
  int out_fd_;
  std::string partial_;
};

}  // namespace commx::run
