// Loading and discovery: good plugins load, broken files are listed with the loader's reason and
// never disturb the others, ABI mismatches name both versions, libraries outlive their registry.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

#include "commands.hpp"
#include "plugin_loader.hpp"
#include "test_support.hpp"

using namespace benchhost::host;

namespace {
const BrokenPlugin* find_broken(const PluginRegistry& r, const std::string& file) {
  for (const auto& b : r.broken())
    if (b.path.filename() == file) return &b;
  return nullptr;
}
}  // namespace

TEST(PluginLoader, LoadsTestPluginsWithoutConstructingWorkloads) {
  BrokenPlugin why;
  auto p = load_plugin(bhtest::plugin_file("toy"), &why);
  ASSERT_TRUE(p) << why.reason;
  EXPECT_EQ(p->name, "toy");
  EXPECT_EQ(p->version, "1.0.0");
  EXPECT_EQ(p->abi, fmt::format("{}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR));
  EXPECT_EQ(p->info.metric_name, "mse");
  EXPECT_FALSE(p->info.higher_is_better);
  EXPECT_TRUE(p->descriptor.evaluate);
}

TEST(PluginLoader, AbiMajorMismatchIsRefusedNamingBothVersions) {
  BrokenPlugin why;
  auto p = load_plugin(bhtest::broken_dir() / "abi_major_mismatch.so", &why);
  ASSERT_FALSE(p);
  const std::string theirs = fmt::format("{}.0", BENCHHOST_ABI_MAJOR + 1);
  const std::string ours = fmt::format("{}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR);
  EXPECT_NE(why.reason.find(theirs), std::string::npos) << why.reason;
  EXPECT_NE(why.reason.find(ours), std::string::npos) << why.reason;
}

TEST(PluginLoader, NewerAbiMinorIsRefusedNamingBothVersionsAndMissingSlotNamed) {
  BrokenPlugin why;
  ASSERT_FALSE(load_plugin(bhtest::broken_dir() / "abi_minor_newer.so", &why));
  // The plugin says 1.<ours + 1> (1.4 against this 1.3 host): refused, naming both.
  const std::string theirs = fmt::format("plugin ABI {}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR + 1);
  const std::string ours = fmt::format("this host's ABI {}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR);
  EXPECT_NE(why.reason.find(theirs), std::string::npos) << why.reason;
  EXPECT_NE(why.reason.find(ours), std::string::npos) << why.reason;
  EXPECT_NE(why.reason.find("newer"), std::string::npos) << why.reason;
  ASSERT_FALSE(load_plugin(bhtest::broken_dir() / "missing_slot.so", &why));
  EXPECT_NE(why.reason.find("train_step"), std::string::npos) << why.reason;
}

// Note [One SDK in the process]: a plugin on the host's libbenchhost_sdk shares it; one that brings
// its own copy is refused with the reason; one without any SDK loads and is marked so.
TEST(PluginLoader, APluginMustUseTheHostsSdkLibrary) {
  BrokenPlugin why;
  auto toy = load_plugin(bhtest::plugin_file("toy"), &why);
  ASSERT_TRUE(toy) << why.reason;
  EXPECT_TRUE(toy->shares_sdk);
  ASSERT_FALSE(load_plugin(bhtest::broken_dir() / "own_sdk_copy.so", &why));
  EXPECT_NE(why.reason.find("carries its own copy of the benchhost SDK"), std::string::npos) << why.reason;
  auto bare = load_plugin(bhtest::plugin_file("no_sdk"), &why);
  ASSERT_TRUE(bare) << why.reason;
  EXPECT_FALSE(bare->shares_sdk);
}

TEST(PluginLoader, BrokenFilesAreListedAndOthersStillWork) {
  PluginRegistry reg;
  reg.discover({bhtest::broken_dir(), bhtest::plugin_dir()});
  for (const char* good : {"null", "toy", "throw_setup", "throw_midrun", "decline", "loss_scaling", "abi_1_1"})
    EXPECT_TRUE(reg.find(good)) << good << " should load";
  const BrokenPlugin* missing = find_broken(reg, "missing_symbol.so");
  ASSERT_TRUE(missing);
  EXPECT_NE(missing->reason.find(BENCHHOST_PLUGIN_ENTRY_SYMBOL), std::string::npos) << missing->reason;
  const BrokenPlugin* junk = find_broken(reg, "not_a_library.so");
  ASSERT_TRUE(junk);
  EXPECT_NE(junk->reason.find("cannot be loaded"), std::string::npos) << junk->reason;
  // The loader's own message (dlerror) is carried through.
  EXPECT_NE(junk->reason.find("not_a_library.so"), std::string::npos) << junk->reason;
  ASSERT_TRUE(find_broken(reg, "abi_major_mismatch.so"));
  const std::string listing = list_text(reg);
  EXPECT_NE(listing.find("Broken plugin files"), std::string::npos);
  EXPECT_NE(listing.find("missing_symbol.so"), std::string::npos) << listing;
  EXPECT_NE(listing.find("toy"), std::string::npos);
  EXPECT_NE(listing.find("mse <= 0.002"), std::string::npos) << listing;
}

TEST(PluginLoader, LibraryStaysLoadedWhileAnInstanceLives) {
  std::unique_ptr<WorkloadInstance> w;
  {
    PluginRegistry reg;
    reg.discover({bhtest::plugin_dir()});
    auto p = reg.find("null");
    ASSERT_TRUE(p);
    w = std::make_unique<WorkloadInstance>(p);
  }  // registry and its shared_ptr gone; the instance keeps the library mapped
  bh_run_context ctx{};
  ctx.struct_size = sizeof ctx;
  ctx.mode = "train";
  ctx.device = "cpu";
  ctx.precision = "fp32";
  ctx.batch_size = 3;
  ctx.world_size = 1;
  ctx.options_json = "{\"samples-per-step\": \"0\"}";
  ctx.config_dir = "";
  w->setup(ctx);
  EXPECT_EQ(w->train_step().samples, 3);
  w.reset();
}

TEST(PluginLoader, SearchPathOrder) {
  ::setenv("BENCHHOST_PLUGIN_PATH", "/a:/b::/c", 1);
  auto dirs = plugin_search_path({"/x"}, "/exe");
  ::unsetenv("BENCHHOST_PLUGIN_PATH");
  std::vector<std::filesystem::path> want{"/x", "/a", "/b", "/c", "/exe/plugins"};
  EXPECT_EQ(dirs, want);
}

TEST(PluginLoader, ShadowedDuplicateIsListed) {
  PluginRegistry reg;
  reg.discover({bhtest::plugin_dir(), bhtest::plugin_dir()});
  const BrokenPlugin* b = find_broken(reg, "toy.so");
  ASSERT_TRUE(b);
  EXPECT_NE(b->reason.find("shadowed"), std::string::npos);
}

// A plugin that fills the whole error buffer without a terminating NUL: the host reads the
// buffer and no further.
TEST(PluginLoader, AnUnterminatedErrorMessageIsReadWithinItsBuffer) {
  LoadedPlugin p;
  p.name = "unterminated";
  p.descriptor.check_support = [](const bh_run_context*, bh_error* err) {
    std::memset(err->message, 'x', sizeof err->message);
    return BH_STATUS_UNSUPPORTED;
  };
  const bh_run_context ctx{};
  const std::string why = WorkloadInstance::check_support(p, ctx);
  EXPECT_EQ(why.size(), static_cast<std::size_t>(BH_ERROR_MESSAGE_CAPACITY));
  EXPECT_EQ(why.find_first_not_of('x'), std::string::npos);
}

// Note [Isolated discovery]: files that crash, abort or exit while loading are listed as broken
// with what happened; the good plugins next to them still load, and `list` survives.
TEST(PluginLoader, AFileThatTakesDownItsLoaderIsListedAndTheRestLoad) {
  bhtest::TempDir dir("hostile");
  for (const char* kind : {"hostile_1.so", "hostile_2.so", "hostile_3.so"})
    std::filesystem::copy_file(bhtest::plugin_dir() / "hostile" / kind, dir.path / kind);
  {  // a plugin cut off half-way, as a failed copy leaves it
    const std::string whole = bhtest::read_file(bhtest::plugin_file("toy"));
    std::ofstream(dir.path / "truncated.so", std::ios::binary).write(whole.data(), static_cast<std::streamsize>(whole.size() / 2));
  }
  std::filesystem::copy_file(bhtest::plugin_file("toy"), dir.path / "toy.so");
  ::mkfifo((dir.path / "fifo.so").c_str(), 0644);
  std::filesystem::create_symlink(dir.path / "nowhere.so", dir.path / "dangling.so");
  PluginRegistry reg;
  reg.discover({dir.path, dir.path / "missing"});
  EXPECT_TRUE(reg.find("toy"));
  auto reason = [&](const char* file) {
    const BrokenPlugin* b = find_broken(reg, file);
    return b ? b->reason : std::string("(not listed as broken)");
  };
  EXPECT_NE(reason("hostile_1.so").find("crashed the process with SIGABRT"), std::string::npos) << reason("hostile_1.so");
  EXPECT_NE(reason("hostile_2.so").find("exit status 7"), std::string::npos) << reason("hostile_2.so");
  EXPECT_NE(reason("hostile_3.so").find("crashed the process with SIGSEGV"), std::string::npos) << reason("hostile_3.so");
  EXPECT_NE(reason("truncated.so"), "(not listed as broken)");
  EXPECT_NE(reason("fifo.so").find("not a regular file"), std::string::npos) << reason("fifo.so");
  EXPECT_NE(reason("dangling.so").find("cannot be read"), std::string::npos) << reason("dangling.so");
  ASSERT_EQ(reg.unusable_directories().size(), 1u);
  EXPECT_EQ(reg.unusable_directories()[0].reason, "does not exist");

  auto list = bhtest::run_benchhost(fmt::format("list --plugin-dir '{}' --plugin-dir '{}'", dir.path.string(),
                                                (dir.path / "missing").string()));
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_NE(list.output.find("hostile_3.so"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("Plugin directories not searched"), std::string::npos) << list.output;
  auto run = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4 -w 0 -i 2", dir.path.string()));
  EXPECT_EQ(run.exit_code, 0) << run.output;
}
