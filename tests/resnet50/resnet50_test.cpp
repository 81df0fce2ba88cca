// resnet50 workload: the model's size and FLOPs, its composed backward against finite
// differences, layout equivalence, MLPerf tensor names, the ImageNet folder reader on a folder of
// JPEGs the test writes, and a few ImageNet-pipeline training steps through the Workload class.
// The mini convergence run is in mini_test.cpp; the PyTorch comparison in peer_test.cpp.

#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <gtest/gtest.h>

#include "benchhost/data/idx.hpp"
#include "benchhost/nn/serialize.hpp"
#include "common/gradcheck.hpp"
#include "common/shipped_configs.hpp"
#include "imagenet_folder.hpp"
#include "model.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::resnet;
namespace fs = std::filesystem;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

TEST(ResNet50, ParameterCount) {
  ResNet model(ResNetConfig::resnet50(1000));
  EXPECT_EQ(model.num_parameters(), 25'557'032);
  ResNet model1001(ResNetConfig::resnet50(1001));
  EXPECT_EQ(model1001.num_parameters(), 25'557'032 + 2048 + 1);
  // 53 conv + BN pairs: 53 conv weights, 106 BN parameters, fc weight + bias.
  EXPECT_EQ(model.parameters().size(), 53u + 106u + 2u);
  EXPECT_EQ(model.buffers().size(), 106u);
}

TEST(ResNet50, ForwardMacsAbout4Point1G) {
  ResNet model(ResNetConfig::resnet50(1000));
  const double macs = model.forward_macs_per_image(224, 224);
  EXPECT_GT(macs, 4.05e9);
  EXPECT_LT(macs, 4.15e9);
}

TEST(ResNet50, MlperfTensorNamesCoverTheComplianceList) {
  ResNet model(ResNetConfig::resnet50(1000));
  std::set<std::string> names;
  for (nn::Parameter* p : model.parameters()) {
    const std::string n = ResNet::mlperf_tensor_name(p->name);
    EXPECT_FALSE(n.empty()) << p->name;
    names.insert(n);
  }
  // closed_resnet.yaml lists 161 tensors: conv0/bn0, fc1, and per unit conv1-3 + bn1-3 (+ the
  // projection conv1sc/bnsc on the first unit of each stage).
  EXPECT_EQ(names.size(), 161u);
  for (const char* n : {"conv0_weight", "bn0_gamma", "bn0_beta", "fc1_weight", "fc1_bias",
                        "stage1_unit1_conv1sc_weight", "stage1_unit1_bnsc_beta",
                        "stage3_unit6_bn3_gamma", "stage4_unit3_conv3_weight"})
    EXPECT_TRUE(names.count(n)) << n;
}

// describe() declares closed ResNet-50's tensor names from the architecture
// (mlperf_tensor_names), a run logs them from the built model's parameters (mlperf_tensor_name):
// the two must be the same list, or a closed run would fail its own plugin's rules.
TEST(ResNet50, MlperfTensorNamesFromTheArchitectureMatchTheBuiltModel) {
  ResNetConfig mini = ResNetConfig::resnet50(10);
  mini.blocks = {1, 1, 1, 1};
  mini.base_width = 8;
  mini.small_stem = true;
  ResNetConfig uneven = mini;
  uneven.blocks = {2, 1, 3};
  for (const ResNetConfig& c : {ResNetConfig::resnet50(1000), mini, uneven}) {
    SCOPED_TRACE(fmt::format("blocks {}", fmt::join(c.blocks, ",")));
    ResNet model(c);
    std::vector<std::string> logged;
    for (nn::Parameter* p : model.parameters()) logged.push_back(ResNet::mlperf_tensor_name(p->name));
    EXPECT_EQ(mlperf_tensor_names(c.blocks), logged);
  }
  const std::vector<std::string> closed = mlperf_tensor_names(ResNetConfig::resnet50().blocks);
  EXPECT_EQ(closed.size(), 161u);
  EXPECT_EQ(std::set<std::string>(closed.begin(), closed.end()).size(), 161u) << "all distinct";
}

