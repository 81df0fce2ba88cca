// Collectives on every dtype and reduce op against values computed by hand for the world size
// the test was launched with (mpirun -np 1, 2, 3; or one process on the single backend).
//
// Rank r contributes v(r, i) = (r + 1) * (i % 5 + 1): small integers, exact in every dtype
// (f16 and bf16 included), so for P ranks and k = i % 5 + 1:
//   sum = k * P (P + 1) / 2,  max = k * P,  min = k,  avg = sum / P = k (P + 1) / 2
// (P = 2 gives 1.5 k: exact in binary floating point; integer avg truncates toward zero).
//
// alltoall: element i of the block rank s sends to rank d is s * 64 + d * 16 + i (i < 16), at
// most 175 for P <= 3: exact in every dtype (bf16 holds integers up to 256), and distinct for
// every (source, destination, index), so a block from the wrong rank, for the wrong rank or at
// the wrong offset is caught. The output starts as 250, which no element encodes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "benchhost/comm/communicator.hpp"
#include "comm/comm_world.hpp"

using namespace benchhost;
using comm_test::world;

namespace {

const DType kReduceDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                               DType::i32, DType::i64, DType::u8};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

bool is_int(DType t) { return t == DType::i32 || t == DType::i64 || t == DType::u8; }

// A tensor of `dtype` holding `values` (converted through f64 on the CPU).
Tensor make(const std::vector<double>& values, DType dtype) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::f64);
  std::copy(values.begin(), values.end(), t.data<double>());
  return t.to(dtype);
}

std::vector<double> read(const Tensor& t) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(t.numel()));
  Tensor c = t.contiguous();
  for (std::int64_t i = 0; i < c.numel(); ++i) out.push_back(c.reshape({c.numel()}).item({i}));
  return out;
}

double alltoall_value(int src, int dst, std::int64_t i) { return src * 64.0 + dst * 16.0 + i; }
constexpr double kUnwritten = 250;

// Element counts of the block rank src sends to rank dst.
using BlockCounts = std::function<std::int64_t(int src, int dst)>;

// Runs one alltoall on `c` (the equal-block form when `equal_form`) where rank s sends
// counts(s, d) elements to rank d, and checks every element this rank receives, and that the
// input is unchanged.
void expect_alltoall(Communicator& c, DType dt, const BlockCounts& counts, bool equal_form,
                     const std::string& what) {
  const int p = c.size(), r = c.rank();
  std::vector<std::int64_t> send_counts, recv_counts;
  std::vector<double> send, want;
  for (int d = 0; d < p; ++d) {
    send_counts.push_back(counts(r, d));
    for (std::int64_t i = 0; i < counts(r, d); ++i) send.push_back(alltoall_value(r, d, i));
  }
  for (int s = 0; s < p; ++s) {
    recv_counts.push_back(counts(s, r));
    for (std::int64_t i = 0; i < counts(s, r); ++i) want.push_back(alltoall_value(s, r, i));
  }
  for (int s = 0; s < p; ++s) {
    for (int d = 0; d < p; ++d) {
      ASSERT_LE(counts(s, d), 16) << "alltoall_value() encodes element indices below 16 only";
    }
  }
  ASSERT_LE(p, 3) << "alltoall_value() is exact in every dtype for up to 3 ranks";
  Tensor in = make(send, dt).to(c.device());
  Tensor out = make(std::vector<double>(want.size(), kUnwritten), dt).to(c.device());
  if (equal_form) {
    c.alltoall(in, out).wait();
  } else {
    c.alltoall(in, out, send_counts, recv_counts).wait();
  }
  ASSERT_EQ(out.dtype(), dt);
  std::vector<double> got = read(out.to(Device::cpu()));
  ASSERT_EQ(got.size(), want.size());
  std::size_t k = 0;
  for (int s = 0; s < p; ++s) {
    for (std::int64_t i = 0; i < counts(s, r); ++i, ++k) {
      ASSERT_EQ(got[k], want[k]) << what << " " << dtype_name(dt) << ": output element " << k
                                 << " (element " << i << " of the block from rank " << s
                                 << ") on rank " << r << " of " << p;
    }
  }
  EXPECT_EQ(read(in.to(Device::cpu())), send) << what << ": the input must be left intact";
}

// The message of the InvalidArgument that `fn` throws ("" and a test failure if none).
template <class Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

