#pragma once
/// @file datasets/imagenet/imagenet_folder.hpp  ImageNet (ILSVRC2012) as it lies on disk after
/// the usual preparation, and a generator of small synthetic folders in the same layout.
///
/// Layout read here (root = the folder given as resnet50.data-dir):
///   root/train/<wnid>/<anything>.JPEG      one folder per class (n01440764, ...), 1000 of them
///   root/val/ in either of the two common forms:
///     a) root/val/<wnid>/<file>.JPEG       class folders, like train (PyTorch's ImageFolder
///                                          layout, what valprep.sh produces)
///     b) root/val/<file>.JPEG flat, with a labels file root/val_map.txt (or root/val/val_map.txt):
///        one line per image "<file> <label>", label being the class index (0..999, classes in
///        sorted wnid order) or the wnid itself. This is the val_map.txt of MLPerf's reference
///        ImageNet tooling (mlcommons/inference's imagenet loader reads exactly this).
/// Class indices are the positions of the wnids sorted by name, the convention every framework
/// uses, so label k means the same class in train and val. Extensions .JPEG/.jpeg/.jpg/.png.
///
/// Errors: missing folders, a val file without a label, a label naming an unknown class, or an
/// empty split throw DataError naming the path (and line for the labels file). Scanning never
/// opens the images; decoding happens in the data loader (data/image.hpp).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/data/image.hpp"

namespace benchhost::imagenet {

/// Image files and their class indices, in a deterministic order (class, then file name).
struct ImageList {
  std::vector<std::string> paths;
  std::vector<std::int64_t> labels;
  std::vector<std::string> classes;  ///< wnids; label k is classes[k]
  std::int64_t size() const { return static_cast<std::int64_t>(paths.size()); }
};

/// The class folders of `train_dir`, sorted. DataError when there are none.
std::vector<std::string> list_classes(const std::string& train_dir);
/// root/train.
ImageList scan_train(const std::string& root);
/// root/val in layout (a) or (b); `classes` from list_classes(root/train).
ImageList scan_val(const std::string& root, const std::vector<std::string>& classes);
/// A dataset over the list with the given transform (data::ImageFileDataset).
std::shared_ptr<data::ImageFileDataset> make_dataset(const ImageList& list,
                                                     const data::ImageTransform& transform);

/// A small ImageNet-layout folder of real JPEG files for tests and demos. Image k of class c is
/// a smooth colour field whose hue and stripe direction depend on c (so a classifier can learn
/// the classes), with per-image noise and random size in [min_size, max_size].
struct SyntheticImageNetOptions {
  std::string root;
  std::int64_t classes = 4;
  std::int64_t train_per_class = 8;
  std::int64_t val_per_class = 2;
  int min_size = 40;
  int max_size = 80;
  bool flat_val = true;  ///< layout (b) with val_map.txt; false: layout (a)
  std::uint64_t seed = 0;
};
/// Write the folder (creating root). Class names are n00000000, n00000001, ... Returns the
/// number of files written.
std::int64_t write_synthetic_imagenet(const SyntheticImageNetOptions& options);

}  // namespace benchhost::imagenet
