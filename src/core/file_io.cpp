#include "moe/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

namespace moe {
namespace {

namespace fs = std::filesystem;

// Closes on scope exit (which also drops a flock taken on it).
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text() {
  return std::strerror(errno);
}

std::string parent_dir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

Status write_all(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::error(n < 0 ? errno_text() : "short write");
    data += n;
    bytes -= size_t(n);
  }
  return Status::ok();
}

// Takes the lock. Another process's append holds it for milliseconds; a wait of over a second (a
// writer stopped, a lock taken by hand) is said on stderr, once per process and file.
Status lock(int fd, int operation, std::string_view what, const std::string& path) {
  for (int tries = 0; tries < 100; ++tries) {
    if (::flock(fd, operation | LOCK_NB) == 0) return Status::ok();
    if (errno != EWOULDBLOCK && errno != EINTR) return Status::error(errno_text());
    ::usleep(10000);
  }
  static std::set<std::string> announced;
  if (announced.insert(path).second)
    fmt::print(stderr, "moe: waiting for the lock on {} '{}' (another process is using it)\n", what, path);
  while (::flock(fd, operation) != 0)
    if (errno != EINTR) return Status::error(errno_text());
  return Status::ok();
}

// What an append target is: missing, a regular file, or a stream (a character device or a pipe: written
// to, never read, locked or cut).
enum class Target { missing, file, stream };

// Opens an existing append target read-write (reads check the header and the last line) and
// explains a refusal in the user's terms. A missing file is left to the caller unless `flags` has
// O_CREAT. A FIFO is not opened here (a reader waiting on it would take an open and close for the
// end of its input); a character device is opened read-write like a file.
Status open_target(const std::string& path, std::string_view what, int flags, int& fd, Target& kind) {
  kind = Target::missing;
  fd = -1;
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
    kind = Target::stream;
    return Status::ok();
  }
  fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | flags, 0644);
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
      kind = S_ISREG(st.st_mode) ? Target::file : Target::stream;
      return Status::ok();
    }
    ::close(fd);
    fd = -1;
    return Status::error(
        fmt::format("{} '{}' is not a regular file, a character device or a pipe", what, path));
  }
  const int err = errno;
  if (err == ENOENT && !(flags & O_CREAT)) return Status::ok();
  if (err == EISDIR) return Status::error(fmt::format("{} '{}' is a directory", what, path));
  if (err == EACCES && ::access(path.c_str(), R_OK) != 0)
    return Status::error(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(err)));
  if (err == ENOENT || err == ENOTDIR)
    return Status::error(
        fmt::format("cannot create {} '{}': directory '{}' does not exist", what, path, parent_dir(path)));
  return Status::error(fmt::format("cannot write {} '{}': {}", what, path, std::strerror(err)));
}

// Appends to a stream, opened write-only once per process and path and kept open until the process
// exits, so that a pipe's reader sees one stream (a close would end its input) and a csv header goes
// out once. A FIFO's writer waits for a reader, and says so.
Status append_to_stream(const std::string& path, const std::string& header,
                        const std::vector<std::string>& lines, std::string_view what) {
  static std::map<std::string, int> open_streams;
  auto [it, fresh] = open_streams.emplace(path, -1);
  std::string text;
  if (fresh) {
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENXIO) {
      fmt::print(stderr, "moe: waiting for a reader of {} '{}' (a pipe)\n", what, path);
      fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    }
    if (fd < 0 || ::fcntl(fd, F_SETFL, 0) != 0) {
      const Status s = Status::error(fmt::format("cannot write {} '{}': {}", what, path, errno_text()));
      if (fd >= 0) ::close(fd);
      open_streams.erase(it);
      return s;
    }
    it->second = fd;
    if (!header.empty()) text += header + "\n";
  }
  for (const std::string& line : lines) text += line + "\n";
  if (Status s = write_all(it->second, text.data(), text.size()); !s)
    return Status::error(fmt::format("cannot write {} '{}': {}", what, path, s.message()));
  return Status::ok();
}

