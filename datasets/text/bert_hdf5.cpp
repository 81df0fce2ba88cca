#include "bert_hdf5.hpp"

#include <hdf5.h>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <numeric>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "benchhost/error.hpp"

// Set by AddressSanitizer and the other sanitizers when this program is built with one (tools/fuzz.sh,
// tools/sanitize.sh); null otherwise.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
// AddressSanitizer's allocator: hooks on every malloc and free, and the size of a live block.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*))
    __attribute__((weak));
extern "C" std::size_t __sanitizer_get_allocated_size(const volatile void* p) __attribute__((weak));

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

// Set in the reader process (Note [HDF5 files read in a child process]): its address-space limit
// grows by what each dataset, its declared size checked, will take.
bool in_reader_process = false;

// What the reader process may grow by to parse a file's structure, before 64 times the file's size
// (Note [HDF5 files read in a child process]); detail::set_hdf5_reader_base_allowance lowers it
// for a harness whose files are small.
std::int64_t base_allowance = std::int64_t{256} << 20;

// The verdict on a file whose read outgrew its allowance.
constexpr std::string_view kNeedsMoreMemory =
    "reading it needed more memory than a file of its size can justify (Note [HDF5 files read in a child process])";

// Note [The reader process's heap under a sanitizer]
// Under AddressSanitizer the reader process has no address-space limit (its shadow memory reserves
// terabytes), and a 5 KB file on which libhdf5 stops within the limit in 0.4 s without a sanitizer
// (each symbol-table lookup allocating its local heap anew, H5Lexists -> H5HL_protect) grew the
// child at 230 MB/s until the parent's 30 s deadline, past libFuzzer's 20 s timeout (fuzz_hdf5,
// results/fuzz/2026-11-27/campaign/hdf5-s40a). The same bound is kept there by counting: ASan's
// malloc and free hooks add up what the child's heap has grown since the read began, and past the
// budget the address-space limit would give (256 MiB + 64 times the file, plus what allow_memory
// grants each dataset) the child sends the verdict that limit leads to (the file needs more memory
// than its size can justify) and exits. It counts live blocks, which the address space holds at
// least, so it is no stricter than the limit. The hooks are installed in the child only.
struct HeapBudget {
  bool armed = false;
  std::int64_t grown = 0;   // bytes allocated minus bytes freed since the read began
  std::int64_t budget = 0;  // what the read may grow by
  int sock = -1;            // where the verdict goes
  std::string verdict;      // formatted before the read: the hook must not allocate
};
HeapBudget heap;

void send_heap_verdict_and_exit();

void count_malloc(const volatile void* /*ptr*/, std::size_t size) {
  if (!heap.armed) return;
  heap.grown += static_cast<std::int64_t>(size);
  if (heap.grown > heap.budget) send_heap_verdict_and_exit();
}

void count_free(const volatile void* ptr) {
  if (heap.armed && ptr != nullptr) heap.grown -= static_cast<std::int64_t>(__sanitizer_get_allocated_size(ptr));
}

bool heap_hooks_available() {
  return __sanitizer_install_malloc_and_free_hooks != nullptr && __sanitizer_get_allocated_size != nullptr;
}