TEST(ResNet50, ZeroInitOfLastBnGamma) {
  ResNetConfig c = ResNetConfig::resnet50(10);
  c.blocks = {1, 1};
  c.base_width = 8;
  c.zero_init_last_bn_gamma = true;
  ResNet model(c);
  model.initialize(3);
  for (nn::Parameter* p : model.parameters()) {
    if (p->name.find("bn3.weight") != std::string::npos) {
      for (float v : p->value.to_float_vector()) EXPECT_EQ(v, 0.0f) << p->name;
    } else if (p->name.find("bn1.weight") != std::string::npos) {
      for (float v : p->value.to_float_vector()) EXPECT_EQ(v, 1.0f) << p->name;
    }
  }
}

ResNetConfig tiny_config(nn::ImageLayout layout) {
  ResNetConfig c;
  c.blocks = {1, 2};
  c.base_width = 4;
  c.num_classes = 5;
  c.in_channels = 2;
  c.small_stem = true;
  c.layout = layout;
  return c;
}

/// Finite differences through the whole network: for a few parameters, the analytic gradient
/// from ResNet::backward against central differences of the loss-weighted logits.
TEST(ResNet50, ComposedBackwardMatchesFiniteDifferences) {
  for (nn::ImageLayout layout : {nn::ImageLayout::nchw, nn::ImageLayout::nhwc}) {
    SCOPED_TRACE(nn::image_layout_name(layout));
    ResNet model(tiny_config(layout));
    model.initialize(11);
    // Non-trivial BN affine parameters so every path carries gradient.
    for (nn::Parameter* p : model.parameters())
      if (p->name.find("bn") != std::string::npos || p->name.find("downsample.1") != std::string::npos)
        p->value.copy_(random_tensor(p->value.shape(), 5 + p->value.numel(), 0.5f, 1.5f));
    const Tensor x = random_tensor(layout == nn::ImageLayout::nchw ? Shape{2, 2, 5, 5}
                                                                   : Shape{2, 5, 5, 2},
                                   12);
    for (const char* name : {"conv1.weight", "layer1.0.conv2.weight", "layer2.0.downsample.0.weight",
                             "layer2.1.bn3.weight", "fc.weight"}) {
      SCOPED_TRACE(name);
      nn::Parameter* param = nullptr;
      for (nn::Parameter* p : model.parameters())
        if (p->name == name) param = p;
      ASSERT_NE(param, nullptr);
      auto fwd = [&](const std::vector<Tensor>& in) {
        param->value.copy_(in[0]);
        return std::vector<Tensor>{model.forward(x)};
      };
      auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
        param->value.copy_(in[0]);
        model.zero_grad();
        model.forward(x);
        model.backward(dout[0]);
        return std::vector<Tensor>{param->grad.clone()};
      };
      benchhost::testing::GradcheckOptions opt;
      // Small steps: every ReLU kink crossed by a finite difference biases it, and a stem weight
      // moves every activation of the network.
      opt.eps = 1e-3;
      opt.max_checks_per_input = 8;
      opt.atol = 5e-3;
      opt.rtol = 5e-2;
      EXPECT_GRADCHECK(fwd, bwd, {param->value.clone()}, opt);
    }
  }
}

TEST(ResNet50, NhwcAndNchwModelsAgree) {
  ResNet a(tiny_config(nn::ImageLayout::nchw)), b(tiny_config(nn::ImageLayout::nhwc));
  a.initialize(21);
  b.initialize(21);
  const Tensor x = random_tensor({4, 2, 8, 8}, 22);
  const Tensor ya = a.forward(x);
  const Tensor yb = b.forward(x.permute({0, 2, 3, 1}).contiguous());
  EXPECT_TRUE(tensors_close(yb, ya, 1e-4, 1e-3));
  const Tensor dy = random_tensor(ya.shape(), 23);
  a.backward(dy);
  b.backward(dy);
  auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(tensors_close(pb[i]->grad, pa[i]->grad, 1e-4, 1e-3)) << pa[i]->name;
}

// ---- ImageNet folders ----

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("bh_resnet_{}_{}", name, ::getpid());
  fs::remove_all(p);
  return p;
}

