#pragma once
/// @file datasets/kits19/kits19.hpp  MLPerf's preprocessed KiTS19 layout for 3D U-Net: the case
/// index (train / eval split), the training Dataset with the reference augmentation, and the
/// evaluation cases.
///
/// Layout (MLPerf image_segmentation/pytorch preprocess_dataset.py output), one directory:
///   case_XXXXX_x.npy     f32 '<f4' [1, D, H, W]  the normalised CT volume
///   case_XXXXX_y.npy     u8  '|u1' [1, D, H, W]  0 background, 1 kidney, 2 tumour
///   evaluation_cases.txt one 5-digit case id per line: those cases are the evaluation set, all
///                        others train (data_loader.py get_data_split: 168 train, 42 eval)
/// Files not named case_<5 digits>_{x,y}.npy are ignored. Volumes are memory-mapped (map_npy):
/// the full preprocessed set is ~30 GB, opening it reads the headers and scans the labels once.
///
/// Note [Foreground boxes at load]
/// The reference's foreground crop relabels the chosen class's mask on every sample
/// (scipy.ndimage.label + find_objects, Note [Reference component semantics] in
/// components.hpp) and keeps the two components with the largest bounding boxes. That result
/// depends on the label volume and the class only, never on the random state, so it is computed
/// once per training case and class when the index is opened (in parallel over cases) and the
/// per-sample crop draws from the stored boxes: the same boxes in the same order, so the same
/// draws give the same crop as relabelling each time would. The label scan that checks every
/// value is in {0, 1, 2} is the same pass.
///
/// Threading: Kits19Index, Kits19TrainDataset and Kits19EvalCases are immutable after
/// construction; get() and the eval accessors may be called from several threads at once.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/tensor.hpp"
#include "components.hpp"

namespace benchhost::kits19 {

/// One case: its id ("00042") and the two mapped volumes.
struct Kits19Case {
  std::string id;
  std::string image_path, label_path;
  Tensor image;  ///< f32 [1, D, H, W], memory-mapped (read-only use)
  Tensor label;  ///< u8 [1, D, H, W], memory-mapped
  /// Per foreground class 1 and 2 (index 0, 1): whether the class occurs in the label, and the
  /// (up to) two largest-box components in the reference's order (Note [Foreground boxes at
  /// load]). Filled for training cases only.
  std::array<bool, 2> has_class{false, false};
  std::array<std::vector<Box>, 2> boxes;
};

struct Kits19IndexOptions {
  /// Training volumes must be at least this large in every dimension (the training patch).
  std::array<std::int64_t, 3> min_train_shape{128, 128, 128};
};

/// The cases of one directory, split as the reference splits them. Throws DataError naming the
/// file and the problem: missing directory, no cases, an x without its y or a y without its x,
/// x and y shapes differing, a wrong dtype or rank, a training dimension below min_train_shape,
/// a label value outside {0, 1, 2} (with the value), an evaluation id without files, or a
/// malformed line of evaluation_cases.txt (with its line number).
class Kits19Index {
 public:
  explicit Kits19Index(const std::string& dir, const Kits19IndexOptions& options = {});
  const std::string& dir() const { return dir_; }
  /// Training cases in ascending id order (the reference's sorted glob order).
  const std::vector<Kits19Case>& train() const { return train_; }
  /// Evaluation cases in ascending id order.
  const std::vector<Kits19Case>& eval() const { return eval_; }

