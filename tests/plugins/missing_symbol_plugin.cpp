// A valid shared object that exports no benchhost entry point.
extern "C" __attribute__((visibility("default"))) int not_the_benchhost_entry_point(void) { return 42; }