TEST(ImageNetFolder, ReadsBothValidationLayouts) {
  for (bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "flat val + val_map.txt" : "val class folders");
    const fs::path root = temp_dir(flat ? "flat" : "folders");
    imagenet::SyntheticImageNetOptions o;
    o.root = root.string();
    o.classes = 3;
    o.train_per_class = 4;
    o.val_per_class = 2;
    o.flat_val = flat;
    EXPECT_EQ(imagenet::write_synthetic_imagenet(o), 18);
    const imagenet::ImageList train = imagenet::scan_train(o.root);
    EXPECT_EQ(train.size(), 12);
    EXPECT_EQ(train.classes, (std::vector<std::string>{"n00000000", "n00000001", "n00000002"}));
    EXPECT_EQ(train.labels.front(), 0);
    EXPECT_EQ(train.labels.back(), 2);
    const imagenet::ImageList val = imagenet::scan_val(o.root, train.classes);
    ASSERT_EQ(val.size(), 6);
    for (std::int64_t i = 0; i < val.size(); ++i) EXPECT_EQ(val.labels[i], i / 2) << val.paths[i];

    data::ImageTransform t;
    t.out_height = t.out_width = 32;
    t.layout = data::Layout::hwc;
    auto ds = imagenet::make_dataset(train, t);
    const data::Sample s = ds->get(data::SampleContext{5, 0, 1});
    EXPECT_EQ(s["image"].shape(), Shape({32, 32, 3}));
    EXPECT_EQ(s["label"].item(), 1.0);
    fs::remove_all(root);
  }
}

TEST(ImageNetFolder, BadLayoutsAreReported) {
  const fs::path root = temp_dir("bad");
  EXPECT_THROW(imagenet::scan_train(root.string()), DataError);
  imagenet::SyntheticImageNetOptions o;
  o.root = root.string();
  o.classes = 2;
  o.train_per_class = 1;
  o.val_per_class = 1;
  imagenet::write_synthetic_imagenet(o);
  const auto classes = imagenet::list_classes((root / "train").string());
  {
    std::ofstream(root / "val" / "val_map.txt") << "ILSVRC2012_val_00000001.JPEG 7\n";
  }
  EXPECT_THROW(imagenet::scan_val(root.string(), classes), DataError);  // label out of range
  {
    std::ofstream(root / "val" / "val_map.txt") << "missing.JPEG 0\n";
  }
  EXPECT_THROW(imagenet::scan_val(root.string(), classes), DataError);  // file missing
  {
    // A name the file system refuses (found by fuzz_datasets: it escaped as std::filesystem_error).
    std::ofstream(root / "val" / "val_map.txt") << std::string(5000, 'x') << " 0\n";
  }
  try {
    imagenet::scan_val(root.string(), classes);
    ADD_FAILURE() << "a 5000-character file name was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("val_map.txt:1"), std::string::npos) << e.message();
  }
  {
    std::ofstream(root / "val" / "val_map.txt") << "ILSVRC2012_val_00000002.JPEG n00000001\n";
  }
  EXPECT_EQ(imagenet::scan_val(root.string(), classes).labels, std::vector<std::int64_t>{1});
  fs::remove_all(root);
}

RunContext context(std::map<std::string, std::string> options, const std::string& mode = "ttt") {
  RunContext ctx;
  ctx.mode = mode;
  ctx.device = Device::cpu();
  ctx.precision = "fp32";
  ctx.seed = 7;
  ctx.num_threads = 2;
  ctx.options = declared_options<ResNetWorkload>(std::move(options));
  return ctx;
}

