// make_coco2017_synthetic: write planted-polygon instance segmentation data in the COCO 2017
// layout (JPEGs and instances JSON). See synthetic_coco2017.hpp Note [Planted polygons].
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "synthetic_coco2017.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  benchhost::coco::Coco2017SyntheticOptions o;
  std::string out;
  po::options_description desc(
      "make_coco2017_synthetic: the COCO 2017 layout (<out>/{train2017,val2017}/*.jpg,\n"
      "<out>/annotations/instances_{train,val}2017.json) with polygon-masked shapes as objects");
  desc.add_options()("help,h", "this help")
      ("out,o", po::value(&out)->required(), "output directory (must not exist; written atomically)")
      ("train", po::value(&o.train_images)->default_value(256), "training images")
      ("val", po::value(&o.val_images)->default_value(64), "validation images")
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
    const auto r = benchhost::coco::generate_coco2017_synthetic(out, o);
    fmt::print("wrote {} training images ({} annotations, {} crowd) and {} validation images ({} annotations, {} crowd) to {}\n",
               r.train_images, r.train_annotations, r.train_crowd, r.val_images, r.val_annotations, r.val_crowd, out);
    return 0;
  } catch (const po::error& e) {
    std::cerr << "make_coco2017_synthetic: " << e.what() << "\n\n" << desc << "\n";
    return 2;
  } catch (const benchhost::InvalidArgument& e) {
    std::cerr << "make_coco2017_synthetic: " << e.message() << "\n";
    return 2;
  } catch (const benchhost::Error& e) {
    std::cerr << "make_coco2017_synthetic: " << e.message() << "\n";
    return 1;
  }
}