void allow_memory(double bytes) {
  if (!in_reader_process) return;
  if (heap.armed) {
    constexpr double kMost = 4e18;  // far past any machine, and no overflow when added to
    heap.budget = static_cast<std::int64_t>(std::min(static_cast<double>(heap.budget) + bytes, kMost));
    return;
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  const double want = static_cast<double>(lim.rlim_cur) + bytes;
  lim.rlim_cur = lim.rlim_max != RLIM_INFINITY && want >= static_cast<double>(lim.rlim_max) ? lim.rlim_max
                 : want >= 1.8e19                                                         ? RLIM_INFINITY
                                                                                          : static_cast<rlim_t>(want);
  ::setrlimit(RLIMIT_AS, &lim);
}

// Note [Datasets this process reads itself]
// The reader process need not copy every array to this process: a dataset stored contiguously,
// unfiltered, as native int32, wholly inside the file, is bytes at an offset. For those it sends
// the offset (raw_offset), and this process reads them from the file with pread, one copy and no
// libhdf5, then checks every value as for the rest. That is how MLPerf's fixed-length shards are
// stored; compressed or converted datasets come through the memory file.
std::vector<std::int32_t> read_dataset(hid_t file, const std::string& path, const char* name,
                                       std::vector<hsize_t>& dims, std::int64_t* raw_offset = nullptr) {
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
  if (raw_offset != nullptr) {
    *raw_offset = -1;
    const haddr_t at = H5Dget_offset(set.id);
    hsize_t file_bytes = 0;
    H5Id plist(H5Dget_create_plist(set.id), H5Pclose);
    if (n > 0 && at != HADDR_UNDEF && H5Tequal(type.id, H5T_NATIVE_INT32) > 0 && plist.ok() &&
        H5Pget_layout(plist.id) == H5D_CONTIGUOUS && H5Pget_nfilters(plist.id) == 0 &&
        H5Pget_external_count(plist.id) == 0 && H5Fget_filesize(file, &file_bytes) >= 0 && at <= file_bytes &&
        n * sizeof(std::int32_t) <= file_bytes - at && at < (hsize_t{1} << 62)) {
      *raw_offset = static_cast<std::int64_t>(at);
      return {};
    }
  }
  // The array, and as much again for libhdf5's conversion buffers and decompressed chunks.
  allow_memory(2.0 * static_cast<double>(n) * sizeof(std::int32_t));
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

namespace {
// Every value of `s` in its range (the shapes are the arrays' sizes). The reader process checks
// them, and this process again on what it receives.
// One branch-free pass first (a 270 MB shard in a few tens of ms); the element-by-element loops
// that name the first bad value run only when it finds one.
bool values_in_range(const BertSamples& s, std::int64_t vocab_size) {
  // Unsigned compares: a negative value is huge.
  const auto vocab = static_cast<std::uint32_t>(vocab_size > 0 && vocab_size < (std::int64_t{1} << 31)
                                                    ? vocab_size
                                                    : (std::int64_t{1} << 31));
  const auto seq = static_cast<std::uint32_t>(s.seq_len);
  std::uint32_t bad = 0;
  const auto tokens = static_cast<std::size_t>(s.count * s.seq_len);
  for (std::size_t i = 0; i < tokens; ++i)
    bad |= static_cast<std::uint32_t>(static_cast<std::uint32_t>(s.input_ids[i]) >= vocab) |
           (static_cast<std::uint32_t>(s.input_mask[i]) >> 1) | (static_cast<std::uint32_t>(s.segment_ids[i]) >> 1);
  const auto predictions = static_cast<std::size_t>(s.count * s.max_predictions);
  for (std::size_t i = 0; i < predictions; ++i)
    bad |= static_cast<std::uint32_t>(static_cast<std::uint32_t>(s.masked_lm_positions[i]) >= seq) |
           static_cast<std::uint32_t>(static_cast<std::uint32_t>(s.masked_lm_ids[i]) >= vocab);
  for (std::int64_t i = 0; i < s.count; ++i) bad |= static_cast<std::uint32_t>(s.next_sentence_labels[i]) >> 1;
  return bad == 0;
}

void check_values(const BertSamples& s, const std::string& path, std::int64_t vocab_size) {
  if (values_in_range(s, vocab_size)) return;
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
}

// The read itself, in the reader process (Note [HDF5 files read in a child process]), or here when
// no process can be started. With `raw` (the reader process), datasets this process can read itself
// are left empty and their offsets given (Note [Datasets this process reads itself]), and the values
// are checked here, where all of them arrive.
using RawOffsets = std::array<std::int64_t, 6>;
BertSamples read_checked(const std::string& path, std::int64_t vocab_size, RawOffsets* raw = nullptr) {
  quiet_hdf5();
  if (H5Fis_hdf5(path.c_str()) <= 0)
    BH_THROW(DataError, "'{}' is missing or not an HDF5 file (truncated or corrupt?)", path);
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  BH_CHECK_AS(DataError, file.ok(), "cannot open HDF5 file '{}' (truncated or corrupt?)", path);
  BertSamples s;
  std::vector<hsize_t> d_ids, d_mask, d_seg, d_pos, d_lm, d_nsp;
  auto at = [&](std::size_t k) { return raw != nullptr ? &(*raw)[k] : nullptr; };
  s.input_ids = read_dataset(file.id, path, "input_ids", d_ids, at(0));
  s.input_mask = read_dataset(file.id, path, "input_mask", d_mask, at(1));
  s.segment_ids = read_dataset(file.id, path, "segment_ids", d_seg, at(2));
  s.masked_lm_positions = read_dataset(file.id, path, "masked_lm_positions", d_pos, at(3));
  s.masked_lm_ids = read_dataset(file.id, path, "masked_lm_ids", d_lm, at(4));
  s.next_sentence_labels = read_dataset(file.id, path, "next_sentence_labels", d_nsp, at(5));
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
  if (raw == nullptr) check_values(s, path, vocab_size);
  return s;
}

// Note [HDF5 files read in a child process]
// libhdf5 does not check every structure of a file against its size: a crafted or corrupted
// B-tree or heap address makes it read through a null or wild pointer (fuzz_datasets found one in
// Debian's 1.10.8: H5F__accum_read under H5G__stab_lookup) or loop, and a superblock field can make
// it allocate and zero 1.8 GB for a 6 KB file (fuzz_hdf5). Our checks come after its parsing and
// cannot catch that. So this process never parses a shard: a child process reads it and sends the
// samples back, or where they lie in the file (Note [Datasets this process reads itself]); every
// value is checked here on what arrives. If the child dies, exits or runs past a deadline, the file
// is a DataError naming it; a DataError in the child is sent back as the verdict. The child's
// address space is limited for each file to what it had plus 256 MiB plus 64 times the file's size
// while libhdf5 parses its structure, and grows by twice each dataset's array once its declared size
// has been held against the bytes stored (Note [HDF5 sizes against the bytes stored]), so a file
// that makes libhdf5 allocate what its size cannot justify fails there as a DataError, not here as
// a machine out of memory. (Under a sanitizer, whose shadow memory reserves terabytes of address
// space, the child counts its heap instead: Note [The reader process's heap under a sanitizer].)
// Only when no process can be started does the read run here.
//
// The child is forked once and kept for the next file (Note [One reader process for many files]).
// It only reads files and _exits (glibc keeps malloc usable after fork).
//
// Note [One reader process for many files]
// A fork per file cost every shard a copy of this process's page tables, which grow with the
// shards already loaded, and held fuzz_hdf5 to about 76 files a second (results/fuzz/2026-11-27).
// So one child serves every file: the parent sends it a path over a socket pair and it answers each
// with the samples or a DataError's message. A file before may have left libhdf5's state in that
// child damaged, so a child that has served other files gives no verdict by dying: if it dies or
// runs past the deadline, the file goes to a fresh child, and only a fresh child's death makes it
// a DataError. (A DataError it sends is taken from any child: our checks made it.) The child closes
// every descriptor but its socket and the standard streams (it must not hold this process's pipes
// open), ignores SIGINT and SIGHUP (Ctrl-C is the parent's to handle), and ends when the parent
// closes the socket, when the thread that forked it ends (PR_SET_PDEATHSIG), or after kIdleSeconds
// without a file, so that it does not keep the memory it shares with its parent's past for long.
constexpr int kIdleSeconds = 10;
constexpr std::uint32_t kMaxMessage = 1u << 16;

bool write_all(int fd, const void* src, std::size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// The child's address-space limit for reading `path` (Note [HDF5 files read in a child process]).
void limit_memory_for(const std::string& path, int sock) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  if (__sanitizer_set_death_callback != nullptr) {  // a sanitizer's shadow reserves terabytes
    if (!heap_hooks_available()) return;
    // Note [The reader process's heap under a sanitizer]
    heap.verdict = fmt::format("'{}': {}", path, kNeedsMoreMemory);
    if (heap.verdict.size() > kMaxMessage) heap.verdict.resize(kMaxMessage);
    heap.sock = sock;
    heap.grown = 0;
    const std::uintmax_t counted = ec ? 0 : std::min<std::uintmax_t>(bytes, std::uintmax_t{1} << 50);
    heap.budget = base_allowance + 64 * static_cast<std::int64_t>(counted);
    heap.armed = true;
    return;
  }
  std::uint64_t pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "re")) {
    if (std::fscanf(f, "%" SCNu64, &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages == 0) return;
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0) return;
  const double want = static_cast<double>(pages) * static_cast<double>(::sysconf(_SC_PAGESIZE)) +
                      static_cast<double>(base_allowance) + 64.0 * static_cast<double>(ec ? 0 : bytes);
  rlim_t soft = want >= 1.8e19 ? RLIM_INFINITY : static_cast<rlim_t>(want);
  if (lim.rlim_max != RLIM_INFINITY && soft > lim.rlim_max) soft = lim.rlim_max;
  lim.rlim_cur = soft;
  ::setrlimit(RLIMIT_AS, &lim);
}

// The child's answer: 'M', count, seq_len, max_predictions and the six arrays' file offsets (-1:
// not read from the file; i64 each), with the descriptor of a memory file holding the other arrays
// in order (SCM_RIGHTS: two copies and no round trips through the socket's small buffer); 'S' and
// the same with those arrays on the socket where no memory file can be made; or 'E', a u32 length
// and a DataError's message.
bool send_samples(int sock, const BertSamples& s, const RawOffsets& raw) {
  std::int64_t head[9] = {s.count, s.seq_len, s.max_predictions};
  std::copy(raw.begin(), raw.end(), head + 3);
  const std::vector<const std::vector<std::int32_t>*> arrays{&s.input_ids, &s.input_mask, &s.segment_ids,
                                                            &s.masked_lm_positions, &s.masked_lm_ids,
                                                            &s.next_sentence_labels};
  const int fd = ::memfd_create("benchhost-bert-shard", MFD_CLOEXEC);
  if (fd >= 0) {
    bool ok = true;
    for (std::size_t k = 0; k < arrays.size(); ++k) {
      if (raw[k] >= 0) continue;
      const auto* p = reinterpret_cast<const char*>(arrays[k]->data());
      std::size_t n = arrays[k]->size() * sizeof(std::int32_t);
      while (ok && n > 0) {
        const ssize_t put = ::write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        ok = put > 0;
        if (ok) {
          p += put;
          n -= static_cast<std::size_t>(put);
        }
      }
    }
    if (ok) {
      char tag = 'M';
      iovec iov[2] = {{&tag, 1}, {head, sizeof head}};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
      ssize_t put = 0;
      do put = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
      while (put < 0 && errno == EINTR);
      ::close(fd);
      // The descriptor went with the first byte; the rest of the header, if the socket took less.
      if (put <= 0) return false;
      const std::size_t whole = 1 + sizeof head;
      if (static_cast<std::size_t>(put) < whole)
        return write_all(sock, reinterpret_cast<const char*>(head) + (static_cast<std::size_t>(put) - 1),
                         whole - static_cast<std::size_t>(put));
      return true;
    }
    ::close(fd);
  }
  const char tag = 'S';
  if (!write_all(sock, &tag, 1) || !write_all(sock, head, sizeof head)) return false;
  for (std::size_t k = 0; k < arrays.size(); ++k)
    if (raw[k] < 0 && !write_all(sock, arrays[k]->data(), arrays[k]->size() * sizeof(std::int32_t))) return false;
  return true;
}

bool send_error(int sock, std::string message) {
  if (message.size() > kMaxMessage) message.resize(kMaxMessage);
  const char tag = 'E';
  const auto len = static_cast<std::uint32_t>(message.size());
  return write_all(sock, &tag, 1) && write_all(sock, &len, sizeof len) && write_all(sock, message.data(), len);
}

void send_heap_verdict_and_exit() {
  heap.armed = false;
  const char tag = 'E';
  const auto len = static_cast<std::uint32_t>(heap.verdict.size());
  if (write_all(heap.sock, &tag, 1) && write_all(heap.sock, &len, sizeof len))
    write_all(heap.sock, heap.verdict.data(), len);
  ::_exit(0);
}

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
    in_reader_process = true;
    limit_memory_for(path, sock);
    // Unwinding ends the count before a verdict is sent (Note [The reader process's heap under a
    // sanitizer]).
    struct Disarm {
      ~Disarm() { heap.armed = false; }
    };
    bool sent = false;
    errno = 0;
    try {
      RawOffsets raw;
      raw.fill(-1);
      std::optional<BertSamples> s;
      {
        Disarm disarm;
        s = read_checked(path, vocab_size, &raw);
      }
      sent = send_samples(sock, *s, raw);
    } catch (const DataError& e) {
      std::string message = e.message();
      // libhdf5 reports a failed allocation as a failed read; malloc's errno says which it was.
      if (errno == ENOMEM) message += fmt::format("; {}", kNeedsMoreMemory);
      sent = send_error(sock, message);
    } catch (const std::bad_alloc&) {
      sent = send_error(sock, fmt::format("'{}': {}", path, kNeedsMoreMemory));
    }
    if (!sent) ::_exit(0);
  }
}