/// The full ImageNet path through the Workload: folder scan, JPEG decode + random-resized-crop
/// + flip + normalise in the loader, a narrow ResNet, LARS with warm-up, evaluation.
TEST(ResNet50Workload, TrainsOnAnImageNetFolder) {
  const fs::path root = temp_dir("workload");
  imagenet::SyntheticImageNetOptions o;
  o.root = root.string();
  o.classes = 4;
  o.train_per_class = 8;
  o.val_per_class = 3;
  imagenet::write_synthetic_imagenet(o);
  ResNetWorkload w;
  const RunInfo info = w.setup(context({{"dataset", "imagenet"},
                                        {"data-dir", root.string()},
                                        {"blocks", "1,1"},
                                        {"base-width", "8"},
                                        {"num-classes", "4"},
                                        {"image-size", "32"},
                                        {"batch-size", "8"},
                                        {"eval-batch-size", "5"},
                                        {"epochs", "2"},
                                        {"eval-every-epochs", "1"},
                                        {"base-lr", "1.0"},
                                        {"warmup-epochs", "1"}}));
  EXPECT_EQ(info.samples_per_epoch, 32);
  EXPECT_EQ(info.eval_samples, 12);
  EXPECT_EQ(info.eval_every_samples, 32);
  EXPECT_GT(info.train_flops_per_sample, 2.9 * info.infer_flops_per_sample);
  const Hyperparameters h = w.hyperparameters();
  std::set<std::string> keys;
  for (const auto& [k, v] : h) keys.insert(k);
  for (const char* k : {"global_batch_size", "opt_name", "lars_epsilon", "lars_opt_weight_decay",
                        "lars_opt_base_learning_rate", "lars_opt_end_learning_rate",
                        "lars_opt_learning_rate_decay_poly_power",
                        "lars_opt_learning_rate_decay_steps",
                        "lars_opt_learning_rate_warmup_epochs", "lars_opt_momentum"})
    EXPECT_TRUE(keys.count(k)) << k;
  w.begin_epoch(0);
  for (int step = 0; step < 4; ++step) {
    w.prepare_batch();
    const StepResult r = w.train_step();
    EXPECT_EQ(r.samples, 8);
    EXPECT_TRUE(std::isfinite(r.loss));
  }
  const EvalResult e = w.evaluate();
  EXPECT_EQ(e.samples, 12);
  EXPECT_GE(e.metric, 0.0);
  EXPECT_LE(e.metric, 1.0);
  w.teardown();
  fs::remove_all(root);
}

// IDX files whose images are not 28x28 (a header declaring 1x784) or whose labels exceed the
// classifier are data errors naming the file, not a run that trains on them.
TEST(ResNet50Workload, FashionMnistFilesOfTheWrongShapeAreDataErrors) {
  const fs::path dir = temp_dir("idx_shape");
  fs::create_directories(dir);
  auto write_set = [&](const Shape& image_shape, std::uint8_t label) {
    for (const char* split : {"train", "t10k"}) {
      Tensor images = Tensor::zeros(image_shape, DType::u8);
      Tensor labels = Tensor::zeros({image_shape[0]}, DType::u8);
      labels.data<std::uint8_t>()[1] = label;
      data::write_idx((dir / fmt::format("{}-images-idx3-ubyte.gz", split)).string(), images, true);
      data::write_idx((dir / fmt::format("{}-labels-idx1-ubyte.gz", split)).string(), labels, true);
    }
  };
  const std::map<std::string, std::string> mini{{"dataset", "fashion-mnist"}, {"data-dir", dir.string()},
                                                {"image-size", "28"}, {"num-classes", "10"}, {"small-stem", "true"},
                                                {"blocks", "1,1"}, {"base-width", "8"}, {"batch-size", "4"}};
  auto refusal = [&] {
    ResNetWorkload w;
    try {
      w.setup(context(mini));
    } catch (const DataError& e) {
      return e.message();
    }
    return std::string("(no data error)");
  };
  write_set({8, 1, 784}, 3);
  EXPECT_NE(refusal().find("train-images-idx3-ubyte.gz: images are 1x784 but resnet50.image-size is 28"),
            std::string::npos) << refusal();
  write_set({8, 28, 28}, 12);
  EXPECT_NE(refusal().find("train-labels-idx1-ubyte.gz: label 12 of image 1 is outside [0, 10)"), std::string::npos)
      << refusal();
  fs::remove_all(dir);
}

