// The one file writer (moe/file_io.h): concurrent appenders lose no row, a killed appender leaves no
// temporary and no half row, symlinks are followed, unreadable or foreign files are refused; whole
// files are replaced atomically and a killed writer leaves nothing behind. Also the cgroup memory
// limit reader (moe/memory_limit.h) on a fake /proc + /sys tree.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "moe/file_io.h"
#include "moe/memory_limit.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("moe_file_io_" + std::to_string(getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // World-writable so the unprivileged half of a test can work in it too.
    fs::permissions(dir_, fs::perms::all);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> lines(const std::string& name) const {
    std::ifstream f(path(name));
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) out.push_back(line);
    return out;
  }
  std::string content(const std::string& name) const {
    std::ifstream f(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

// A row long enough that two interleaved writes could not pass for one row.
std::string row(int writer, int i) {
  return "writer=" + std::to_string(writer) + " row=" + std::to_string(i) + " " + std::string(500, 'x') +
         " end";
}

// Whether a line is a whole row() (what a results file's RowTest says of its own rows).
bool whole(std::string_view line) {
  return line.size() >= 4 && line.substr(line.size() - 4) == " end";
}

// Runs `fn` in a forked child and returns its exit code (fn's return value).
int in_child(const std::function<int()>& fn) {
  const pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(FileIoTest, ConcurrentAppendersLoseNoRow) {
  constexpr int kWriters = 4, kRows = 60;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < kRows; ++i)
        if (!append_lines(path("r.csv"), "head", {row(w, i)}, "results file")) _exit(1);
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const std::vector<std::string> got = lines("r.csv");
  ASSERT_EQ(got.size(), size_t(1 + kWriters * kRows));
  EXPECT_EQ(got[0], "head") << "exactly one header, first";
  std::set<std::string> want;
  for (int w = 0; w < kWriters; ++w)
    for (int i = 0; i < kRows; ++i) want.insert(row(w, i));
  EXPECT_EQ(std::set<std::string>(got.begin() + 1, got.end()), want);
}

// edit_locked puts a new file in place by rename (issue 41 item 1: a kill during the old truncate-and-rewrite
// left a truncated tuning file); editors that waited on the old file's lock take the new one's, so no
// increment of a shared counter is lost, and no temporary is left.
TEST_F(FileIoTest, ConcurrentEditorsLoseNoUpdateAndReplaceTheFileWhole) {
  constexpr int kEditors = 4, kEdits = 40;
  const std::string counter = path("counter");
  std::vector<pid_t> pids;
  for (int w = 0; w < kEditors; ++w) {
    const pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < kEdits; ++i) {
        const Status s = edit_locked(counter, "counter", [](std::string& text) {
          text = std::to_string((text.empty() ? 0 : std::stoi(text)) + 1);
          return Status::ok();
        });
        if (!s) _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(content("counter"), std::to_string(kEditors * kEdits));
  EXPECT_EQ(entries(), std::set<std::string>{"counter"}) << "a temporary was left";
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat(counter.c_str(), &before), 0);
  ASSERT_TRUE(edit_locked(counter, "counter", [](std::string& text) {
    text += "0";
    return Status::ok();
  }));
  ASSERT_EQ(::stat(counter.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "rewritten in place, not replaced";
}

// read_locked reads a file it may only read (the tuning file was opened read-write to be read), and a
// missing file as empty text.
TEST_F(FileIoTest, ReadLockedReadsAReadOnlyFileAndAMissingOneAsEmpty) {
  std::ofstream(path("ro")) << "kept";
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const int code = in_child([&] {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      return 3;  // as nobody, where root would open anything
    std::string text;
    if (!read_locked(path("ro"), "file", text) || text != "kept") return 1;
    if (!read_locked(path("missing"), "file", text) || !text.empty()) return 2;
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST_F(FileIoTest, KilledAppenderLeavesNoTempFileAndNoHalfRow) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0;; ++i) append_lines(path("r.jsonl"), "", {row(0, i), row(1, i)}, "results file", whole);
  }
  // Wait (bounded) until the writer is well under way, then kill it wherever it is.
  for (int waited_ms = 0; lines("r.jsonl").size() < 40 && waited_ms < 20000; waited_ms += 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);

  EXPECT_EQ(entries(), std::set<std::string>{"r.jsonl"}) << "no temporary left behind";
  // A second writer is not blocked by the dead one's lock and starts on a fresh line.
  ASSERT_TRUE(append_lines(path("r.jsonl"), "", {row(9, 9)}, "results file", whole));
  const std::vector<std::string> got = lines("r.jsonl");
  ASSERT_GE(got.size(), 41u);
  for (const std::string& line : got) EXPECT_EQ(line.substr(line.size() - 4), " end") << line;
  EXPECT_EQ(got.back(), row(9, 9));
}

TEST_F(FileIoTest, PartialLastRowIsCutOffNotLeftInTheMiddle) {
  const RowTest braces = [](std::string_view l) { return !l.empty() && l.back() == '}'; };
  std::ofstream(path("r.jsonl")) << "{\"a\": 1}\n{\"half";
  ASSERT_TRUE(append_lines(path("r.jsonl"), "", {"{\"b\": 2}"}, "results file", braces));
  EXPECT_EQ(content("r.jsonl"), "{\"a\": 1}\n{\"b\": 2}\n");

  // A csv file holding only its header, unterminated, keeps the header.
  std::ofstream(path("h.csv")) << "x,y";
  ASSERT_TRUE(append_lines(path("h.csv"), "x,y", {"1,2"}, "results file", braces));
  EXPECT_EQ(content("h.csv"), "x,y\n1,2\n");
}

TEST_F(FileIoTest, AWholeLastRowWithoutItsNewlineIsKept) {
  const RowTest braces = [](std::string_view l) { return !l.empty() && l.back() == '}'; };
  std::ofstream(path("r.jsonl")) << "{\"a\": 1}\n{\"b\": 2}";
  ASSERT_TRUE(append_lines(path("r.jsonl"), "", {"{\"c\": 3}"}, "results file", braces));
  EXPECT_EQ(content("r.jsonl"), "{\"a\": 1}\n{\"b\": 2}\n{\"c\": 3}\n");
}

TEST_F(FileIoTest, AFileThatIsNotOnlyOurRowsIsNeverCut) {
  std::ofstream(path("book.md")) << "# Book\nmy last words";
  ASSERT_TRUE(append_lines(path("book.md"), "", {"", "### entry"}, "logbook"));
  EXPECT_EQ(content("book.md"), "# Book\nmy last words\n\n### entry\n");
}

TEST_F(FileIoTest, AppendFollowsSymlinks) {
  std::ofstream(path("target.csv")) << "h\nold\n";
  fs::create_symlink(path("target.csv"), path("link.csv"));
  ASSERT_TRUE(check_append_target(path("link.csv"), "h", "results file"));
  ASSERT_TRUE(append_lines(path("link.csv"), "h", {"new"}, "results file"));
  EXPECT_TRUE(fs::is_symlink(path("link.csv")));
  EXPECT_EQ(content("target.csv"), "h\nold\nnew\n");
}

TEST_F(FileIoTest, RefusesTargetsItCannotAppendTo) {
  fs::create_directory(path("adir"));
  std::ofstream(path("other.csv")) << "a,b\n1,2\n";
  fs::create_symlink(path("loop"), path("loop"));
  const std::pair<std::string, std::string> cases[] = {
      {path("adir"), "is a directory"},
      {path("missing/r.csv"), "does not exist"},
      {path("other.csv"), "does not start with this run's header"},
      {path("loop"), "Too many levels of symbolic links"},
      {path(std::string(300, 'n')), "File name too long"},
  };
  for (const auto& [target, why] : cases) {
    for (bool append : {false, true}) {
      Status s = append ? append_lines(target, "x,y", {"1,2"}, "results file")
                        : check_append_target(target, "x,y", "results file");
      ASSERT_FALSE(s) << target;
      EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(target), std::string::npos) << s.message();
    }
  }
  EXPECT_EQ(content("other.csv"), "a,b\n1,2\n") << "a refused file is left alone";
  EXPECT_TRUE(check_append_target(path("new.csv"), "x,y", "results file")) << "a new file is fine";
  EXPECT_FALSE(fs::exists(path("new.csv"))) << "checking writes nothing";
}

TEST_F(FileIoTest, ADeviceOrPipeIsWrittenToNeverRead) {
  ASSERT_TRUE(check_append_target("/dev/null", "x,y", "results file"));
  ASSERT_TRUE(append_lines("/dev/null", "x,y", {"1,2"}, "results file"));
  std::string text;
  for (const char* target : {"/dev/zero", "/dev/null"}) {
    const Status s = read_regular_file(target, 0, text, "store");
    EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
  }
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0644), 0);
  const Status s = read_regular_file(path("fifo"), 0, text, "store");
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos)
      << "refused without waiting for a writer";
  EXPECT_NE(read_regular_file(dir_.string(), 0, text, "store").message().find("is a directory"),
            std::string::npos);
}