// Uneven counts with zeros: ((s + 2 d + P) % 4) * 3 elements from s to d; P = 2 and 3 have zero
// blocks, and blocks of 3, 6 and 9 elements.
std::int64_t uneven_count(int s, int d, int p) { return ((s + 2 * d + p) % 4) * 3; }
// The last rank sends nothing at all; the others send d + 1 elements to rank d.
std::int64_t silent_last_count(int s, int d, int p) { return s == p - 1 ? 0 : d + 1; }

double expected_reduce(ReduceOp op, double k, int p, bool integer) {
  double sum = k * p * (p + 1) / 2.0;
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::max: return k * p;
    case ReduceOp::min: return k;
    case ReduceOp::avg: return integer ? std::trunc(sum / p) : sum / p;
  }
  return 0;
}

}  // namespace

TEST(Collectives, WorldMatchesLauncher) {
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(world().rank(), env.rank);
  EXPECT_EQ(world().size(), env.world_size);
  EXPECT_EQ(world().device(), Device::cpu());
}

TEST(Collectives, AllreduceEveryDtypeAndOp) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  for (DType dt : kReduceDtypes) {
    for (ReduceOp op : kOps) {
      for (std::int64_t n : {1, 7, 1000}) {
        std::vector<double> v(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) v[i] = (r + 1) * (i % 5 + 1);
        Tensor t = make(v, dt);
        c.allreduce(t, op).wait();
        ASSERT_EQ(t.dtype(), dt);
        std::vector<double> got = read(t);
        for (std::int64_t i = 0; i < n; ++i) {
          double want = expected_reduce(op, i % 5 + 1, p, is_int(dt));
          ASSERT_EQ(got[i], want) << "allreduce " << reduce_op_name(op) << " " << dtype_name(dt)
                                  << " n=" << n << " element " << i << " on rank " << r << " of " << p;
        }
      }
    }
  }
}

TEST(Collectives, IntegerAvgTruncatesTowardZeroWithoutWrapping) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  // i32: -r  -> sum -P(P-1)/2, avg truncated toward zero
  Tensor a = make({-1.0 * r, 5.0 * r}, DType::i32);
  c.allreduce(a, ReduceOp::avg).wait();
  double s = -p * (p - 1) / 2.0;
  EXPECT_EQ(read(a), (std::vector<double>{std::trunc(s / p), std::trunc(-5 * s / p)}));
  // u8: 200 + r would wrap a u8 sum; avg is computed wide.
  Tensor b = make({200.0 + r}, DType::u8);
  c.allreduce(b, ReduceOp::avg).wait();
  EXPECT_EQ(read(b)[0], 200 + (p - 1) / 2);
}

TEST(Collectives, HalfPrecisionSumRoundsLikeFloat) {
  // 1 + 2^-11 is not representable in f16 (10 mantissa bits): sums round to nearest even at
  // every step. Rank r contributes 0.25 * (r + 1) + 1024: result 1024 P + 0.125 P (P + 1),
  // exactly representable? 1024 * P needs 11+ bits: spacing at 2048..4096 is 2, so we check
  // against the float-computed, f16-rounded value instead of a literal.
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor t = make({0.25 * (r + 1) + 1024.0}, DType::f16);
  c.allreduce(t, ReduceOp::sum).wait();
  // Pairwise f16 rounding: with P <= 3 the exact sum is at most 3073.5 and representable
  // results are even numbers above 2048; accept only a value within one f16 ulp of exact.
  double exact = 1024.0 * p + 0.125 * p * (p + 1);
  double ulp = p == 1 ? 1.0 : 2.0;
  EXPECT_LE(std::abs(read(t)[0] - exact), ulp) << "f16 sum over " << p << " ranks";
}

TEST(Collectives, AllreduceStridedViewInPlace) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor base = Tensor::zeros({3, 4});
  for (std::int64_t i = 0; i < 12; ++i) base.data<float>()[i] = static_cast<float>((r + 1) * i);
  Tensor view = base.transpose(0, 1);  // not contiguous
  ASSERT_FALSE(view.is_contiguous());
  c.allreduce(view, ReduceOp::sum).wait();
  for (std::int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(base.data<float>()[i], i * p * (p + 1) / 2.0f) << "element " << i;
}

TEST(Collectives, BroadcastFromEveryRoot) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  for (int root = 0; root < p; ++root) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64, DType::u8, DType::f64}) {
      std::vector<double> v = {r == root ? 11.0 : 0.0, r == root ? 3.0 + root : -1.0, 7.0 * (r == root)};
      Tensor t = make(v, dt);
      c.broadcast(t, root).wait();
      EXPECT_EQ(read(t), (std::vector<double>{11, 3.0 + root, 7})) << dtype_name(dt) << " root " << root;
    }
  }
  Tensor bad = Tensor::zeros({2});
  EXPECT_THROW(c.broadcast(bad, p), InvalidArgument);
  EXPECT_THROW(c.broadcast(bad, -1), InvalidArgument);
}

