#pragma once
/// @file datasets/kits19/synthetic.hpp  KiTS19-shaped volumes with a planted segmentation, in
/// the MLPerf preprocessed layout (kits19.hpp), for tests and the mini 3D U-Net configuration.
///
/// Note [Planted kidneys]
/// Each case is a volume of random size (size_min..size_max per dimension) holding
///   - 1 or 2 "kidneys": ellipsoids with radii U(8, 14) voxels per axis (scaled by
///     min(1, min(dims) / 64)), a random centre keeping them inside, a random rotation: label 1;
///   - one "tumour": an ellipsoid with radii U(6, 10) (same scale) centred inside a kidney, so
///     it lies in it or grows out of it: label 2, overriding 1;
///   - 2 to 5 "distractors": small ellipsoids (radii U(2, 4.5), same scale) of kidney intensity,
///     away from the kidneys, unlabelled: only their size and shape tell them from a kidney.
/// Intensity = mean by tissue (background 0, kidney and distractor 1.0, tumour 2.2) + a faint
/// low-frequency bias field (two random plane waves of amplitude 0.05) + i.i.d. voxel noise of
/// sigma U(0.5, 0.65) per case. Both classes occur in every volume (a case that loses one is
/// redrawn). Per voxel the classes overlap heavily (noise ~0.6 against steps of 1.0 and 1.2,
/// labelled and unlabelled blobs of one intensity), so the best per-voxel intensity-threshold
/// classifier scores a mean Dice of about 0.47 (the tests bound it by 0.65), while a model that
/// averages over neighbourhoods and sees shape (kidneys are large smooth ellipsoids, tumours
/// bright blobs inside them, distractors small free-floating nodules) does far better: thresholds
/// after two hand-placed 3x3x3 box means reach ~0.89 (see the tests).
///
/// Note [A tumour large enough to learn from]
/// Up to version 1 of the generator the tumour had radii U(3, 7) and intensity 1.8. With it the
/// mini (configs/unet3d/mini.conf, 32^3 patches from 64-80^3 volumes) found the tumour class late
/// or never: most patches hold no tumour, and there the reference's Dice term punishes any tumour
/// prediction, so whether a run learned the class by about epoch 20 decided it (0.80-0.92 when it
/// did, 0.52-0.73 for the rest of 40 epochs when it did not), and the thread count or the -O1
/// sanitizer build picked another trajectory. Version 2 (radii U(6, 10), intensity 2.2) reached
/// 0.78 from every seed and build tried, by epoch 12-24
/// (results/cpu/2026-11-28/unet3d-mini-tumour). Real KiTS19 tumours are often as large as this
/// against the kidney, and some grow out of it.
///
/// Note [No strong bias field]
/// A bias field of amplitude 0.25 (a first version) made the mini unlearnable in minutes: the
/// U-Net's instance norm rescales every window to unit variance, so in a window with no kidney a
/// smooth intensity ramp becomes as strong as a kidney's edge, and the model painted kidneys over
/// the bright half of such windows (8% of the background in evaluation, mean Dice stuck near
/// 0.5). Real CT has no such ramps after MLPerf's clipping and normalisation; the faint field
/// kept here only breaks exact symmetry.
///
/// Everything is a pure function of (options, case id): same options, same bytes.

#include <cstdint>
#include <string>

namespace benchhost {
class Communicator;  // comm/communicator.hpp
}

namespace benchhost::kits19 {

struct Kits19SyntheticOptions {
  int train_cases = 48;
  int eval_cases = 12;
  int size_min = 48;  ///< per dimension, drawn per case in [size_min, size_max]
  int size_max = 64;
  std::uint64_t seed = 1;
};

struct Kits19SyntheticReport {
  int train_cases = 0, eval_cases = 0;
  bool generated = false;  ///< false: the directory was already there
};

/// Write case_%05d_x.npy / case_%05d_y.npy for ids 0..train+eval-1 and evaluation_cases.txt
/// (eval ids spread evenly over the range, like the reference's interleaved list) plus
/// kits19_synthetic.txt recording the options. Atomic: everything is written into a temporary
/// directory beside `dir` which is then renamed to `dir`, so a killed run leaves no partial set.
/// Throws InvalidArgument for bad options or when `dir` already exists, DataError when the
/// files cannot be written.
Kits19SyntheticReport generate_kits19_synthetic(const std::string& dir, const Kits19SyntheticOptions& opts);

/// Generate `dir` if it does not exist. With a communicator of more than one rank, rank 0
/// generates while the others wait at a barrier (every rank must call). An existing directory
/// written by the generator with other options is a DataError (remove it to regenerate); one
/// without kits19_synthetic.txt (real data) is left alone.
Kits19SyntheticReport ensure_kits19_synthetic(const std::string& dir, const Kits19SyntheticOptions& opts,
                                              Communicator* comm = nullptr);

/// The text of kits19_synthetic.txt for these options (what ensure_kits19_synthetic compares).
std::string kits19_synthetic_options_text(const Kits19SyntheticOptions& opts);

}  // namespace benchhost::kits19