TEST(ResNet50Workload, SyntheticThroughputAndInference) {
  ResNetWorkload w;
  RunContext train = context({{"blocks", "1,1"}, {"base-width", "8"}, {"image-size", "32"},
                              {"batch-size", "4"}}, "train");
  train.synthetic_data = true;
  const RunInfo info = w.setup(train);
  EXPECT_GT(info.samples_per_epoch, 0);
  w.prepare_batch();
  EXPECT_EQ(w.train_step().samples, 4);
  ResNetWorkload inf;
  RunContext ctx = context({{"blocks", "1,1"}, {"base-width", "8"}, {"image-size", "32"}}, "infer");
  ctx.batch_size = 3;
  inf.setup(ctx);
  EXPECT_EQ(inf.infer_step().samples, 3);
  EXPECT_EQ(inf.infer_step().samples, 3);
}

TEST(ResNet50Workload, SupportAndOptionErrors) {
  RunContext ctx = context({});
  for (const char* p : {"fp32", "bf16", "fp16"}) {  // bf16/fp16: emulated on the CPU
    ctx.precision = p;
    EXPECT_EQ(ResNetWorkload::check_support(ctx), "") << p;
  }
  ctx.precision = "tf32";  // a CUDA math mode
  EXPECT_NE(ResNetWorkload::check_support(ctx).find("tf32"), std::string::npos);
  ctx.precision = "fp8";
  EXPECT_NE(ResNetWorkload::check_support(ctx).find("fp8"), std::string::npos);
  ctx.precision = "fp64";
  EXPECT_NE(ResNetWorkload::check_support(ctx).find("unknown precision"), std::string::npos);
  ctx.precision = "fp32";
  ctx.device = Device::cuda(0);
  if (!device_available(ctx.device)) EXPECT_NE(ResNetWorkload::check_support(ctx), "");
  // Values the declaration does not allow never reach setup().
  EXPECT_THROW(context({{"optimizer", "adam"}, {"dataset", "synthetic"}, {"blocks", "1"}}), InvalidArgument);
  EXPECT_THROW(context({{"blocks", "3,x"}}), InvalidArgument);
  EXPECT_THROW(context({{"stages", "4"}}), InvalidArgument);  // not an option
  ResNetWorkload w;
  EXPECT_THROW(w.setup(context({{"dataset", "imagenet"}, {"data-dir", "/nonexistent/imagenet"},
                                {"blocks", "1"}})),
               DataError);
  EXPECT_THROW(w.setup(context({{"dataset", "imagenet"}, {"blocks", "1"}})), InvalidArgument);  // no data-dir
  // A cross-option check setup() keeps: training batch norm needs two samples per batch.
  EXPECT_THROW(w.setup(context({{"dataset", "synthetic"}, {"blocks", "1"}, {"batch-size", "1"}}, "train")),
               InvalidArgument);
}