TEST_F(FileIoTest, RefusesAFileItCannotRead) {
  // Write-only for everyone: root reads it anyway, so the check runs as an unprivileged user.
  std::ofstream(path("wo.jsonl")) << "{\"a\": 1}\n";
  fs::permissions(path("wo.jsonl"),
                  fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write);
  const int code = in_child([&] {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 3;
    Status check = check_append_target(path("wo.jsonl"), "", "results file");
    Status append = append_lines(path("wo.jsonl"), "", {"{\"b\": 2}"}, "results file");
    const bool named = check.message().find("cannot read") != std::string::npos &&
                       append.message().find("cannot read") != std::string::npos;
    return !check && !append && named ? 0 : 1;
  });
  EXPECT_EQ(code, 0);
  EXPECT_EQ(content("wo.jsonl"), "{\"a\": 1}\n");
}

TEST_F(FileIoTest, AtomicWriterReplacesWholeOrNotAtAll) {
  std::ofstream(path("f.txt")) << "old";
  ASSERT_TRUE(write_file_atomic(path("f.txt"), "new content"));
  EXPECT_EQ(content("f.txt"), "new content");
  {
    AtomicFileWriter w(path("f.txt"));
    ASSERT_TRUE(w.open());
    ASSERT_TRUE(w.write("abandoned", 9));
  }  // destroyed without commit
  EXPECT_EQ(content("f.txt"), "new content");
  EXPECT_EQ(entries(), std::set<std::string>{"f.txt"});

  Status s = write_file_atomic(path("no/dir/f.txt"), "x");
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(path("no/dir/f.txt")), std::string::npos) << s.message();
}