// The first line of the file (without '\n'); reads at most `limit` bytes.
std::string first_line(int fd, size_t limit) {
  std::string line;
  char buf[4096];
  for (off_t at = 0; line.size() < limit;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    const char* nl = static_cast<const char*>(std::memchr(buf, '\n', size_t(n)));
    line.append(buf, nl ? size_t(nl - buf) : size_t(n));
    if (nl) break;
    at += n;
  }
  return line;
}

Status check_header(int fd, off_t size, const std::string& header, const std::string& path,
                    std::string_view what) {
  if (header.empty() || size == 0) return Status::ok();
  if (first_line(fd, header.size() + 1) == header) return Status::ok();
  return Status::error(
      fmt::format("{} '{}' does not start with this run's header (another format, version or --check "
                  "setting); use a new file",
                  what, path));
}

// Offset just past the last '\n' before `size` (0 when there is none).
off_t end_of_last_line(int fd, off_t size) {
  char buf[4096];
  for (off_t end = size; end > 0;) {
    const off_t start = std::max<off_t>(0, end - off_t(sizeof buf));
    const ssize_t n = ::pread(fd, buf, size_t(end - start), start);
    if (n <= 0) return 0;
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') return start + i + 1;
    end = start;
  }
  return 0;
}

// Bytes [from, to) of the file into `out`, fewer where the file ends sooner (an append cut a torn row
// meanwhile); false on a read error.
bool read_range(int fd, off_t from, off_t to, std::string& out) {
  out.resize(size_t(to - from));
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, from + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) out.resize(done);
    done += size_t(n);
  }
  return true;
}

std::atomic<unsigned> g_tmp_counter{0};

// Whether a file takes writes, found by writing: a /proc file opens read-write (as root) and then fails every
// write with EIO, so a run would end by losing its row. The last byte is written again in place, or an empty
// file gets a newline that is cut off again, under the writers' lock: the file ends as it began. (A second
// descriptor: pwrite on one opened O_APPEND appends.)
Status probe_writes(int fd, const std::string& path, off_t size, std::string_view what) {
  Fd writer(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  char byte = '\n';
  const bool wrote = writer.get() >= 0 && (size == 0 || ::pread(fd, &byte, 1, size - 1) == 1) &&
                     ::pwrite(writer.get(), &byte, 1, size > 0 ? size - 1 : 0) == 1 &&
                     (size > 0 || ::ftruncate(writer.get(), 0) == 0);
  if (!wrote) return Status::error(fmt::format("cannot write {} '{}': {}", what, path, errno_text()));
  return Status::ok();
}

}  // namespace

Status check_append_target(const std::string& path, const std::string& header, std::string_view what) {
  int raw = -1;
  Target kind = Target::missing;
  MOE_RETURN_IF_ERROR(open_target(path, what, 0, raw, kind));
  Fd fd(raw);
  if (kind == Target::stream) return Status::ok();
  if (kind == Target::missing) {  // the directory must take a new file
    const std::string dir = parent_dir(path);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return Status::error(
          fmt::format("cannot create {} '{}': directory '{}' does not exist", what, path, dir));
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return Status::error(fmt::format("cannot create {} '{}': {}", what, path, errno_text()));
    return Status::ok();
  }
  MOE_RETURN_IF_ERROR(lock(fd.get(), LOCK_EX, what, path));
  struct stat st {};
  ::fstat(fd.get(), &st);
  MOE_RETURN_IF_ERROR(check_header(fd.get(), st.st_size, header, path, what));
  return probe_writes(fd.get(), path, st.st_size, what);
}

