// make_criteo_synthetic: write MLPerf's Criteo multi-hot layout from a planted teacher model and
// print the teacher's (Bayes-optimal) AUC. See synthetic.hpp Note [Planted teacher].
#include <cstdio>
#include <iostream>
#include <sstream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "criteo.hpp"
#include "synthetic.hpp"

namespace po = boost::program_options;

using benchhost::InvalidArgument;
static std::vector<std::int64_t> parse_list(const std::string& s, const char* what) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoll(item));
    } catch (...) {
      BH_THROW(InvalidArgument, "--{}: '{}' is not an integer", what, item);
    }
  }
  return out;
}

int main(int argc, char** argv) {
  benchhost::criteo::SyntheticOptions o;
  std::string tables, hotness;
  po::options_description desc(
      "make_criteo_synthetic: MLPerf Criteo multi-hot layout (day_<d>_dense.npy, day_<d>_labels.npy,\n"
      "day_<d>_sparse_multi_hot.npz) from a planted teacher; days 0..D-1 train, day D evaluation");
  desc.add_options()("help,h", "this help")
      ("out,o", po::value(&o.out_dir)->required(), "output directory")
      ("days", po::value(&o.train_days)->default_value(2), "training days D")
      ("rows-per-day", po::value(&o.rows_per_day)->default_value(100000), "samples per training day")
      ("eval-rows", po::value(&o.eval_rows)->default_value(40000),
       "samples in the evaluation day (first half = validation set)")
      ("table-sizes", po::value(&tables), "26 comma-separated table sizes (default: min(MLPerf, 1000))")
      ("multi-hot-sizes", po::value(&hotness), "26 comma-separated multi-hot sizes (default: MLPerf's)")
      ("seed", po::value(&o.seed)->default_value(1), "seed: the same seed writes the same bytes");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (!tables.empty()) o.table_sizes = parse_list(tables, "table-sizes");
    if (!hotness.empty()) o.hotness = parse_list(hotness, "multi-hot-sizes");
    const auto r = benchhost::criteo::generate_synthetic(o);
    fmt::print("wrote {} training samples ({} days) and an evaluation day to {}\n", r.train_samples,
               o.train_days, o.out_dir);
    fmt::print("click rate: {:.4f}\n", r.positive_rate);
    fmt::print("teacher (Bayes-optimal) AUC on the training days: {:.5f}\n", r.teacher_auc_train);
    fmt::print("teacher (Bayes-optimal) AUC on the validation set ({} samples): {:.5f}\n",
               r.validation_samples, r.teacher_auc_validation);
    return 0;
  } catch (const po::error& e) {
    std::cerr << "make_criteo_synthetic: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  } catch (const benchhost::InvalidArgument& e) {
    std::cerr << "make_criteo_synthetic: " << e.message() << "\n";
    return 2;
  } catch (const benchhost::Error& e) {
    std::cerr << "make_criteo_synthetic: " << e.message() << "\n";
    return 1;
  }
}
