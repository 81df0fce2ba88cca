#include <cstdio>
#include <cstdlib>
#include <vector>
int main(int argc, char**) {
  void* m = std::malloc((size_t)3 << 30);
  std::printf("malloc: %p\n", m);
  std::fflush(stdout);
  std::vector<char> v((size_t)3 << 30 + argc - 1);
  std::printf("vector: %zu\n", v.size());
}