/// Expects the declaration to refuse `values` with a message that contains `why`.
void expect_refused(std::map<std::string, std::string> values, const std::string& why) {
  try {
    declared_options<ResNetWorkload>(std::move(values));
    ADD_FAILURE() << "accepted; expected a refusal with: " << why;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

// Note [Options declared once]: a value outside the declared range is refused with the option,
// the value and what is allowed; the defaults are the MLPerf reference.
TEST(ResNet50Workload, OutOfRangeOptionsAreRefusedWithTheirRange) {
  expect_refused({{"target", "1.5"}},
                 "option --resnet50.target: '1.5' is above the maximum 1; allowed: a number in (0, 1]");
  expect_refused({{"target", "0"}}, "allowed: a number in (0, 1]");
  expect_refused({{"image-size", "4"}},
                 "option --resnet50.image-size: '4' is below the minimum 8; allowed: an integer >= 8");
  expect_refused({{"blocks", "3,4,0,3"}}, "allowed: a comma-separated list of 1 to 8 integers >= 1");
  expect_refused({{"blocks", "1,1,1,1,1,1,1,1,1"}}, "has 9 elements");
  expect_refused({{"layout", "chwn"}}, "allowed: one of nhwc, nchw");
  expect_refused({{"momentum", "1"}}, "allowed: a number in [0, 1)");
}

// Note [ResNet options]: the defaults are the MLPerf closed reference, which mlperf.conf repeats
// value for value (but for where the data lives).
TEST(ResNet50Workload, DefaultsAreTheMlperfReference) {
  test_support::expect_defaults_are_mlperf_conf<ResNetWorkload>("resnet50", {"data-dir"});
}

// Every config shipped in configs/resnet50/ is allowed by the declaration.
TEST(ResNet50Workload, ShippedConfigsAreAllowed) {
  test_support::expect_shipped_configs_allowed<ResNetWorkload>("resnet50", {"mlperf.conf", "sgd.conf", "mini.conf"});
}

// The rules tools/mllog_check.py checks a "resnet" MLLOG against: closed ResNet-50's 161 tensors,
// from the architecture (no model is built by describe()).
TEST(ResNet50Workload, DeclaresTheMlperfRulesOfResnet) {
  const WorkloadInfo info = ResNetWorkload::describe();
  EXPECT_EQ(info.benchmark, "resnet");
  const mlperf::Rules& r = info.mlperf;
  EXPECT_TRUE(r.closed_division);
  EXPECT_EQ(r.runs, 5);
  EXPECT_EQ(r.olympic_drop_each_side, 1);
  ASSERT_TRUE(r.closed_target.min.has_value());
  EXPECT_EQ(*r.closed_target.min, 0.759);
  std::map<std::string, const mlperf::LoggedKey*> keys;
  for (const mlperf::LoggedKey& k : r.keys) EXPECT_TRUE(keys.emplace(k.key, &k).second) << k.key << " twice";
  EXPECT_EQ(keys.size(), 3u + 8u + 7u);
  ASSERT_TRUE(keys.count("weights_initialization"));
  EXPECT_EQ(keys["weights_initialization"]->closed_metadata_values,
            mlperf_tensor_names(ResNetConfig::resnet50().blocks));
  ASSERT_TRUE(keys.count("lars_opt_momentum"));
  EXPECT_EQ(keys["lars_opt_momentum"]->when_value, "lars");
  ASSERT_TRUE(keys.count("opt_learning_rate_decay_boundary_epochs"));
  EXPECT_EQ(keys["opt_learning_rate_decay_boundary_epochs"]->when_value, "sgd");
}

}  // namespace

// Note [FLOPs per sample] (docs/plugin-abi.md): the declared training FLOPs against a hand count of
// a two-stage bottleneck ResNet at 32x32, layer by layer (MACs = output pixels x in x out x k x k;
// batch norm, ReLU, pooling and the loss are not counted; training = 3 x forward, 2 FLOPs per MAC).
TEST(ResNet50Workload, DeclaredTrainFlopsMatchAHandCount) {
  ResNetWorkload w;
  RunContext train = context({{"blocks", "1,1"}, {"base-width", "8"}, {"image-size", "32"}, {"num-classes", "4"},
                              {"batch-size", "2"}}, "train");
  train.synthetic_data = true;
  const RunInfo info = w.setup(train);
  const double stem = 16.0 * 16 * 3 * 8 * 7 * 7;  // 7x7/2 conv, 32 -> 16, 3 -> 8 channels; max pool 16 -> 8
  // stage 1 (8x8, width 8, out 32): 1x1 8->8, 3x3 8->8, 1x1 8->32, projection 1x1 8->32
  const double stage1 = 8.0 * 8 * 8 * 8 + 8.0 * 8 * 8 * 8 * 9 + 8.0 * 8 * 8 * 32 + 8.0 * 8 * 8 * 32;
  // stage 2 (v1.5: the 3x3 strides, 8x8 -> 4x4; width 16, out 64): 1x1 32->16 at 8x8, 3x3/2 16->16,
  // 1x1 16->64, projection 1x1/2 32->64
  const double stage2 = 8.0 * 8 * 32 * 16 + 4.0 * 4 * 16 * 16 * 9 + 4.0 * 4 * 16 * 64 + 4.0 * 4 * 32 * 64;
  const double fc = 64.0 * 4;  // after global average pooling
  const double forward_macs = stem + stage1 + stage2 + fc;
  EXPECT_DOUBLE_EQ(info.infer_flops_per_sample, 2 * forward_macs);
  EXPECT_DOUBLE_EQ(info.train_flops_per_sample, 3 * 2 * forward_macs);
}
