// Note [A busy machine] (core/machine_load.cpp): the verdict on raw CPU counters, and a real run
// next to processes that keep every CPU busy, flagged in JSON, CSV and on the console.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "machine_load.hpp"
#include "test_support.hpp"

using benchhost::host::LoadWindow;
using benchhost::host::MachineLoad;

TEST(MachineLoad, JudgesOtherWorkAndStealFromTheCounters) {
  // 2 CPUs for 1 s at 100 jiffies/s: 200 jiffies. This run used 1 CPU; nothing else ran.
  MachineLoad idle = LoadWindow::judge(2, 1.0, 200, 100, 0, 100, 1.0);
  EXPECT_NEAR(idle.other_cpus, 0.0, 1e-9);
  EXPECT_FALSE(idle.busy);
  // Another process kept the second CPU busy: 1 other CPU, busy.
  MachineLoad one_more = LoadWindow::judge(2, 1.0, 200, 200, 0, 100, 2.0);
  EXPECT_NEAR(one_more.other_cpus, 1.0, 1e-9);
  EXPECT_TRUE(one_more.busy);
  // A little background (0.2 of a CPU on 2) is not a busy machine.
  EXPECT_FALSE(LoadWindow::judge(2, 1.0, 200, 120, 0, 100, 0.2).busy);
  // On 64 CPUs the bar is 10% of them: 5 other CPUs is not busy yet, 7 is.
  EXPECT_FALSE(LoadWindow::judge(64, 1.0, 6400, 600, 0, 100, 5).busy);
  EXPECT_TRUE(LoadWindow::judge(64, 1.0, 6400, 800, 0, 100, 7).busy);
  // A hypervisor that took 10% of the time.
  MachineLoad stolen = LoadWindow::judge(2, 1.0, 200, 100, 20, 100, 1.0);
  EXPECT_NEAR(stolen.steal_fraction, 0.1, 1e-9);
  EXPECT_TRUE(stolen.busy);
  // Too short a window to judge: the counters tick at 100 Hz.
  EXPECT_FALSE(LoadWindow::judge(2, 0.1, 20, 20, 0, 10, 2.0).busy);
  // Another rank of this run on the node is not other work (the caller counts it in own time).
  EXPECT_FALSE(LoadWindow::judge(2, 1.0, 200, 200, 0, 200, 2.0).busy);
}

TEST(MachineLoad, ARealWindowReadsThisMachine) {
  const LoadWindow w;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto m = w.finish();
  ASSERT_TRUE(m.has_value()) << "/proc/stat is readable on Linux";
  EXPECT_GE(m->cpus, 1);
  EXPECT_NEAR(m->seconds, 0.3, 0.25);
  EXPECT_GE(m->other_cpus, 0.0);
  EXPECT_LE(m->other_cpus, m->cpus + 0.5);
}

// Spinning threads in this test process are other work for the benchhost process it starts: the
// train point is flagged busy in the report, the CSV and on the console, and keeps PASSED.
TEST(MachineLoad, APointMeasuredNextToSpinningProcessesIsFlaggedBusy) {
  // One spinning thread per CPU, stopped and joined however the test leaves (an ASSERT included).
  struct Spinners {
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    Spinners() {
      for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
        threads.emplace_back([this] {
          volatile std::uint64_t x = 0;
          while (!stop.load(std::memory_order_relaxed)) x = x + 1;
        });
    }
    ~Spinners() {
      stop = true;
      for (auto& t : threads) t.join();
    }
  };
  auto spinners = std::make_unique<Spinners>();
  bhtest::TempDir tmp("machine_load");
  const auto json_path = tmp.path / "r.json", csv_path = tmp.path / "r.csv";
  // --threads 1: the run itself wants one CPU; every CPU is spun on by this test. Each step sleeps
  // 1 ms (--null.step-us), so 600 steps make a window of at least 0.6 s however the CPUs are
  // shared, while the run's own CPU time stays near zero. (Spinning up the step count instead, to
  // stretch sub-microsecond steps, made a report of every step's time and loss: at 25.6M steps on a
  // loaded 2-CPU machine that ran past ctest's 900 s.)
  const bhtest::Process p = bhtest::run_benchhost(
      fmt::format("--plugin-dir '{}' --plugin null --null.step-us 1000 --mode train -b 1 -w 10 -i 600 --threads 1 "
                  "-o '{}' --csv '{}'",
                  bhtest::plugin_dir().string(), json_path.string(), csv_path.string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const nlohmann::json j = nlohmann::json::parse(bhtest::read_file(json_path));
  spinners.reset();
  const auto& r = j["results"][0];
  EXPECT_EQ(r["status"], "PASSED");
  ASSERT_TRUE(r["machine_load"].is_object()) << r.dump(1);
  ASSERT_GE(r["machine_load"]["seconds"].get<double>(), 0.55) << r["machine_load"].dump();
  EXPECT_GE(r["machine_load"]["other_cpus"].get<double>(), 0.5) << r["machine_load"].dump();
  EXPECT_EQ(r["machine_load"]["busy"], true) << r["machine_load"].dump();
  EXPECT_NE(p.output.find("PASSED (busy)"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("BUSY MACHINE: other processes kept"), std::string::npos) << p.output;
  const std::string csv = bhtest::read_file(csv_path);
  EXPECT_NE(csv.find(",busy_machine,"), std::string::npos) << csv;
  EXPECT_NE(bhtest::without_last_csv_fields(csv, 5).find(",true\n"), std::string::npos) << csv;  // then the peak columns
}
