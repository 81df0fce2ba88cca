// Compiled into an SDK area that has no sources yet, so its object library is never empty.
namespace {
[[maybe_unused]] int area_has_no_sources_yet = 0;
}