 private:
  std::string dir_;
  std::vector<Kits19Case> train_, eval_;
};

/// Parse evaluation_cases.txt: one 5-digit id per line (trailing spaces / CR and blank lines are
/// allowed). Throws DataError naming the file and the line number of a malformed line.
std::vector<std::string> read_evaluation_cases(const std::string& path);

struct Kits19TrainOptions {
  std::array<std::int64_t, 3> patch{128, 128, 128};  ///< crop size per dimension (D, H, W)
  double oversampling = 0.4;        ///< probability of a foreground crop (RandBalancedCrop)
  double flip_probability = 1.0 / 3.0;  ///< per axis (RandFlip)
  double brightness_factor = 0.3;   ///< RandomBrightnessAugmentation
  double brightness_probability = 0.1;
  double noise_std = 0.1;           ///< GaussianNoise: std ~ U(0, noise_std)
  double noise_probability = 0.1;
};

/// Note [Reference augmentation]
/// Sample i is training case i (the reference's epoch is one pass over its 168 training cases),
/// transformed in the reference's order, each random draw taken from ctx.rng() where the
/// reference uses Python's random or numpy's global state (random.random() -> uniform() in
/// [0, 1); random.randrange(n) -> below(n); np.random.uniform(a, b) -> a + (b - a) u):
///   1. RandBalancedCrop: u < oversampling -> foreground crop, else uniform crop.
///      Uniform crop (_rand_crop): corner_a = randrange(dim_a - p_a) per axis, where
///      randrange(0) = 0; randrange excludes its bound, so the last corner dim - p is never
///      drawn (as in the reference).
///      Foreground crop (rand_foreg_cropd): class c uniform among the foreground classes present
///      (np.random.choice(np.unique(label[label > 0]))), then one of the (up to) two stored boxes
///      of c uniformly (random.randrange(len)), then per axis adjust(): diff = p - box extent,
///      sign = -1 if diff < 0 else 1, l = randrange(|diff|), h = |diff| - l,
///      low = max(0, start - sign l), high = min(dim, stop + sign h), and when the window is
///      still short by d = p - (high - low) > 0: high += d if low == 0 else low -= d.
///      A label without foreground makes the reference's np.random.choice raise; here it takes
///      the uniform crop, which is what the reference's own `if not foreg_slices` fallback does.
///   2. RandFlip: for axes D, H, W in that order, u < 1/3 flips that axis of image and label.
///   3. Cast (image f32, label u8: already so).
///   4. RandomBrightnessAugmentation: u < 0.1 -> f ~ U(0.7, 1.3) and image *= (1 + f), i.e. a
///      scale in [1.7, 2.3) -- the reference's quirk, kept. numpy multiplies the f32 image by a
///      float64 array, so the product is formed in double and rounded back to f32.
///   5. GaussianNoise: u < 0.1 -> s ~ U(0, 0.1), image += N(0, s) per voxel (f32), the noise
///      drawn in C order of the cropped, flipped patch.
class Kits19TrainDataset final : public data::Dataset {
 public:
  /// `index` must outlive the dataset. Throws InvalidArgument for bad options, DataError when a
  /// training case is smaller than the patch.
  Kits19TrainDataset(const Kits19Index& index, const Kits19TrainOptions& options = {});
  std::int64_t size() const override { return static_cast<std::int64_t>(index_->train().size()); }
  /// {"image": f32 [1, pD, pH, pW], "label": u8 [1, pD, pH, pW]} (Note [Reference augmentation]).
  data::Sample get(const data::SampleContext& ctx) const override;
  using Dataset::get;
  std::string source(std::int64_t index) const override;
  const Kits19TrainOptions& options() const { return options_; }

  /// The crop of step 1 alone (corner per axis), drawn from `rng` as get() draws it; exposed
  /// for tests. Uses only the case's shape and stored boxes.
  std::array<std::int64_t, 3> draw_crop(const Kits19Case& c, Rng& rng) const;

 private:
  const Kits19Index* index_;
  Kits19TrainOptions options_;
};

/// The evaluation cases: full volumes for sliding-window inference.
class Kits19EvalCases {
 public:
  /// `index` must outlive this object.
  explicit Kits19EvalCases(const Kits19Index& index) : index_(&index) {}
  std::int64_t size() const { return static_cast<std::int64_t>(index_->eval().size()); }
  /// Case j's image f32 [1, D, H, W] and label u8 [1, D, H, W], memory-mapped (do not write).
  /// Throws InvalidArgument for j out of range.
  const Tensor& image(std::int64_t j) const;
  const Tensor& label(std::int64_t j) const;
  const std::string& id(std::int64_t j) const;
  std::string source(std::int64_t j) const;

 private:
  const Kits19Index* index_;
};

}  // namespace benchhost::kits19
