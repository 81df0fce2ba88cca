#include "bert_hdf5.hpp"

#include <hdf5.h>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>

#include "benchhost/error.hpp"

namespace benchhost::text {
namespace {

// RAII for HDF5 ids; HDF5's own error printing is silenced so that our DataError is the report.
struct H5Id {
  hid_t id = H5I_INVALID_HID;
  herr_t (*close)(hid_t) = nullptr;
  H5Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5Id(const H5Id&) = delete;
  ~H5Id() {
    if (id >= 0 && close) close(id);
  }
  bool ok() const { return id >= 0; }
};

// Every use of libhdf5 here, one at a time: the library serializes its calls anyway, and a fork
// (Note [One reader process for many files]) while another thread held libhdf5's lock would leave
// the child unable to take it.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

void quiet_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

void write_dataset(hid_t file, const std::string& path, const char* name, const std::vector<std::int32_t>& data,
                   std::vector<hsize_t> dims, hid_t file_type) {
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id set(H5Dcreate2(file, name, file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  BH_CHECK_AS(DataError, space.ok() && set.ok(), "cannot create dataset '{}' in '{}'", name, path);
  if (!data.empty())
    BH_CHECK_AS(DataError, H5Dwrite(set.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0,
                "cannot write dataset '{}' of '{}' (disk full?)", name, path);
}

// Note [HDF5 sizes against the bytes stored]
// A dataset header declares the array's logical size; libhdf5 allocates for it before it looks at
// the data (a fuzzed shard claiming 800M elements made H5Dread ask for 3.3 GB). So before reading,
// the declared bytes are held against what the file stores for the dataset: uncompressed, the
// storage must hold every byte (else the file is truncated); compressed (a filter pipeline), the
// ratio may not exceed what deflate can reach (1032:1, 1100 with headers); nothing stored for a
// non-empty dataset is a file without data; and the storage itself cannot exceed the file.
void check_declared_size(hid_t file, hid_t set, hid_t type, const std::string& path, const char* name, hsize_t n) {
  if (n == 0) return;
  const hsize_t logical = n * static_cast<hsize_t>(std::max<std::size_t>(1, H5Tget_size(type)));
  const hsize_t stored = H5Dget_storage_size(set);
  hsize_t file_bytes = 0;
  BH_CHECK_AS(DataError, H5Fget_filesize(file, &file_bytes) >= 0, "'{}': cannot read its size", path);
  BH_CHECK_AS(DataError, stored > 0, "'{}': dataset '{}' declares {} elements but stores no data", path, name, n);
  BH_CHECK_AS(DataError, stored <= file_bytes, "'{}': dataset '{}' claims {} bytes of storage in a file of {}", path, name,
              stored, file_bytes);
  H5Id plist(H5Dget_create_plist(set), H5Pclose);
  const int filters = plist.ok() ? H5Pget_nfilters(plist.id) : 0;
  if (filters <= 0)
    BH_CHECK_AS(DataError, stored >= logical, "'{}' is truncated: dataset '{}' declares {} bytes but stores {}", path, name,
                logical, stored);
  else
    BH_CHECK_AS(DataError, logical / 1100 <= stored,
                "'{}': dataset '{}' declares {} bytes from {} compressed (beyond what deflate can expand)", path, name,
                logical, stored);
}

std::vector<std::int32_t> read_dataset(hid_t file, const std::string& path, const char* name,
                                       std::vector<hsize_t>& dims) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
    BH_THROW(DataError, "'{}' has no dataset '{}' (not an MLPerf BERT HDF5 shard)", path, name);
  H5Id set(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  BH_CHECK_AS(DataError, set.ok(), "'{}': cannot open dataset '{}'", path, name);
  H5Id type(H5Dget_type(set.id), H5Tclose);
  BH_CHECK_AS(DataError, type.ok() && H5Tget_class(type.id) == H5T_INTEGER,
              "'{}': dataset '{}' is not an integer array", path, name);
  H5Id space(H5Dget_space(set.id), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.id) : -1;
  BH_CHECK_AS(DataError, rank >= 1 && rank <= 2, "'{}': dataset '{}' has rank {}, expected 1 or 2", path, name, rank);
  dims.assign(static_cast<std::size_t>(rank), 0);
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t d : dims) {
    BH_CHECK_AS(DataError, d < (hsize_t{1} << 32), "'{}': dataset '{}' has an implausible dimension {}", path, name, d);
    n *= d;
  }
  BH_CHECK_AS(DataError, n < (hsize_t{1} << 31), "'{}': dataset '{}' has {} elements (too many)", path, name, n);
  check_declared_size(file, set.id, type.id, path, name, n);
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  if (n > 0)
    BH_CHECK_AS(DataError, H5Dread(set.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0,
                "'{}' is truncated or corrupt: reading dataset '{}' failed", path, name);
  return out;
}

}  // namespace

void BertSamples::reserve(std::int64_t n) {
  input_ids.reserve(n * seq_len);
  input_mask.reserve(n * seq_len);
  segment_ids.reserve(n * seq_len);
  masked_lm_positions.reserve(n * max_predictions);
  masked_lm_ids.reserve(n * max_predictions);
  next_sentence_labels.reserve(n);
}

void BertSamples::append(const BertSamples& src, std::int64_t i) {
  auto copy = [&](std::vector<std::int32_t>& dst, const std::vector<std::int32_t>& s, std::int64_t w) {
    dst.insert(dst.end(), s.begin() + i * w, s.begin() + (i + 1) * w);
  };
  copy(input_ids, src.input_ids, seq_len);
  copy(input_mask, src.input_mask, seq_len);
  copy(segment_ids, src.segment_ids, seq_len);
  copy(masked_lm_positions, src.masked_lm_positions, max_predictions);
  copy(masked_lm_ids, src.masked_lm_ids, max_predictions);
  next_sentence_labels.push_back(src.next_sentence_labels[i]);
  ++count;
}

std::int64_t BertSamples::num_predictions(std::int64_t i) const {
  const std::int32_t* p = masked_lm_positions.data() + i * max_predictions;
  std::int64_t k = 0;
  while (k < max_predictions && p[k] > 0) ++k;
  return k;
}

void write_bert_hdf5(const std::string& path, const BertSamples& s) {
  const std::lock_guard lock(hdf5_mutex());
  quiet_hdf5();
  H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  BH_CHECK_AS(DataError, file.ok(), "cannot create HDF5 file '{}'", path);
  const auto n = static_cast<hsize_t>(s.count), L = static_cast<hsize_t>(s.seq_len),
             P = static_cast<hsize_t>(s.max_predictions);
  write_dataset(file.id, path, "input_ids", s.input_ids, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "input_mask", s.input_mask, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "segment_ids", s.segment_ids, {n, L}, H5T_STD_I32LE);
  write_dataset(file.id, path, "masked_lm_positions", s.masked_lm_positions, {n, P}, H5T_STD_I32LE);
  write_dataset(file.id, path, "masked_lm_ids", s.masked_lm_ids, {n, P}, H5T_STD_I32LE);
  write_dataset(file.id, path, "next_sentence_labels", s.next_sentence_labels, {n}, H5T_STD_I8LE);
  BH_CHECK_AS(DataError, H5Fflush(file.id, H5F_SCOPE_GLOBAL) >= 0, "cannot flush '{}'", path);
}

// Set by AddressSanitizer and the other sanitizers when this program is built with one (tools/fuzz.sh,
// tools/sanitize.sh); null otherwise.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {
// The read itself (read_bert_hdf5 runs it twice: Note [HDF5 files read twice]).
BertSamples read_checked(const std::string& path, std::int64_t vocab_size) {
  quiet_hdf5();
  if (H5Fis_hdf5(path.c_str()) <= 0)
    BH_THROW(DataError, "'{}' is missing or not an HDF5 file (truncated or corrupt?)", path);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  BH_CHECK_AS(DataError, file.ok(), "cannot open HDF5 file '{}' (truncated or corrupt?)", path);
  BertSamples s;
  std::vector<hsize_t> d_ids, d_mask, d_seg, d_pos, d_lm, d_nsp;
  s.input_ids = read_dataset(file.id, path, "input_ids", d_ids);
  s.input_mask = read_dataset(file.id, path, "input_mask", d_mask);
  s.segment_ids = read_dataset(file.id, path, "segment_ids", d_seg);
  s.masked_lm_positions = read_dataset(file.id, path, "masked_lm_positions", d_pos);
  s.masked_lm_ids = read_dataset(file.id, path, "masked_lm_ids", d_lm);
  s.next_sentence_labels = read_dataset(file.id, path, "next_sentence_labels", d_nsp);
  BH_CHECK_AS(DataError, d_ids.size() == 2 && d_mask == d_ids && d_seg == d_ids,
              "'{}': input_ids, input_mask and segment_ids must all be [N, seq_len]", path);
  BH_CHECK_AS(DataError, d_pos.size() == 2 && d_lm == d_pos && d_pos[0] == d_ids[0],
              "'{}': masked_lm_positions and masked_lm_ids must be [N, max_predictions] with N = {}", path, d_ids[0]);
  BH_CHECK_AS(DataError, (d_nsp.size() == 1 || (d_nsp.size() == 2 && d_nsp[1] == 1)) && d_nsp[0] == d_ids[0],
              "'{}': next_sentence_labels must be [N] with N = {}", path, d_ids[0]);
  s.count = static_cast<std::int64_t>(d_ids[0]);
  s.seq_len = static_cast<std::int64_t>(d_ids[1]);
  s.max_predictions = static_cast<std::int64_t>(d_pos[1]);
  BH_CHECK_AS(DataError, s.seq_len >= 3 && s.max_predictions >= 1, "'{}': seq_len {} / max_predictions {} too small",
              path, s.seq_len, s.max_predictions);
  for (std::int64_t i = 0; i < s.count * s.seq_len; ++i) {
    const auto id = s.input_ids[i];
    BH_CHECK_AS(DataError, id >= 0 && (vocab_size <= 0 || id < vocab_size),
                "'{}': input_ids of sample {} holds {} outside the vocabulary [0, {})", path, i / s.seq_len, id, vocab_size);
    BH_CHECK_AS(DataError, (s.input_mask[i] | 1) == 1 && (s.segment_ids[i] | 1) == 1,
                "'{}': input_mask / segment_ids of sample {} must be 0 or 1", path, i / s.seq_len);
  }
  for (std::int64_t i = 0; i < s.count * s.max_predictions; ++i) {
    BH_CHECK_AS(DataError, s.masked_lm_positions[i] >= 0 && s.masked_lm_positions[i] < s.seq_len,
                "'{}': masked_lm_positions of sample {} holds {} outside [0, {})", path, i / s.max_predictions,
                s.masked_lm_positions[i], s.seq_len);
    BH_CHECK_AS(DataError, s.masked_lm_ids[i] >= 0 && (vocab_size <= 0 || s.masked_lm_ids[i] < vocab_size),
                "'{}': masked_lm_ids of sample {} holds {} outside the vocabulary", path, i / s.max_predictions,
                s.masked_lm_ids[i]);
  }
  for (std::int64_t i = 0; i < s.count; ++i)
    BH_CHECK_AS(DataError, (s.next_sentence_labels[i] | 1) == 1, "'{}': next_sentence_labels[{}] = {} is not 0 or 1",
                path, i, s.next_sentence_labels[i]);
  return s;
}

// Note [HDF5 files read twice]
// libhdf5 does not check every structure of a file against its size: a crafted or corrupted
// B-tree or heap address makes it read through a null or wild pointer (fuzz_datasets found one in
// Debian's 1.10.8: H5F__accum_read under H5G__stab_lookup) or loop. Our checks come after its
// parsing and cannot catch that. Each file is therefore first read in a child process: if the
// child dies, exits abnormally or runs past a deadline, the file is a DataError naming it and this
// process never parses it; otherwise the same read runs here (the second read costs what the first
// did, once per shard at setup).
//
// The child is forked once and kept for the next file (Note [One reader process for many files]).
// It only reads files and _exits (glibc keeps malloc usable after fork).
//
// Note [One reader process for many files]
// A fork per file cost every shard a copy of this process's page tables, which grow with the
// shards already loaded, and held fuzz_hdf5 to about 76 files a second (results/fuzz/2026-11-27).
// So one child serves every file: the parent sends it a path over a socket pair and it answers each
// with one byte when its read has ended (a DataError in the child is no verdict: the parent's own
// read reports it). A file before may have left libhdf5's state in that child damaged, so a child
// that has served other files gives no verdict: if it dies or runs past the deadline, the file goes
// to a fresh child, and only a fresh child's failure makes it a DataError. The child closes every
// descriptor but its socket and the standard streams (it must not hold this process's pipes open),
// ignores SIGINT and SIGHUP (Ctrl-C is the parent's to handle), and ends when the parent closes
// the socket, when the thread that forked it ends (PR_SET_PDEATHSIG), or after kIdleSeconds
// without a file, so that it does not keep the memory it shares with its parent's past for long.
constexpr int kIdleSeconds = 10;

// The child's side: read requests (u32 path length, path, i64 vocab_size) until EOF or idleness.
[[noreturn]] void serve_reads(int sock) {
  for (const int sig : {SIGINT, SIGHUP, SIGPIPE}) std::signal(sig, SIG_IGN);
  auto read_exact = [&](void* dst, std::size_t n) {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::read(sock, p, n);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  };
  while (true) {
    pollfd pfd{sock, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, kIdleSeconds * 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) ::_exit(0);  // idle (or poll failed): the parent forks a new child when it needs one
    std::uint32_t len = 0;
    std::int64_t vocab_size = 0;
    if (!read_exact(&len, sizeof len) || len > (1u << 20)) ::_exit(0);
    std::string path(len, '\0');
    if (!read_exact(path.data(), len) || !read_exact(&vocab_size, sizeof vocab_size)) ::_exit(0);
    try {
      (void)read_checked(path, vocab_size);
    } catch (...) {  // a DataError: the parent's own read reports it
    }
    const char done = 1;
    if (::send(sock, &done, 1, MSG_NOSIGNAL) != 1) ::_exit(0);
  }
}

class ReaderProcess {
 public:
  ~ReaderProcess() { stop(); }

  void probe(const std::string& path, std::int64_t vocab_size) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    // A generous deadline: 30 s plus 2 s per 100 MB.
    const double limit = 30.0 + (ec ? 0.0 : static_cast<double>(bytes) / 50e6);
    if (pid_ >= 0 && owner_ != ::getpid()) forget();  // this process was forked: that child is its parent's
    while (true) {
      if (pid_ < 0 && !start()) return;  // no process to spare: read it here only
      const bool fresh = served_ == 0;
      const Outcome o = ask(path, vocab_size, limit);
      if (o.kind == Outcome::kRead) {
        ++served_;
        return;
      }
      stop();
      if (!fresh) continue;  // the verdict is a fresh child's (Note [One reader process for many files])
      if (o.kind == Outcome::kDeadline)
        BH_THROW(DataError, "'{}': the HDF5 library did not finish reading this file in {:.0f} s (corrupt?)", path,
                 limit);
      if (WIFSIGNALED(o.status))
        BH_THROW(DataError,
                 "'{}' is corrupt: the HDF5 library crashed reading it (signal {}; Note [HDF5 files read twice])", path,
                 WTERMSIG(o.status));
      BH_THROW(DataError, "'{}' is corrupt: the HDF5 library failed reading it (exit status {})", path,
               WIFEXITED(o.status) ? WEXITSTATUS(o.status) : -1);
    }
  }

  pid_t pid() const { return pid_; }
  std::int64_t started() const { return started_; }

 private:
  struct Outcome {
    enum Kind { kRead, kEnded, kDeadline } kind;
    int status = 0;
  };

  bool start() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return false;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      // A fault here is the answer, not a crash of this program: die of it plainly, without the
      // handlers this process installed (a sanitizer's or a fuzzer's report, a crash reporter).
      for (const int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGTERM})
        std::signal(sig, SIG_DFL);
      // Under a sanitizer, libhdf5 asking malloc for 2^59 bytes ends this child with a report and
      // exit status 1, which is the answer too; the death callback a fuzzer set would record the
      // input as a crash of this program and print its statistics from this child.
      if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(nullptr);
      int sock = fds[1];
      if (sock != 3) {
        if (::dup2(sock, 3) < 0) ::_exit(0);
        sock = 3;
      }
      ::close_range(4, ~0u, 0);
      serve_reads(sock);
    }
    ::close(fds[1]);
    owner_ = parent;
    pid_ = pid;
    sock_ = fds[0];
    served_ = 0;
    ++started_;
    return true;
  }

