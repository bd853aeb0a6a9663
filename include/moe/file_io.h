// The one way this tree writes files. Two kinds of file, two writers:
//
//  - Results files that many runs share (`--out`): appended, never rewritten. Each append takes an
//    exclusive advisory lock (flock) on the file, then writes its rows with O_APPEND in one write(2),
//    starting on a fresh line. Concurrent moe-bench processes therefore interleave whole rows and lose
//    none, and a killed writer leaves no temporary file (there is none) and no half row: a partial last
//    line (a writer that died mid-row, a full disk) is cut off, with a warning, by the next append.
//    Symlinks are followed (the link's target grows). A file that cannot be read, or whose first line
//    is not the expected header, is refused rather than replaced.
//
//  - Whole files (dumps, .npy, traces): written to a temporary in the same directory, fsync'ed, and
//    renamed over the target, so a reader sees the old file or the new one, never a prefix. Where the
//    kernel allows it the temporary is unnamed (O_TMPFILE), so a SIGKILL leaves nothing behind; a
//    named temporary is removed on every failure path.
//
// Every failure is a user-level Status naming the path and the reason (errno text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moe/status.h"

namespace moe {

// Checks, without writing, that `path` can take appended rows: an existing file must be a regular file
// that is readable and writable and (when `header` is not empty and the file is not) starts with the
// line `header`; a missing file needs a writable directory. `what` names the target in messages
// ("results file").
Status check_append_target(const std::string& path, const std::string& header, std::string_view what);

// Appends `lines` (each one row without its '\n') to `path` as described above, creating the file
// (0644) when missing. With a non-empty `header`, an empty file gets the header first and a non-empty
// one must start with it. All lines go out in one write(2) under the lock.
Status append_lines(const std::string& path, const std::string& header, const std::vector<std::string>& lines,
                    std::string_view what);

// Whole-file writer: open(), any number of write()s, commit(). Destroying it without a successful
// commit() leaves `path` untouched and no temporary behind.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Status open();
  Status write(const void* data, size_t bytes);
  Status commit();

 private:
  Status failure(std::string_view action) const;
  void discard();

  std::string path_;
  std::string named_tmp_;  // the temporary's name; empty while it is unnamed (O_TMPFILE)
  int fd_ = -1;
  bool committed_ = false;
};

// `content` as the whole of `path`, atomically (AtomicFileWriter).
Status write_file_atomic(const std::string& path, std::string_view content);

// Makes `dir` (and its parents) exist as a writable directory, for an output flag such as --dump.
// Fails, naming `flag` and the path, when it is a file, cannot be created or is not writable.
Status prepare_output_dir(std::string_view flag, const std::string& dir);

}  // namespace moe