TEST(Collectives, AllgatherUnevenChunks) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{5}, std::int64_t{4} * p + 1, std::int64_t{10}}) {
    for (DType dt : {DType::f32, DType::i64, DType::bf16, DType::u8}) {
      std::int64_t cnt = chunk_count(n, p, r), off = chunk_offset(n, p, r);
      std::vector<double> mine;
      for (std::int64_t i = 0; i < cnt; ++i) mine.push_back(static_cast<double>(off + i));
      Tensor in = make(mine, dt);
      Tensor out = Tensor::zeros({n}, dt);
      c.allgather(in, out).wait();
      std::vector<double> want;
      for (std::int64_t i = 0; i < n; ++i) want.push_back(static_cast<double>(i));
      EXPECT_EQ(read(out), want) << "allgather n=" << n << " " << dtype_name(dt);
    }
  }
}

TEST(Collectives, InPlaceAllgatherAndReduceScatterOnSlices) {
  // The PyTorch idiom: this rank's chunk is a slice of the full buffer.
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const std::int64_t n = 3 * p + 1, off = chunk_offset(n, p, r), cnt = chunk_count(n, p, r);
  Tensor full = Tensor::zeros({n});
  for (std::int64_t i = 0; i < cnt; ++i) full.data<float>()[off + i] = static_cast<float>(off + i);
  Tensor mine = full.slice(0, off, off + cnt);
  c.allgather(mine, full).wait();
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(full.data<float>()[i], i) << "allgather in place";
  // reduce_scatter into this rank's own slice of the input.
  Tensor in = Tensor::full({n}, r + 1.0);
  Tensor slot = in.slice(0, off, off + cnt);
  c.reduce_scatter(in, slot, ReduceOp::sum).wait();
  for (std::int64_t i = 0; i < cnt; ++i)
    EXPECT_EQ(in.data<float>()[off + i], p * (p + 1) / 2.0f) << "reduce_scatter into a slice";
}

TEST(Collectives, ChunkRuleIsArraySplit) {
  // 10 over 3: 4, 3, 3 at 0, 4, 7; 2 over 3: 1, 1, 0.
  EXPECT_EQ(chunk_count(10, 3, 0), 4);
  EXPECT_EQ(chunk_count(10, 3, 1), 3);
  EXPECT_EQ(chunk_count(10, 3, 2), 3);
  EXPECT_EQ(chunk_offset(10, 3, 1), 4);
  EXPECT_EQ(chunk_offset(10, 3, 2), 7);
  EXPECT_EQ(chunk_count(2, 3, 2), 0);
  EXPECT_EQ(chunk_offset(2, 3, 2), 2);
}

TEST(Collectives, ReduceScatterUnevenEveryOp) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{3} * p}) {
    for (DType dt : {DType::f32, DType::i32, DType::f16, DType::f64}) {
      for (ReduceOp op : kOps) {
        std::vector<double> v;
        for (std::int64_t i = 0; i < n; ++i) v.push_back((r + 1) * (i % 5 + 1));
        Tensor in = make(v, dt);
        Tensor keep = in.clone();
        Tensor out = Tensor::zeros({chunk_count(n, p, r)}, dt);
        c.reduce_scatter(in, out, op).wait();
        std::int64_t off = chunk_offset(n, p, r);
        std::vector<double> want;
        for (std::int64_t j = 0; j < out.numel(); ++j)
          want.push_back(expected_reduce(op, (off + j) % 5 + 1, p, is_int(dt)));
        EXPECT_EQ(read(out), want) << "reduce_scatter n=" << n << " " << dtype_name(dt) << " "
                                   << reduce_op_name(op);
        EXPECT_EQ(read(in), read(keep)) << "the input must be left intact";
      }
    }
  }
}