class ReaderProcess {
 public:
  ~ReaderProcess() { stop(); }

  // The samples of `path` read by the child, or nothing when no child can be started.
  std::optional<BertSamples> read(const std::string& path, std::int64_t vocab_size) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    // A generous deadline: 30 s plus 2 s per 100 MB.
    const double limit = 30.0 + (ec ? 0.0 : static_cast<double>(bytes) / 50e6);
    if (pid_ >= 0 && owner_ != ::getpid()) forget();  // this process was forked: that child is its parent's
    answered_ = false;
    while (true) {
      if (pid_ < 0 && !start()) return std::nullopt;  // no process to spare: read it here only
      const bool fresh = served_ == 0;
      Outcome o = ask(path, vocab_size, limit);
      if (o.kind == Outcome::kSamples) {
        ++served_;
        answered_ = true;
        check_values(o.samples, path, vocab_size);
        return std::move(o.samples);
      }
      if (o.kind == Outcome::kError) {
        ++served_;
        answered_ = true;
        throw DataError(o.message, __FILE__, __LINE__);
      }
      stop();
      if (!fresh) continue;  // the verdict is a fresh child's (Note [One reader process for many files])
      if (o.kind == Outcome::kDeadline)
        BH_THROW(DataError, "'{}': the HDF5 library did not finish reading this file in {:.0f} s (corrupt?)", path,
                 limit);
      if (WIFSIGNALED(o.status))
        BH_THROW(DataError,
                 "'{}' is corrupt: the HDF5 library crashed reading it (signal {}; Note [HDF5 files read in a child "
                 "process])", path, WTERMSIG(o.status));
      BH_THROW(DataError, "'{}' is corrupt: the HDF5 library failed reading it (exit status {})", path,
               WIFEXITED(o.status) ? WEXITSTATUS(o.status) : -1);
    }
  }

  pid_t pid() const { return pid_; }
  std::int64_t started() const { return started_; }
  bool answered() const { return answered_; }

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

 private:
  struct Outcome {
    enum Kind { kSamples, kError, kEnded, kDeadline };
    Outcome(Kind k, int st = 0) : kind(k), status(st) {}  // NOLINT(google-explicit-constructor)
    Kind kind;
    int status = 0;
    BertSamples samples;
    std::string message;
  };

  Outcome ask(const std::string& path, std::int64_t vocab_size, double limit) {
    std::string request(sizeof(std::uint32_t) + path.size() + sizeof(std::int64_t), '\0');
    const auto len = static_cast<std::uint32_t>(path.size());
    std::memcpy(request.data(), &len, sizeof len);
    std::memcpy(request.data() + sizeof len, path.data(), path.size());
    std::memcpy(request.data() + sizeof len + path.size(), &vocab_size, sizeof vocab_size);
    if (!write_all(sock_, request.data(), request.size())) return ended();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    bool late = false;
    // Until the socket has bytes to read; false when the deadline passed (late) or poll failed.
    auto readable = [&] {
      while (true) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
          late = true;
          return false;
        }
        pollfd pfd{sock_, POLLIN, 0};
        const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1000)));
        if (ready < 0 && errno != EINTR) return false;
        if (ready > 0) return true;
      }
    };
    // Exactly n bytes by the deadline; false when the child closed its end or the deadline passed.
    auto receive = [&](void* dst, std::size_t n) {
      auto* p = static_cast<char*>(dst);
      while (n > 0) {
        if (!readable()) return false;
        const ssize_t got = ::recv(sock_, p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
      }
      return true;
    };
    auto failed = [&]() -> Outcome {
      if (!late) return ended();
      ::kill(pid_, SIGKILL);
      return {Outcome::kDeadline};
    };
    // An answer that breaks the protocol: the child is alive but cannot be trusted; end it.
    auto broken = [&]() -> Outcome {
      ::kill(pid_, SIGKILL);
      return ended();
    };
    // The first byte by recvmsg: a memory file's descriptor comes with it.
    char tag = 0;
    int fd = -1;
    while (true) {
      if (!readable()) return failed();
      iovec iov{&tag, 1};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      const ssize_t got = ::recvmsg(sock_, &msg, MSG_CMSG_CLOEXEC);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return failed();
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
          std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      break;
    }
    struct Closer {
      int fd;
      ~Closer() {
        if (fd >= 0) ::close(fd);
      }
    } closer{fd};
    Outcome o{Outcome::kEnded};
    if (tag == 'E') {
      std::uint32_t n = 0;
      if (!receive(&n, sizeof n)) return failed();
      if (n > kMaxMessage) return broken();
      o.message.resize(n);
      if (!receive(o.message.data(), n)) return failed();
      o.kind = Outcome::kError;
      return o;
    }
    std::int64_t head[9] = {};
    if (tag != 'S' && !(tag == 'M' && fd >= 0)) return broken();
    if (!receive(head, sizeof head)) return failed();
    BertSamples& s = o.samples;
    s.count = head[0];
    s.seq_len = head[1];
    s.max_predictions = head[2];
    // The child's own checks bound these (read_dataset: under 2^31 elements a dataset); a child
    // that sends otherwise is broken.
    constexpr std::int64_t kMax = std::int64_t{1} << 31;
    if (s.count < 0 || s.count >= kMax || s.seq_len < 1 || s.seq_len >= kMax || s.max_predictions < 1 ||
        s.max_predictions >= kMax || s.count * s.seq_len >= kMax || s.count * s.max_predictions >= kMax)
      return broken();
    const auto tokens = static_cast<std::size_t>(s.count * s.seq_len),
               predictions = static_cast<std::size_t>(s.count * s.max_predictions);
    const std::pair<std::vector<std::int32_t>*, std::size_t> arrays[] = {
        {&s.input_ids, tokens},           {&s.input_mask, tokens},    {&s.segment_ids, tokens},
        {&s.masked_lm_positions, predictions}, {&s.masked_lm_ids, predictions},
        {&s.next_sentence_labels, static_cast<std::size_t>(s.count)}};
    // Exactly n bytes from fd at offset `at` into dst.
    auto read_at = [](int from, void* dst, std::size_t n, off_t at) {
      auto* p = static_cast<char*>(dst);
      while (n > 0) {
        const ssize_t got = ::pread(from, p, n, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        at += got;
        n -= static_cast<std::size_t>(got);
      }
      return true;
    };
    std::size_t carried = 0;  // bytes of the arrays the child sends
    for (std::size_t k = 0; k < 6; ++k)
      if (head[3 + k] < 0) carried += arrays[k].second * sizeof(std::int32_t);
    // Note [Datasets this process reads itself]: each offset inside the file as this process sees it.
    struct Closer file{-1};
    for (std::size_t k = 0; k < 6; ++k) {
      const std::int64_t at = head[3 + k];
      if (at < 0) continue;
      if (file.fd < 0) file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      const std::size_t bytes = arrays[k].second * sizeof(std::int32_t);
      if (file.fd < 0 || ::fstat(file.fd, &st) != 0 || at > st.st_size ||
          bytes > static_cast<std::size_t>(st.st_size - at))
        return broken();
      arrays[k].first->resize(arrays[k].second);
      if (!read_at(file.fd, arrays[k].first->data(), bytes, static_cast<off_t>(at))) return broken();
    }
    if (tag == 'M') {
      struct stat st {};
      if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != carried) return broken();
      // Read, not mapped: a mapping of the whole file would double this process's peak memory.
      off_t at = 0;
      for (std::size_t k = 0; k < 6; ++k) {
        if (head[3 + k] >= 0) continue;
        auto [v, n] = arrays[k];
        v->resize(n);
        if (!read_at(fd, v->data(), n * sizeof(std::int32_t), at)) return broken();
        at += static_cast<off_t>(n * sizeof(std::int32_t));
      }
    } else {
      for (std::size_t k = 0; k < 6; ++k) {
        if (head[3 + k] >= 0) continue;
        auto [v, n] = arrays[k];
        v->resize(n);
        if (!receive(v->data(), n * sizeof(std::int32_t))) return failed();
      }
    }
    o.kind = Outcome::kSamples;
    return o;
  }

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
      // Note [The reader process's heap under a sanitizer]
      if (__sanitizer_set_death_callback != nullptr && heap_hooks_available())
        __sanitizer_install_malloc_and_free_hooks(count_malloc, count_free);
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

  // The child closed its end: it ended (died on the file, or exited idle before the request).
  Outcome ended() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return {Outcome::kEnded, status};
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
  bool reaped_ = false, answered_ = false;
};

ReaderProcess& reader_process() {
  static ReaderProcess r;
  return r;
}
}  // namespace

BertSamples read_bert_hdf5(const std::string& path, std::int64_t vocab_size) {
  const std::lock_guard lock(hdf5_mutex());
  if (auto s = reader_process().read(path, vocab_size)) return std::move(*s);
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
bool hdf5_last_verdict_was_a_read() {
  const std::lock_guard lock(hdf5_mutex());
  return reader_process().answered();
}
BertSamples read_bert_hdf5_in_this_process(const std::string& path, std::int64_t vocab_size) {
  const std::lock_guard lock(hdf5_mutex());
  return read_checked(path, vocab_size);
}
void set_hdf5_reader_base_allowance(std::int64_t bytes) {
  BH_CHECK_AS(InvalidArgument, bytes > 0, "set_hdf5_reader_base_allowance: {} bytes (must be positive)", bytes);
  const std::lock_guard lock(hdf5_mutex());
  base_allowance = bytes;
  reader_process().stop();  // the next read forks a child with it
}
}  // namespace detail

}  // namespace benchhost::text