Status append_lines(const std::string& path, const std::string& header, const std::vector<std::string>& lines,
                    std::string_view what, const RowTest& is_row) {
  if (lines.empty()) return Status::ok();
  int raw = -1;
  Target kind = Target::missing;
  MOE_RETURN_IF_ERROR(open_target(path, what, O_CREAT, raw, kind));
  Fd fd(raw);
  if (kind == Target::stream) return append_to_stream(path, header, lines, what);
  auto io_error = [&](std::string_view action, const Status& s) {
    return Status::error(fmt::format("cannot {} {} '{}': {}", action, what, path, s.message()));
  };
  if (Status s = lock(fd.get(), LOCK_EX, what, path); !s) return io_error("lock", s);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error("read", Status::error(errno_text()));
  off_t size = st.st_size;
  MOE_RETURN_IF_ERROR(check_header(fd.get(), size, header, path, what));

  std::string text;
  char last = '\n';
  if (size > 0 && ::pread(fd.get(), &last, 1, size - 1) != 1)
    return io_error("read", Status::error(errno_text()));
  if (last != '\n') {
    const off_t keep = end_of_last_line(fd.get(), size);
    // Rows are kilobytes (megabytes with very many timed calls): a longer line is no torn row of ours.
    constexpr off_t kLongestRow = off_t(64) << 20;
    if (is_row && size - keep > kLongestRow)
      return Status::error(fmt::format(
          "{} '{}' ends in a line of {} bytes with no newline: not a results file", what, path, size - keep));
    std::string tail;
    // The file is just the header, unterminated; or not ours to judge; or its last row is whole:
    // finish the line. The tail is read only where a RowTest will judge it.
    const bool whole =
        (keep == 0 && !header.empty()) || !is_row || (read_range(fd.get(), keep, size, tail) && is_row(tail));
    if (whole) {
      text.push_back('\n');
    } else {
      // A row cut short by a writer that died mid-write (or a full disk): no reader can use it, and
      // left in place it would end up in the middle of the file.
      if (::ftruncate(fd.get(), keep) != 0) return io_error("repair", Status::error(errno_text()));
      fmt::print(stderr, "moe: warning: removed a partial last row ({} bytes) from {} '{}'\n", size - keep,
                 what, path);
      size = keep;
    }
  }
  if (size == 0 && !header.empty()) text += header + "\n";
  for (const std::string& line : lines) text += line + "\n";
  if (Status s = write_all(fd.get(), text.data(), text.size()); !s) return io_error("write", s);
  if (::fsync(fd.get()) != 0) return io_error("sync", Status::error(errno_text()));
  return Status::ok();
}

Status read_regular_file(const std::string& path, uint64_t offset, std::string& text, std::string_view what) {
  text.clear();
  // O_NONBLOCK: opening a FIFO must not wait for a writer before its type is known.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0)
    return Status::error(
        fmt::format("{} {}: {}", what, path, errno == ENOENT ? "no such file" : errno_text()));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::error(fmt::format("{} {}: {}", what, path, errno_text()));
  if (S_ISDIR(st.st_mode)) return Status::error(fmt::format("{} {}: is a directory", what, path));
  if (!S_ISREG(st.st_mode))
    return Status::error(fmt::format("{} {}: not a regular file (a device, pipe or socket)", what, path));
  if (off_t(offset) >= st.st_size) return Status::ok();
  if (!read_range(fd.get(), off_t(offset), st.st_size, text))
    return Status::error(fmt::format("{} {}: cannot be read: {}", what, path, errno_text()));
  return Status::ok();
}

namespace {

// Opens `path` (flags: O_RDWR | O_CREAT, or O_RDONLY) and takes its flock (LOCK_EX or LOCK_SH), again
// while `path` names another file than the one locked (an editor renamed a new one over it meanwhile).
// Leaves the file's text in `text`; a missing file read-only is empty text and fd -1.
Status open_locked(const std::string& path, std::string_view what, int flags, int how, Fd& fd,
                   std::string& text) {
  auto io_error = [&](std::string_view action, const std::string& why) {
    return Status::error(fmt::format("cannot {} {} '{}': {}", action, what, path, why));
  };
  for (;;) {
    fd = Fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
    if (fd.get() < 0 && errno == ENOENT && !(flags & O_CREAT)) return Status::ok();
    if (fd.get() < 0) return io_error("open", errno_text());
    struct stat st {
    }, named{};
    if (::fstat(fd.get(), &st) != 0) return io_error("read", errno_text());
    if (!S_ISREG(st.st_mode)) return io_error("use", "not a regular file");
    if (Status s = lock(fd.get(), how, what, path); !s) return io_error("lock", s.message());
    if (::stat(path.c_str(), &named) != 0 || named.st_ino != st.st_ino || named.st_dev != st.st_dev)
      continue;  // renamed over while we waited: lock the file that is there now
    if (::fstat(fd.get(), &st) != 0 || !read_range(fd.get(), 0, st.st_size, text))
      return io_error("read", errno_text());
    return Status::ok();
  }
}

}  // namespace