TEST(Collectives, AlltoallEqualBlocksEveryDtype) {
  Communicator& c = world();
  const int p = c.size();
  for (DType dt : kReduceDtypes) {
    for (std::int64_t block : {0, 1, 5}) {
      BlockCounts counts = [block](int, int) { return block; };
      expect_alltoall(c, dt, counts, true, fmt::format("alltoall(in, out) blocks of {}", block));
      // The same exchange through the per-peer form.
      expect_alltoall(c, dt, counts, false, fmt::format("alltoall counts {} each", block));
    }
  }
  // Block r of N / P elements: for P = 3 and N = 6, rank 1 receives {r0 -> 1: 16, 17},
  // {r1 -> 1: 80, 81}, {r2 -> 1: 144, 145} (values s * 64 + d * 16 + i, written out).
  if (p == 3) {
    const int r = c.rank();
    Tensor in = make({alltoall_value(r, 0, 0), alltoall_value(r, 0, 1), alltoall_value(r, 1, 0),
                      alltoall_value(r, 1, 1), alltoall_value(r, 2, 0), alltoall_value(r, 2, 1)},
                     DType::i32);
    Tensor out = Tensor::zeros({6}, DType::i32);
    c.alltoall(in, out).wait();
    if (r == 1) EXPECT_EQ(read(out), (std::vector<double>{16, 17, 80, 81, 144, 145}));
  }
}

TEST(Collectives, AlltoallUnevenCountsWithZerosEveryDtype) {
  Communicator& c = world();
  const int p = c.size();
  for (DType dt : kReduceDtypes) {
    expect_alltoall(c, dt, [p](int s, int d) { return uneven_count(s, d, p); }, false,
                    "alltoall uneven counts");
    expect_alltoall(c, dt, [p](int s, int d) { return silent_last_count(s, d, p); }, false,
                    "alltoall where the last rank sends nothing");
  }
  // uneven_count for P = 2 written out: rank 0 sends {6 to rank 0, 0 to rank 1}, rank 1 sends
  // {9 to rank 0, 3 to rank 1}; so rank 0 receives 0..5 from itself then 64..72 from rank 1,
  // and rank 1 receives nothing from rank 0 and 80, 81, 82 from itself.
  if (p == 2) {
    const int r = c.rank();
    std::vector<std::int64_t> send = r == 0 ? std::vector<std::int64_t>{6, 0}
                                            : std::vector<std::int64_t>{9, 3};
    std::vector<std::int64_t> recv = r == 0 ? std::vector<std::int64_t>{6, 9}
                                            : std::vector<std::int64_t>{0, 3};
    std::vector<double> in_values = r == 0 ? std::vector<double>{0, 1, 2, 3, 4, 5}
                                           : std::vector<double>{64, 65, 66, 67, 68, 69, 70, 71,
                                                                 72, 80, 81, 82};
    Tensor in = make(in_values, DType::u8);
    Tensor out = Tensor::zeros({recv[0] + recv[1]}, DType::u8);
    c.alltoall(in, out, send, recv).wait();
    EXPECT_EQ(read(out), r == 0 ? (std::vector<double>{0, 1, 2, 3, 4, 5, 64, 65, 66, 67, 68, 69,
                                                        70, 71, 72})
                                : (std::vector<double>{80, 81, 82}));
  }
}

TEST(Collectives, AlltoallSameBufferInAndOut) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  std::vector<double> v;
  for (int d = 0; d < p; ++d)
    for (int i = 0; i < 4; ++i) v.push_back(alltoall_value(r, d, i));
  Tensor t = make(v, DType::f32);
  c.alltoall(t, t).wait();
  std::vector<double> want;
  for (int s = 0; s < p; ++s)
    for (int i = 0; i < 4; ++i) want.push_back(alltoall_value(s, r, i));
  EXPECT_EQ(read(t), want) << "alltoall with in and out the same tensor";
}

