// Not a plugin: a stand-in for a system library (built as libsndfile.so.1) that a hostile or
// careless user leaves in the current directory. Its constructor leaves a marker file there; the
// host must never load it (Note [Run paths], CMakeLists.txt).
#include <fcntl.h>
#include <unistd.h>

__attribute__((constructor)) static void leave_marker() {
  const int fd = ::open("cwd_trap_loaded", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
}
