// make_kits19_synthetic: write KiTS19-shaped volumes with a planted segmentation in MLPerf's
// preprocessed layout. See synthetic.hpp Note [Planted kidneys].
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "synthetic.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  benchhost::kits19::Kits19SyntheticOptions o;
  std::string out;
  po::options_description desc(
      "make_kits19_synthetic: MLPerf's preprocessed KiTS19 layout (case_XXXXX_x.npy f32 [1,D,H,W],\n"
      "case_XXXXX_y.npy u8 labels 0/1/2, evaluation_cases.txt) with planted kidneys and tumours");
  desc.add_options()("help,h", "this help")
      ("out,o", po::value(&out)->required(), "output directory (must not exist; written atomically)")
      ("train", po::value(&o.train_cases)->default_value(48), "training cases")
      ("eval", po::value(&o.eval_cases)->default_value(12), "evaluation cases")
      ("size-min", po::value(&o.size_min)->default_value(48), "smallest volume size per dimension")
      ("size-max", po::value(&o.size_max)->default_value(64), "largest volume size per dimension")
      ("seed", po::value(&o.seed)->default_value(1), "seed: the same seed writes the same bytes");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    const auto r = benchhost::kits19::generate_kits19_synthetic(out, o);
    fmt::print("wrote {} training and {} evaluation cases to {}\n", r.train_cases, r.eval_cases, out);
    return 0;
  } catch (const po::error& e) {
    std::cerr << "make_kits19_synthetic: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  } catch (const benchhost::InvalidArgument& e) {
    std::cerr << "make_kits19_synthetic: " << e.message() << "\n";
    return 2;
  } catch (const benchhost::Error& e) {
    std::cerr << "make_kits19_synthetic: " << e.message() << "\n";
    return 1;
  }
}