TEST(Collectives, AlltoallMisuseThrowsOnEveryRankBeforeAnythingIsSent) {
  // Every rank makes the same mistake: each must throw by itself (no rank waits for another).
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const std::vector<std::int64_t> twos(static_cast<std::size_t>(p), 2);
  Tensor in = Tensor::zeros({2 * p});
  Tensor out = Tensor::zeros({2 * p});
  std::string msg;

  std::vector<std::int64_t> too_many = twos;
  too_many.push_back(0);
  msg = invalid_argument_message([&] { c.alltoall(in, out, too_many, twos); });
  EXPECT_NE(msg.find(fmt::format("{} send counts for a world of {}", p + 1, p)), std::string::npos)
      << msg;
  msg = invalid_argument_message([&] { c.alltoall(in, out, twos, {}); });
  EXPECT_NE(msg.find(fmt::format("0 receive counts for a world of {}", p)), std::string::npos) << msg;

  std::vector<std::int64_t> negative = twos;
  negative.back() = -1;
  msg = invalid_argument_message([&] { c.alltoall(in, out, negative, twos); });
  EXPECT_NE(msg.find(fmt::format("send count for rank {} is -1", p - 1)), std::string::npos) << msg;

  Tensor longer = Tensor::zeros({2 * p + 1});
  msg = invalid_argument_message([&] { c.alltoall(longer, out, twos, twos); });
  EXPECT_NE(msg.find(fmt::format("add up to {}, but the input tensor has {} elements", 2 * p,
                                 2 * p + 1)), std::string::npos) << msg;
  msg = invalid_argument_message([&] { c.alltoall(in, longer, twos, twos); });
  EXPECT_NE(msg.find(fmt::format("add up to {}, but the output tensor has {} elements", 2 * p,
                                 2 * p + 1)), std::string::npos) << msg;
  std::vector<std::int64_t> more = twos;
  more[0] = 3;
  msg = invalid_argument_message([&] { c.alltoall(in, out, more, twos); });
  EXPECT_NE(msg.find(fmt::format("add up to more than the {} elements", 2 * p)), std::string::npos)
      << msg;

  Tensor f64 = Tensor::zeros({2 * p}, DType::f64);
  msg = invalid_argument_message([&] { c.alltoall(in, f64, twos, twos); });
  EXPECT_NE(msg.find("dtypes differ"), std::string::npos) << msg;
  msg = invalid_argument_message([&] { c.alltoall(in, f64); });
  EXPECT_NE(msg.find("dtypes differ"), std::string::npos) << msg;

  Tensor grid = Tensor::zeros({2, 2});
  Tensor strided = grid.transpose(0, 1);  // checked before the counts
  ASSERT_FALSE(strided.is_contiguous());
  msg = invalid_argument_message([&] { c.alltoall(strided, out, twos, twos); });
  EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;

  msg = invalid_argument_message([&] { c.alltoall(in, longer); });
  EXPECT_NE(msg.find(fmt::format("the input has {} elements but the output has {}", 2 * p,
                                 2 * p + 1)), std::string::npos) << msg;
  if (p > 1) {
    Tensor odd = Tensor::zeros({2 * p + 1});
    msg = invalid_argument_message([&] { c.alltoall(odd, odd); });
    EXPECT_NE(msg.find(fmt::format("{} elements do not split into {} equal blocks ({} % {} = 1)",
                                   2 * p + 1, p, 2 * p + 1, p)), std::string::npos) << msg;
  }
  Tensor undef;
  EXPECT_THROW(c.alltoall(undef, out, twos, twos), InvalidArgument);
  EXPECT_THROW(c.alltoall(in, undef), InvalidArgument);

  // Nothing was sent: the next collective matches on every rank and the communicator is fine.
  EXPECT_FALSE(c.failed());
  Tensor ranks = make(std::vector<double>(static_cast<std::size_t>(p), r), DType::i64);
  Tensor from = Tensor::zeros({p}, DType::i64);
  c.alltoall(ranks, from).wait();
  for (int s = 0; s < p; ++s) EXPECT_EQ(from.item({s}), s) << "block from rank " << s;
}

// Note [MPI alltoall and large counts]: blocks beyond MPI's int limit go as derived datatypes.
// Lowering the limit to 4 sends most blocks of these tests that way (runs of 4 plus a rest),
// next to plain ones, and the results must be the same.
TEST(Collectives, AlltoallBeyondTheMpiIntLimit) {
  if (!comm_test::world_is_mpi()) GTEST_SKIP() << "the MPI backend is not in use (one process)";
  Communicator& c = world();
  const int p = c.size();
  LaunchEnv env = detect_launch_env();
  CommOptions opts;
  opts.timeout_seconds = 30;
  ASSERT_EQ(setenv("BENCHHOST_TEST_MPI_COUNT_LIMIT", "4", 1), 0);
  std::unique_ptr<Communicator> limited = create_communicator("mpi", Device::cpu(), env, opts);
  unsetenv("BENCHHOST_TEST_MPI_COUNT_LIMIT");
  for (DType dt : {DType::u8, DType::bf16, DType::f32, DType::i64}) {
    expect_alltoall(*limited, dt, [p](int s, int d) { return uneven_count(s, d, p); }, false,
                    "alltoall uneven counts, int limit 4");
    expect_alltoall(*limited, dt, [](int s, int d) { return 16 - s - d; }, false,
                    "alltoall blocks of up to 16, int limit 4");
    expect_alltoall(*limited, dt, [](int, int) { return 8; }, true,
                    "alltoall(in, out) blocks of 8, int limit 4");
  }
  EXPECT_FALSE(limited->failed());
}