TEST_F(FileIoTest, KilledAtomicWriterLeavesNothingBehind) {
  std::ofstream(path("f.bin")) << "old";
  in_child([&] {
    AtomicFileWriter w(path("f.bin"));
    if (!w.open()) return 1;
    std::string big(1 << 20, 'z');
    w.write(big.data(), big.size());
    raise(SIGKILL);
    return 0;
  });
  EXPECT_EQ(content("f.bin"), "old");
  EXPECT_EQ(entries(), std::set<std::string>{"f.bin"});
}

TEST_F(FileIoTest, OutputDirIsCreatedOrRefused) {
  ASSERT_TRUE(prepare_output_dir("--dump directory", path("a/b/c")));
  EXPECT_TRUE(fs::is_directory(path("a/b/c")));
  std::ofstream(path("file")) << "x";
  for (const std::string& bad : {path("file"), path("file/sub")}) {
    Status s = prepare_output_dir("--trace-dir directory", bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.message().find("--trace-dir directory '" + bad + "'"), std::string::npos) << s.message();
  }
}

TEST_F(FileIoTest, CgroupMemoryLimitIsTheTightestOnThePath) {
  auto write = [&](const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(path(rel)).parent_path());
    std::ofstream(path(rel)) << text;
  };
  // cgroup v2: the job's own limit is "max", its parent's is the binding one.
  write("v2/proc/self/cgroup", "0::/jobs/job1\n");
  write("v2/sys/fs/cgroup/jobs/job1/memory.max", "max\n");
  write("v2/sys/fs/cgroup/jobs/memory.max", "4294967296\n");
  auto v2 = cgroup_memory_limit(path("v2"));
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->first, 4294967296u);
  EXPECT_NE(v2->second.find("jobs/memory.max"), std::string::npos);

  // cgroup v1: "no limit" is a huge number, the child's limit binds.
  write("v1/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n");
  write("v1/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write("v1/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
  auto v1 = cgroup_memory_limit(path("v1"));
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->first, 1073741824u);

  write("none/proc/self/cgroup", "0::/\n");
  write("none/sys/fs/cgroup/memory.max", "max\n");
  EXPECT_FALSE(cgroup_memory_limit(path("none")));
  EXPECT_FALSE(cgroup_memory_limit(path("absent")));
  EXPECT_GT(memory_limit().bytes, 0);
}

}  // namespace
}  // namespace moe
