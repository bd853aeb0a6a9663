// The one way this tree writes files. Two kinds of file, two writers:
//
//  - Results files that many runs share (`--out`): appended, never rewritten. Each append takes an
//    exclusive advisory lock (flock) on the file, then writes its rows with O_APPEND in one write(2),
//    starting on a fresh line. Concurrent moe-bench processes therefore interleave whole rows and lose
//    none, and a killed writer leaves no temporary file (there is none) and no half row: a torn last
//    row (a writer that died mid-row, a full disk), one the caller's RowTest says is not a row, is cut
//    off, with a warning, by the next append. A last line that is a whole row but lacks its '\n' (an
//    editor, another tool) is kept and ended; a file that is not only rows of ours (a logbook: no
//    RowTest) is never cut. Symlinks are followed (the link's target grows). A file that cannot be
//    read, or whose first line is not the expected header, is refused rather than replaced.
//
//  - Whole files (dumps, .npy, traces): written to a temporary in the same directory, fsync'ed, and
//    renamed over the target, so a reader sees the old file or the new one, never a prefix. Where the
//    kernel allows it the temporary is unnamed (O_TMPFILE), so a SIGKILL leaves nothing behind; a
//    named temporary is removed on every failure path.
//
// Every failure is a user-level Status naming the path and the reason (errno text).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/status.h"

namespace moe {

// Checks that `path` can take appended rows: an existing file must be a regular file
// (or a character device or pipe, which rows are written to and never read back) that is readable and
// writable and (when `header` is not empty and the file is not) starts with the
// line `header`, and take a write (its last byte written again in place: a /proc file opens read-write as
// root, then fails every write); a missing file needs a writable directory. `what` names the target in
// messages
// ("results file").
Status check_append_target(const std::string& path, const std::string& header, std::string_view what);

// Whether a line (without its '\n') is a whole row of the file. Empty: the file holds more than our rows
// (a logbook), so no line of it is ever judged torn.
using RowTest = std::function<bool(std::string_view line)>;

// Appends `lines` (each one row without its '\n') to `path` as described above, creating the file
// (0644) when missing. With a non-empty `header`, an empty file gets the header first and a non-empty
// one must start with it. A last line without its '\n' is cut off only when `is_row` says it is not a
// row; otherwise it is ended. All lines go out in one write(2) under the lock.
Status append_lines(const std::string& path, const std::string& header, const std::vector<std::string>& lines,
                    std::string_view what, const RowTest& is_row = {});

// The bytes of the regular file `path` from `offset` on (for readers of the files above). The type is
// checked on the open descriptor before any byte is read: a directory, device, pipe or socket is
// refused (a FIFO would block, /dev/zero never ends), as are a missing file, a symlink loop or a name
// the OS refuses, each in one line "`what` PATH: reason".
Status read_regular_file(const std::string& path, uint64_t offset, std::string& text, std::string_view what);

// Runs `edit` on the whole text of the small file `path` of our own (created empty when missing) under
// an exclusive flock, and puts what it leaves in place when that changed: a new file renamed over the old,
// so a process killed at any moment leaves the old text or the new, never a truncated one. The lock is
// the file's: a process that waited on a file renamed away meanwhile finds `path` is another file once
// it holds the lock, and takes the new one's. For records that processes share, such as a store's claims
// (bench/research/claims.h).
Status edit_locked(const std::string& path, std::string_view what,
                   const std::function<Status(std::string&)>& edit);
// The whole text of `path` under a shared flock of the same protocol, opened read-only (a file of ours
// that we may only read is still read). A missing file is empty text.
Status read_locked(const std::string& path, std::string_view what, std::string& text);

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