TEST(Collectives, AsyncHandlesCompleteInAnyWaitOrder) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(Tensor::full({257 * (k + 1)}, (r + 1) * (k + 1), DType::f32));
    works.push_back(c.allreduce(ts.back(), k % 2 ? ReduceOp::max : ReduceOp::sum));
  }
  // Poll one until it reports completion (no timing involved: it must get there).
  while (!works[0].is_completed()) {
  }
  EXPECT_TRUE(works[0].is_completed());
  for (int k = 5; k >= 0; --k) {
    works[k].wait();
    works[k].wait();  // waiting twice is fine
    double want = k % 2 ? (k + 1.0) * p : (k + 1.0) * p * (p + 1) / 2;
    std::vector<float> got = ts[k].to_float_vector();
    EXPECT_EQ(got.front(), want) << "work " << k;
    EXPECT_EQ(got.back(), want) << "work " << k;
    EXPECT_FALSE(works[k].describe().empty());
  }
  Work done;
  EXPECT_TRUE(done.is_completed());
  done.wait();
}

TEST(Collectives, BarrierAndScalarHelpers) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  c.barrier();
  std::vector<double> s = allreduce_values(c, std::vector<double>{1.0 * r, 1.0}, ReduceOp::sum);
  EXPECT_EQ(s, (std::vector<double>{p * (p - 1) / 2.0, 1.0 * p}));
  std::vector<std::int64_t> m =
      allreduce_values(c, std::vector<std::int64_t>{r, -r}, ReduceOp::max);
  EXPECT_EQ(m, (std::vector<std::int64_t>{p - 1, 0}));
  std::vector<double> g = allgather_values(c, 1.5 * r);
  ASSERT_EQ(g.size(), static_cast<std::size_t>(p));
  for (int k = 0; k < p; ++k) EXPECT_EQ(g[k], 1.5 * k);
}

TEST(Collectives, MisuseIsRejectedBeforeAnythingIsSent) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  Tensor f8 = Tensor::zeros({4}, DType::f8e4m3);
  EXPECT_THROW(c.allreduce(f8, ReduceOp::sum), InvalidArgument);
  Tensor in = Tensor::zeros({chunk_count(9, p, r) + 1});
  Tensor out = Tensor::zeros({9});
  EXPECT_THROW(c.allgather(in, out), InvalidArgument);
  Tensor small = Tensor::zeros({chunk_count(9, p, r)}, DType::f64);
  EXPECT_THROW(c.reduce_scatter(out, small, ReduceOp::sum), InvalidArgument);  // dtype differs
  Tensor undef;
  EXPECT_THROW(c.allreduce(undef, ReduceOp::sum), InvalidArgument);
  // The communicator is still usable.
  Tensor one = Tensor::full({1}, 1.0);
  c.allreduce(one, ReduceOp::sum).wait();
  EXPECT_EQ(one.item({0}), p);
  EXPECT_FALSE(c.failed());
}

TEST(Collectives, OnlyRankZeroWrites) {
  Communicator& c = world();
  // Rank 0 makes a directory and tells everyone its name (a u8 broadcast of the path).
  std::string dir;
  Tensor name = Tensor::zeros({256}, DType::u8);
  if (c.rank() == 0) {
    char tmpl[] = "/tmp/bh_comm_writer_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    std::copy(dir.begin(), dir.end(), name.data<std::uint8_t>());
  }
  c.broadcast(name, 0).wait();
  dir = reinterpret_cast<const char*>(name.data<std::uint8_t>());
  if (is_writer(c)) std::ofstream(dir + "/report_rank" + std::to_string(c.rank()) + ".json") << "{}";
  c.barrier();
  if (c.rank() == 0) {
    std::vector<std::string> files;
    for (auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().filename());
    EXPECT_EQ(files, std::vector<std::string>{"report_rank0.json"});
    std::filesystem::remove_all(dir);
  }
  EXPECT_EQ(is_writer(c), c.rank() == 0);
  EXPECT_TRUE(is_writer(static_cast<const Communicator*>(nullptr)));
  c.barrier();
}