Status edit_locked(const std::string& path, std::string_view what,
                   const std::function<Status(std::string&)>& edit) {
  Fd fd;
  std::string text;
  MOE_RETURN_IF_ERROR(open_locked(path, what, O_RDWR | O_CREAT, LOCK_EX, fd, text));
  const std::string before = text;
  MOE_RETURN_IF_ERROR(edit(text));
  if (text == before) return Status::ok();
  // Renamed over the old file while its lock is held: waiters then find the new file (open_locked).
  if (Status s = write_file_atomic(path, text); !s)
    return Status::error(fmt::format("cannot write {} '{}': {}", what, path, s.message()));
  return Status::ok();
}

Status read_locked(const std::string& path, std::string_view what, std::string& text) {
  Fd fd;
  text.clear();
  return open_locked(path, what, O_RDONLY, LOCK_SH, fd, text);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {}

AtomicFileWriter::~AtomicFileWriter() {
  discard();
}

void AtomicFileWriter::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !named_tmp_.empty()) ::unlink(named_tmp_.c_str());
  named_tmp_.clear();
}

Status AtomicFileWriter::failure(std::string_view action) const {
  return Status::error(fmt::format("cannot {} '{}': {}", action, path_, errno_text()));
}

Status AtomicFileWriter::open() {
  discard();
  committed_ = false;
  // An unnamed temporary needs /proc/self/fd to be linked into place without privileges.
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(parent_dir(path_).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd_ >= 0) return Status::ok();
  }
  named_tmp_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), g_tmp_counter++);
  fd_ = ::open(named_tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ >= 0) return Status::ok();
  Status s = failure("write");
  named_tmp_.clear();
  return s;
}

Status AtomicFileWriter::write(const void* data, size_t bytes) {
  MOE_CHECK(fd_ >= 0, "AtomicFileWriter::write before open");
  if (Status s = write_all(fd_, static_cast<const char*>(data), bytes); !s)
    return Status::error(fmt::format("cannot write '{}': {}", path_, s.message()));
  return Status::ok();
}

Status AtomicFileWriter::commit() {
  MOE_CHECK(fd_ >= 0, "AtomicFileWriter::commit before open");
  if (::fsync(fd_) != 0) return failure("write");
  if (named_tmp_.empty()) {
    // rename() needs a name, and linkat cannot replace an existing file: name the data first.
    std::string tmp = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), g_tmp_counter++);
    const std::string self = fmt::format("/proc/self/fd/{}", fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return failure("write");
    named_tmp_ = std::move(tmp);
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return failure("write");
  if (::rename(named_tmp_.c_str(), path_.c_str()) != 0) return failure("write");
  committed_ = true;
  named_tmp_.clear();
  // The rename itself must reach the disk too.
  Fd dir(::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
  return Status::ok();
}

Status write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFileWriter w(path);
  MOE_RETURN_IF_ERROR(w.open());
  MOE_RETURN_IF_ERROR(w.write(content.data(), content.size()));
  return w.commit();
}

Status prepare_output_dir(std::string_view what, const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return Status::error(fmt::format("cannot write {} '{}': it exists and is not a directory", what, dir));
  fs::create_directories(dir, ec);
  if (ec) return Status::error(fmt::format("cannot create {} '{}': {}", what, dir, ec.message()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return Status::error(fmt::format("cannot write {} '{}': {}", what, dir, errno_text()));
  return Status::ok();
}

}  // namespace moe
