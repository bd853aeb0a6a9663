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

Status lock(int fd, int operation) {
  while (::flock(fd, operation) != 0)
    if (errno != EINTR) return Status::error(errno_text());
  return Status::ok();
}

// Opens an existing append target read-write (reads check the header and the last line) and
// explains a refusal in the user's terms. ENOENT is left to the caller (a missing file is fine).
Status open_target(const std::string& path, std::string_view what, int flags, int& fd) {
  fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC | flags, 0644);
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return Status::ok();
    ::close(fd);
    fd = -1;
    return Status::error(fmt::format("{} '{}' is not a regular file", what, path));
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

std::atomic<unsigned> g_tmp_counter{0};

}  // namespace

Status check_append_target(const std::string& path, const std::string& header, std::string_view what) {
  int raw = -1;
  MOE_RETURN_IF_ERROR(open_target(path, what, 0, raw));
  Fd fd(raw);
  if (fd.get() < 0) {  // missing: the directory must take a new file
    const std::string dir = parent_dir(path);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return Status::error(
          fmt::format("cannot create {} '{}': directory '{}' does not exist", what, path, dir));
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return Status::error(fmt::format("cannot create {} '{}': {}", what, path, errno_text()));
    return Status::ok();
  }
  MOE_RETURN_IF_ERROR(lock(fd.get(), LOCK_SH));
  struct stat st {};
  ::fstat(fd.get(), &st);
  return check_header(fd.get(), st.st_size, header, path, what);
}

Status append_lines(const std::string& path, const std::string& header, const std::vector<std::string>& lines,
                    std::string_view what) {
  if (lines.empty()) return Status::ok();
  int raw = -1;
  MOE_RETURN_IF_ERROR(open_target(path, what, O_CREAT, raw));
  Fd fd(raw);
  auto io_error = [&](std::string_view action, const Status& s) {
    return Status::error(fmt::format("cannot {} {} '{}': {}", action, what, path, s.message()));
  };
  if (Status s = lock(fd.get(), LOCK_EX); !s) return io_error("lock", s);
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
    if (keep == 0 && !header.empty()) {
      text.push_back('\n');  // the file is just the header, unterminated: finish its line
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