TEST(CommFactory, BackendChoiceAndErrors) {
  LaunchEnv one;
  auto single = create_communicator("auto", Device::cpu(), one);
  EXPECT_EQ(single->backend_name(), "single");
  EXPECT_EQ(single->size(), 1);
  EXPECT_THROW(create_communicator("gloo", Device::cpu(), one), InvalidArgument);
  LaunchEnv two;
  two.world_size = 2;
  two.launcher = "openmpi";
  EXPECT_THROW(create_communicator("single", Device::cpu(), two), InvalidArgument);
  EXPECT_THROW(create_communicator("nccl", Device::cpu(), one), Unsupported);
  CommOptions bad;
  bad.timeout_seconds = 0;
  EXPECT_THROW(create_communicator("single", Device::cpu(), one, bad), InvalidArgument);
  auto names = available_comm_backends();
#ifdef BENCHHOST_BUILT_WITH_MPI
  EXPECT_NE(std::find(names.begin(), names.end(), "mpi"), names.end());
  LaunchEnv torchrun;
  torchrun.world_size = 2;
  torchrun.launcher = "torchrun-style";
  EXPECT_THROW(create_communicator("mpi", Device::cpu(), torchrun), Unsupported);
#else
  try {
    create_communicator("auto", Device::cpu(), two);
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("built without MPI"), std::string::npos) << e.what();
  }
#endif
}

TEST(CommFactory, SingleBackendCopiesAndChecks) {
  auto c = create_communicator("single", Device::cpu(), LaunchEnv{});
  Tensor t = make({1, 2, 3}, DType::bf16);
  c->allreduce(t, ReduceOp::avg).wait();
  EXPECT_EQ(read(t), (std::vector<double>{1, 2, 3}));
  Tensor out = Tensor::zeros({3}, DType::bf16);
  c->allgather(t, out).wait();
  EXPECT_EQ(read(out), (std::vector<double>{1, 2, 3}));
  Tensor rs = Tensor::zeros({3}, DType::bf16);
  c->reduce_scatter(t, rs, ReduceOp::max).wait();
  EXPECT_EQ(read(rs), (std::vector<double>{1, 2, 3}));
  EXPECT_THROW(c->broadcast(t, 1), InvalidArgument);
  Tensor wrong = Tensor::zeros({4}, DType::bf16);
  EXPECT_THROW(c->allgather(t, wrong), InvalidArgument);
  Tensor a2a = Tensor::zeros({3}, DType::bf16);
  c->alltoall(t, a2a, {3}, {3}).wait();
  EXPECT_EQ(read(a2a), (std::vector<double>{1, 2, 3}));
  Tensor a2a_equal = Tensor::zeros({3}, DType::bf16);
  c->alltoall(t, a2a_equal).wait();
  EXPECT_EQ(read(a2a_equal), (std::vector<double>{1, 2, 3}));
  c->alltoall(t, t).wait();  // the same buffer: nothing to do
  EXPECT_EQ(read(t), (std::vector<double>{1, 2, 3}));
  EXPECT_THROW(c->alltoall(t, a2a, {3, 0}, {3, 0}), InvalidArgument);  // counts must be {N}
  EXPECT_THROW(c->alltoall(t, a2a, {2}, {3}), InvalidArgument);
  EXPECT_THROW(c->alltoall(t, wrong), InvalidArgument);
  c->barrier();
  EXPECT_FALSE(c->failed());
}

TEST(Collectives, RankSpreadNamesTheStraggler) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  // Rank p-1 is the slowest, rank 0 the fastest: step time 10 + r ms, and 100 for the last.
  double mine = r == p - 1 ? 100.0 : 10.0 + r;
  RankSpread s = rank_spread(c, mine);
  EXPECT_EQ(s.max, 100.0);
  EXPECT_EQ(s.max_rank, p - 1);
  EXPECT_EQ(s.min, p == 1 ? 100.0 : 10.0);
  EXPECT_EQ(s.min_rank, 0);
  // p = 1: {100}; p = 2: {10, 100} -> lower middle 10; p = 3: {10, 11, 100} -> 11.
  EXPECT_EQ(s.median, p == 1 ? 100.0 : p == 2 ? 10.0 : 11.0);
  double sum = 100.0;
  for (int k = 0; k < p - 1; ++k) sum += 10.0 + k;
  EXPECT_EQ(s.sum, sum);
}

// NCCL on the GPUs of this node: one rank per GPU. Runs where CUDA, NCCL and enough devices
// exist (e.g. mpirun -np 1 bin/test_comm --gtest_filter='Nccl*' on a one-GPU machine).
// One NCCL communicator per test over this job's ranks; the test is skipped, saying why, where
// there is no GPU per rank or no NCCL backend.
class NcclCollectives : public testing::Test {
 protected:
  void SetUp() override {
    LaunchEnv env = detect_launch_env();
    std::string why;
    if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
    auto names = available_comm_backends();
    if (std::find(names.begin(), names.end(), "nccl") == names.end())
      GTEST_SKIP() << "this build has no NCCL backend";
    if (device_backend(DeviceType::cuda).device_count() < env.local_size)
      GTEST_SKIP() << "NCCL needs one GPU per rank: " << env.local_size << " local ranks, "
                   << device_backend(DeviceType::cuda).device_count() << " GPUs";
    CommOptions opts;
    opts.timeout_seconds = 60;
    // "nccl" explicitly: auto picks single for one rank.
    comm = create_communicator("nccl", device_for_local_rank(env, DeviceType::cuda), env, opts);
    ASSERT_EQ(comm->backend_name(), "nccl");
  }
  std::unique_ptr<Communicator> comm;
};

