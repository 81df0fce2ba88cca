// make_openimages_synthetic: write planted-shape detection data in the OpenImages-MLPerf layout
// (JPEGs and COCO JSON). See synthetic.hpp Note [Planted shapes].
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "synthetic.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  benchhost::coco::OpenImagesSyntheticOptions o;
  std::string out;
  po::options_description desc(
      "make_openimages_synthetic: the OpenImages-MLPerf layout (<out>/{train,validation}/data/*.jpg,\n"
      "<out>/{train,validation}/labels/openimages-mlperf.json) with planted shapes as objects");
  desc.add_options()("help,h", "this help")
      ("out,o", po::value(&out)->required(), "output directory (must not exist; written atomically)")
      ("train", po::value(&o.train_images)->default_value(512), "training images")
      ("val", po::value(&o.val_images)->default_value(128), "validation images")
      ("min-size", po::value(&o.min_size)->default_value(96), "smallest image side in pixels")
      ("max-size", po::value(&o.max_size)->default_value(160), "largest image side in pixels")
      ("classes", po::value(&o.classes)->default_value(4), "shape classes (1..6)")
      ("max-objects", po::value(&o.max_objects)->default_value(6), "most objects per image")
      ("seed", po::value(&o.seed)->default_value(1), "seed: the same seed writes the same bytes");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    const auto r = benchhost::coco::generate_openimages_synthetic(out, o);
    fmt::print("wrote {} training images ({} boxes) and {} validation images ({} boxes) to {}\n", r.train_images,
               r.train_boxes, r.val_images, r.val_boxes, out);
    return 0;
  } catch (const po::error& e) {
    std::cerr << "make_openimages_synthetic: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  } catch (const benchhost::InvalidArgument& e) {
    std::cerr << "make_openimages_synthetic: " << e.message() << "\n";
    return 2;
  } catch (const benchhost::Error& e) {
    std::cerr << "make_openimages_synthetic: " << e.message() << "\n";
    return 1;
  }
}
