// Whole-file reads and memory maps.
#include "benchhost/data/file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchhost/error.hpp"
#include "data/internal.hpp"

namespace benchhost::data {

std::string resolve_data_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.rfind("cache:", 0) == 0) {
    fs::path base;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
      base = x;
    else if (const char* h = std::getenv("HOME"); h && *h)
      base = fs::path(h) / ".cache";
    else
      base = fs::temp_directory_path();
    return (base / "benchhost" / dir.substr(6)).string();
  }
  if (dir.empty() || fs::path(dir).is_absolute()) return dir;
  return fs::absolute(fs::path(dir)).string();
}

namespace {
struct Fd {
  int fd = -1;
  ~Fd() { if (fd >= 0) ::close(fd); }
};
}  // namespace

std::size_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    BH_THROW(DataError, "{}: cannot stat: {}", path, errno_message(errno));
  if (!S_ISREG(st.st_mode)) BH_THROW(DataError, "{}: not a regular file", path);
  return static_cast<std::size_t>(st.st_size);
}

std::vector<std::uint8_t> read_file(const std::string& path, std::size_t max_bytes) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) BH_THROW(DataError, "{}: cannot open: {}", path, errno_message(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) BH_THROW(DataError, "{}: cannot stat: {}", path, errno_message(errno));
  if (!S_ISREG(st.st_mode)) BH_THROW(DataError, "{}: not a regular file", path);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > max_bytes) BH_THROW(DataError, "{}: {} bytes is more than the limit of {}", path, size, max_bytes);
  std::vector<std::uint8_t> out(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = ::read(f.fd, out.data() + done, size - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      BH_THROW(DataError, "{}: read failed: {}", path, errno_message(errno));
    }
    if (got == 0) break;  // shrank while reading
    done += static_cast<std::size_t>(got);
  }
  out.resize(done);
  return out;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) BH_THROW(DataError, "{}: cannot open: {}", path, errno_message(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) BH_THROW(DataError, "{}: cannot stat: {}", path, errno_message(errno));
  if (!S_ISREG(st.st_mode)) BH_THROW(DataError, "{}: not a regular file", path);
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<std::size_t>(st.st_size);
  if (m->size_ > 0) {
    // Private and writable: writes through a tensor over the map go to copy-on-write pages,
    // never to the file, and cannot fault.
    void* p = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED) BH_THROW(DataError, "{}: mmap of {} bytes failed: {}", path, m->size_, errno_message(errno));
    m->data_ = static_cast<const std::uint8_t*>(p);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace benchhost::data
