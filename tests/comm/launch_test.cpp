// Launcher environment parsing with injected variables.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "benchhost/comm/launch.hpp"
#include "benchhost/error.hpp"

using namespace benchhost;

namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    detect(vars);
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "(no error)";
}

}  // namespace

TEST(LaunchEnv, NoLauncherIsRankZeroOfOne) {
  LaunchEnv e = detect({});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_size, 1);
  EXPECT_EQ(e.launcher, "none");
  EXPECT_TRUE(is_writer(e));
}

TEST(LaunchEnv, OpenMpi) {
  LaunchEnv e = detect({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_FALSE(is_writer(e));
  EXPECT_EQ(e.describe(), "rank 5/8 (local 1/4, openmpi)");
}

TEST(LaunchEnv, SlurmWithTasksPerNode) {
  LaunchEnv e = detect({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"},
                        {"SLURM_TASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_size, 4);
  LaunchEnv f = detect({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"},
                        {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_TASKS_PER_NODE", "9"}});
  EXPECT_EQ(f.local_size, 2);
}

TEST(LaunchEnv, PmiAndTorchrunStyle) {
  LaunchEnv p = detect({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"},
                        {"MPI_LOCALNRANKS", "1"}});
  EXPECT_EQ(p.launcher, "pmi");
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.world_size, 3);
  LaunchEnv t = detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(t.launcher, "torchrun-style");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_size, 2);
  // Without a local size, the smallest one consistent with the local rank.
  LaunchEnv u = detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}});
  EXPECT_EQ(u.local_size, 4);
}

TEST(LaunchEnv, MpirunInsideAnSbatchScriptWins) {
  // sbatch sets SLURM_PROCID=0 for the batch step; mpirun inside it sets the real ranks.
  LaunchEnv e = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                        {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(e.launcher, "openmpi");
  EXPECT_EQ(e.rank, 3);
}

TEST(LaunchEnv, InconsistentValuesNameTheVariables) {
  std::string m = error_of({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(m.find("OMPI_COMM_WORLD_RANK=4"), std::string::npos) << m;
  EXPECT_NE(m.find("OMPI_COMM_WORLD_SIZE=4"), std::string::npos) << m;
  m = error_of({{"RANK", "1"}});
  EXPECT_NE(m.find("WORLD_SIZE"), std::string::npos) << m;
  m = error_of({{"WORLD_SIZE", "2"}});
  EXPECT_NE(m.find("RANK"), std::string::npos) << m;
  m = error_of({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(m.find("SLURM_PROCID='x1'"), std::string::npos) << m;
  m = error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_NE(m.find("MPI_LOCALRANKID=2"), std::string::npos) << m;
  m = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}});
  EXPECT_NE(m.find("LOCAL_WORLD_SIZE=3"), std::string::npos) << m;
  m = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "(x2)"}});
  EXPECT_NE(m.find("SLURM_TASKS_PER_NODE"), std::string::npos) << m;
}

TEST(LaunchEnv, DeviceBindingOnCpu) {
  LaunchEnv e;
  e.local_rank = 3;
  e.local_size = 4;
  EXPECT_EQ(device_for_local_rank(e, DeviceType::cpu), Device::cpu());
  std::string why;
  if (!device_available(Device::cuda(0), &why)) {
    EXPECT_THROW(device_for_local_rank(e, DeviceType::cuda), Unsupported);
  } else {
    int n = device_backend(DeviceType::cuda).device_count();
    EXPECT_EQ(device_for_local_rank(e, DeviceType::cuda), Device::cuda(3 % n));
  }
}