  Outcome ask(const std::string& path, std::int64_t vocab_size, double limit) {
    std::string request(sizeof(std::uint32_t) + path.size() + sizeof(std::int64_t), '\0');
    const auto len = static_cast<std::uint32_t>(path.size());
    std::memcpy(request.data(), &len, sizeof len);
    std::memcpy(request.data() + sizeof len, path.data(), path.size());
    std::memcpy(request.data() + sizeof len + path.size(), &vocab_size, sizeof vocab_size);
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(sock_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ended();
      sent += static_cast<std::size_t>(n);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ::kill(pid_, SIGKILL);
        return {Outcome::kDeadline, 0};
      }
      pollfd pfd{sock_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1000)));
      if (ready < 0 && errno != EINTR) return ended();
      if (ready <= 0) continue;
      char done = 0;
      const ssize_t n = ::recv(sock_, &done, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1) return {Outcome::kRead, 0};
      return ended();
    }
  }

  // The child closed its end: it ended (died on the file, or exited idle before the request).
  Outcome ended() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return {Outcome::kEnded, status};
  }

  void stop() {
    // A process forked from this one (without exec) that exits normally runs this too: the child is
    // its parent's, not its to end.
    if (owner_ != ::getpid()) return;
    if (sock_ >= 0) ::close(sock_);
    sock_ = -1;
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    forget();
  }

  void forget() {
    if (sock_ >= 0) ::close(sock_);
    sock_ = -1;
    pid_ = -1;
    served_ = 0;
    reaped_ = false;
  }

  pid_t owner_ = -1, pid_ = -1;
  int sock_ = -1;
  std::int64_t served_ = 0, started_ = 0;
  bool reaped_ = false;
};

ReaderProcess& reader_process() {
  static ReaderProcess r;
  return r;
}
}  // namespace

BertSamples read_bert_hdf5(const std::string& path, std::int64_t vocab_size) {
  const std::lock_guard lock(hdf5_mutex());
  reader_process().probe(path, vocab_size);
  return read_checked(path, vocab_size);
}

namespace detail {
std::int64_t hdf5_reader_processes_started() {
  const std::lock_guard lock(hdf5_mutex());
  return reader_process().started();
}
int hdf5_reader_process_id() {
  const std::lock_guard lock(hdf5_mutex());
  return reader_process().pid();
}
}  // namespace detail

}  // namespace benchhost::text
