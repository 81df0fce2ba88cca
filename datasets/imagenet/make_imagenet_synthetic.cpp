// make_imagenet_synthetic: write a small ImageNet-layout folder of real JPEG files
// (train/<wnid>/*.JPEG, val/ flat with val_map.txt or in class folders) for tests and demos.
//   make_imagenet_synthetic --out /tmp/inet --classes 10 --train-per-class 50 --val-per-class 10

#include <cstdio>
#include <exception>
#include <iostream>

#include <boost/program_options.hpp>

#include "imagenet_folder.hpp"

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  benchhost::imagenet::SyntheticImageNetOptions o;
  std::string val_layout = "flat";
  po::options_description d("make_imagenet_synthetic: a small ImageNet-layout folder of JPEGs");
  d.add_options()("help,h", "this help")(
      "out", po::value(&o.root)->required(), "output folder (created)")(
      "classes", po::value(&o.classes)->default_value(o.classes), "number of classes")(
      "train-per-class", po::value(&o.train_per_class)->default_value(o.train_per_class),
      "training images per class")(
      "val-per-class", po::value(&o.val_per_class)->default_value(o.val_per_class),
      "validation images per class")(
      "min-size", po::value(&o.min_size)->default_value(o.min_size), "smallest side length")(
      "max-size", po::value(&o.max_size)->default_value(o.max_size), "largest side length")(
      "val-layout", po::value(&val_layout)->default_value(val_layout),
      "flat (val/*.JPEG + val/val_map.txt, MLPerf's) or folders (val/<wnid>/)")(
      "seed", po::value(&o.seed)->default_value(o.seed), "random seed");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, d), vm);
    if (vm.count("help")) {
      std::cout << d << "\n";
      return 0;
    }
    po::notify(vm);
    if (val_layout != "flat" && val_layout != "folders") {
      std::fprintf(stderr, "make_imagenet_synthetic: --val-layout must be flat or folders, not '%s'\n",
                   val_layout.c_str());
      return 2;
    }
    o.flat_val = val_layout == "flat";
    const auto n = benchhost::imagenet::write_synthetic_imagenet(o);
    std::printf("wrote %lld images to %s\n", static_cast<long long>(n), o.root.c_str());
    return 0;
  } catch (const po::error& e) {
    std::fprintf(stderr, "make_imagenet_synthetic: %s\n%s\n", e.what(),
                 "try --help");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_imagenet_synthetic: %s\n", e.what());
    return 1;
  }
}