TEST_F(NcclCollectives, EveryDtypeAndOpOnCuda) {
  Communicator* c = comm.get();
  const Device dev = c->device();
  const int p = c->size(), r = c->rank();
  for (DType dt : kReduceDtypes) {
    for (ReduceOp op : kOps) {
      std::vector<double> v;
      for (int i = 0; i < 1000; ++i) v.push_back((r + 1) * (i % 5 + 1));
      Tensor t = make(v, dt).to(dev);
      if (op == ReduceOp::avg && is_int(dt)) {
        EXPECT_THROW(c->allreduce(t, op), InvalidArgument);
        continue;
      }
      c->allreduce(t, op).wait();
      std::vector<double> got = read(t.to(Device::cpu()));
      for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(got[i], expected_reduce(op, i % 5 + 1, p, false))
            << "nccl allreduce " << reduce_op_name(op) << " " << dtype_name(dt) << " element " << i;
    }
  }
  for (std::int64_t n : {std::int64_t{7}, std::int64_t{4} * p}) {
    std::vector<double> mine;
    for (std::int64_t i = 0; i < chunk_count(n, p, r); ++i) mine.push_back(chunk_offset(n, p, r) + i);
    Tensor in = make(mine, DType::f32).to(dev);
    Tensor out = Tensor::zeros({n}, DType::f32, dev);
    c->allgather(in, out).wait();
    std::vector<double> got = read(out.to(Device::cpu()));
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], i) << "nccl allgather n=" << n;
    std::vector<double> full;
    for (std::int64_t i = 0; i < n; ++i) full.push_back((r + 1) * (i % 5 + 1));
    Tensor rin = make(full, DType::f32).to(dev);
    Tensor rout = Tensor::zeros({chunk_count(n, p, r)}, DType::f32, dev);
    c->reduce_scatter(rin, rout, ReduceOp::sum).wait();
    std::vector<double> rs = read(rout.to(Device::cpu()));
    for (std::size_t j = 0; j < rs.size(); ++j)
      EXPECT_EQ(rs[j], expected_reduce(ReduceOp::sum, (chunk_offset(n, p, r) + j) % 5 + 1, p, false));
  }
  Tensor b = make({r == 0 ? 5.0 : 0.0, 6.0 * (r == 0)}, DType::bf16).to(dev);
  c->broadcast(b, 0).wait();
  EXPECT_EQ(read(b.to(Device::cpu())), (std::vector<double>{5, 6}));
  c->barrier();
}

TEST_F(NcclCollectives, AlltoallOnCuda) {
  Communicator* c = comm.get();
  const int p = c->size();
  for (DType dt : kReduceDtypes) {
    for (std::int64_t block : {0, 1, 5}) {
      expect_alltoall(*c, dt, [block](int, int) { return block; }, true,
                      fmt::format("nccl alltoall(in, out) blocks of {}", block));
    }
    expect_alltoall(*c, dt, [p](int s, int d) { return uneven_count(s, d, p); }, false,
                    "nccl alltoall uneven counts");
    expect_alltoall(*c, dt, [p](int s, int d) { return silent_last_count(s, d, p); }, false,
                    "nccl alltoall where the last rank sends nothing");
  }
  Tensor same = make(std::vector<double>(static_cast<std::size_t>(2 * p), c->rank()), DType::f32)
                    .to(c->device());
  c->alltoall(same, same).wait();
  std::vector<double> got = read(same.to(Device::cpu()));
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(got[2 * s], s) << "nccl alltoall in place, block from rank " << s;
    EXPECT_EQ(got[2 * s + 1], s) << "nccl alltoall in place, block from rank " << s;
  }
  Tensor cpu = Tensor::zeros({p});
  Tensor gpu = Tensor::zeros({p}, DType::f32, c->device());
  EXPECT_THROW(c->alltoall(cpu, gpu), InvalidArgument);  // nccl moves CUDA tensors only
  c->barrier();
}
