// The retinanet workload: the lifecycle around the RetinaNet of model.hpp and the data of
// data.hpp: options, Adam with the iteration warm-up, the losses of the detection toolkit, the
// reference post-processing and COCO mAP. See workload.hpp.

#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "benchhost/comm/data_parallel.hpp"
#include "benchhost/device.hpp"
#include "benchhost/metrics/coco_map.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/threading.hpp"

namespace benchhost::retinanet {

namespace {

// Note [RetinaNet options]
// Every knob of the run is an option, so configs/retinanet/*.conf describe complete runs.
// Defaults are the MLPerf closed reference (single_stage_detector/ssd, config_DGXA100_001x08x032):
// ResNeXt50-32x4d with the ImageNet-pretrained backbone from a user-supplied file, FPN 256,
// 264 classes, 800x800 images, Adam at 1e-4 for a global batch of 256 (32 per rank on 8 ranks)
// with one warm-up epoch from a factor 1e-3, evaluation after every epoch, target mAP 0.34.
// `anchor-scale` multiplies the reference's anchor sizes (32..812) for a scaled-down image size.
std::vector<OptionSpec> option_specs() {
  return {
      int_list_option("blocks", {3, 4, 6, 3}, "bottleneck blocks per stage (ResNeXt50: 3,4,6,3)").at_least(1).items(4, 4),
      int_option("groups", 32, "ResNeXt cardinality").at_least(1),
      int_option("width-per-group", 4, "ResNeXt width per group").at_least(1).in("channels"),
      int_option("stem-channels", 64, "stem output channels").at_least(1).in("channels"),
      int_option("fpn-channels", 256, "FPN and head channels").at_least(1).in("channels"),
      int_option("head-convs", 4, "conv+ReLU layers per head").range(0, 8),
      int_option("trainable-layers", 3, "backbone stages trained, from layer4 down (MLPerf: 3; 5 trains conv1 too)").range(0, 5),
      int_option("num-classes", 264, "classes (sigmoid, no background; OpenImages MLPerf: 264)").at_least(1),
      choice_option("layout", "nhwc", {"nhwc", "nchw"}, "activation layout (nhwc: channels last)"),
      int_option("image-size", 800, "images are resized to S x S (MLPerf: 800)").at_least(32).in("pixels"),
      float_option("anchor-scale", 1.0, "multiplies the reference anchor sizes 32..812").above(0),
      string_option("data-dir", "", "the MLPerf OpenImages export (train/ and validation/ with data/ and labels/)"),
      bool_option("generate", false, "fill a missing data-dir with the synthetic generator (datasets/coco/synthetic.hpp)"),
      int_option("gen-train-images", 512, "generator: training images").range(1, 1000000).in("images"),
      int_option("gen-val-images", 128, "generator: validation images").range(1, 1000000).in("images"),
      int_option("gen-min-size", 96, "generator: smallest image side").range(16, 4096).in("pixels"),
      int_option("gen-max-size", 160, "generator: largest image side").range(16, 4096).in("pixels"),
      int_option("gen-classes", 4, "generator: shape classes").range(1, 6),
      int_option("gen-max-objects", 6, "generator: objects per image at most").range(1, 64),
      int_option("gen-seed", 1, "generator: seed (fixed: the same data for every run)").at_least(0),
      bool_option("pretrained-backbone", true, "start the backbone from backbone-weights (MLPerf: yes)"),
      string_option("backbone-weights", "", "ImageNet-pretrained ResNeXt50-32x4d weights (tools/peers/weights.py from-torch)"),
      int_option("batch-size", 32, "per-rank training batch size when -b is not given").at_least(1).in("images"),
      int_option("eval-batch-size", 32, "evaluation batch size").at_least(1).in("images"),
      int_option("loader-threads", 0, "data loader threads (0 = the run's thread count)").at_least(0),
      int_option("epochs", 26, "maximum epochs of time-to-train").at_least(1).in("epochs"),
      float_option("target", 0.34, "COCO mAP target of time-to-train (MLPerf: 0.34)").above(0).at_most(1),
      float_option("lr", 1e-4, "Adam learning rate").above(0),
      float_option("warmup-epochs", 1, "iteration warm-up length").at_least(0).in("epochs"),
      float_option("warmup-factor", 1e-3, "learning-rate factor at the first iteration").range(0, 1),
      string_option("init-weights", "", "weights file to start from (nn/serialize.hpp format)"),
      string_option("save-initial-weights", "", "write the initial weights here (for the PyTorch peer)"),
  };
}

// closed_ssd.yaml of mlcommons/logging and the rules' 5 runs.
mlperf::Rules mlperf_rules() {
  using mlperf::logged_once;
  mlperf::Rules r;
  r.closed_division = true;
  r.runs = 5;
  r.olympic_drop_each_side = 1;
  r.eval_cadence = "every epoch";
  r.closed_target = mlperf::between(0.34, 1.0, false, true);
  r.open_target = mlperf::between(0.0, 1.0, false, true);  // open_ssd.yaml: some value < 1.0
  r.keys.push_back(logged_once("global_batch_size", mlperf::positive()));
  r.keys.push_back(logged_once("opt_name", mlperf::equals(std::string("adam"))));
  r.keys.push_back(logged_once("opt_base_learning_rate", mlperf::between(0, 1e9)));
  r.keys.push_back(logged_once("opt_weight_decay", mlperf::equals(0.0)));
  r.keys.push_back(logged_once("opt_learning_rate_warmup_epochs", mlperf::between(0, 1e9)));
  r.keys.push_back(logged_once("opt_learning_rate_warmup_factor", mlperf::between(0, 1e9)));
  return r;
}

std::int64_t halve(std::int64_t s) { return (s + 1) / 2; }  // a stride-2 conv/pool with "same" padding

}  // namespace

// ---------------------------------------------------------------------------------------------

IterationWarmupSchedule::IterationWarmupSchedule(float base_lr, double warmup_factor, std::int64_t warmup_iters)
    : base_lr_(base_lr), factor_(warmup_factor), iters_(std::max<std::int64_t>(0, warmup_iters)) {}

float IterationWarmupSchedule::lr(std::int64_t step) const {
  if (step >= iters_) return base_lr_;
  const double alpha = static_cast<double>(step) / static_cast<double>(iters_);
  return static_cast<float>(base_lr_ * (factor_ * (1.0 - alpha) + alpha));
}

std::string IterationWarmupSchedule::describe() const {
  return fmt::format("warm-up from {} x {} over {} iterations, then constant", factor_, base_lr_, iters_);
}

// ---------------------------------------------------------------------------------------------

BatchLoss retinanet_batch_loss(const HeadOutputs& out, const Tensor& anchors, const Tensor& boxes,
                               const Tensor& labels, const Tensor& num_boxes, float dloss) {
  std::vector<Tensor> cls, box;
  std::vector<std::int64_t> level_sizes;
  for (std::size_t l = 0; l < out.cls_logits.size(); ++l) {
    cls.push_back(nn::cast(out.cls_logits[l], DType::f32));
    box.push_back(nn::cast(out.bbox_deltas[l], DType::f32));
    level_sizes.push_back(out.cls_logits[l].size(1));
  }
  const Tensor cls_all = nn::concat(cls, 1), box_all = nn::concat(box, 1);  // [B, A, K], [B, A, 4]
  const std::int64_t n = cls_all.size(0);
  BH_CHECK_AS(InvalidArgument, cls_all.size(1) == anchors.size(0),
              "retinanet: the heads give {} anchors per image, the anchor generator {}", cls_all.size(1), anchors.size(0));
  const Tensor counts = num_boxes.to(Device::cpu()).to(DType::i64);
  BatchLoss r;
  std::vector<Tensor> dcls_rows, dbox_rows;
  const float per_image = dloss / static_cast<float>(n);
  for (std::int64_t b = 0; b < n; ++b) {
    const std::int64_t g = counts.data<std::int64_t>()[b];
    BH_CHECK_AS(DataError, g >= 0 && g <= boxes.size(1), "retinanet: image {} of the batch says {} boxes of {}", b, g,
                boxes.size(1));
    const Tensor gt_boxes = boxes.select(0, b).slice(0, 0, g).contiguous();
    const Tensor gt_labels = labels.select(0, b).slice(0, 0, g).contiguous();
    const Tensor logits = cls_all.select(0, b).contiguous(), deltas = box_all.select(0, b).contiguous();
    const Tensor matched = g > 0 ? nn::match_anchors(nn::box_iou(gt_boxes, anchors))
                                 : Tensor::full({anchors.size(0)}, -1.0, DType::i64, anchors.device());
    const nn::FocalLossResult fl = nn::retinanet_focal_loss_forward(logits, matched, gt_labels);
    const float bl = nn::retinanet_box_loss_forward(deltas, anchors, matched, gt_boxes);
    r.classification += fl.loss / static_cast<double>(n);
    r.box_regression += bl / static_cast<double>(n);
    dcls_rows.push_back(nn::retinanet_focal_loss_backward(logits, matched, gt_labels, 0.25f, 2.0f, per_image).unsqueeze(0));
    dbox_rows.push_back(nn::retinanet_box_loss_backward(deltas, anchors, matched, gt_boxes, per_image).unsqueeze(0));
  }
  r.dcls = nn::split(nn::concat(dcls_rows, 0), level_sizes, 1);
  r.dbox = nn::split(nn::concat(dbox_rows, 0), level_sizes, 1);
  for (std::size_t l = 0; l < r.dcls.size(); ++l) {
    r.dcls[l] = nn::cast(r.dcls[l].contiguous(), out.cls_logits[l].dtype());
    r.dbox[l] = nn::cast(r.dbox[l].contiguous(), out.bbox_deltas[l].dtype());
  }
  return r;
}

// ---------------------------------------------------------------------------------------------

RetinaNetWorkload::RetinaNetWorkload() = default;
RetinaNetWorkload::~RetinaNetWorkload() = default;

WorkloadInfo RetinaNetWorkload::describe() {
  WorkloadInfo i;
  i.name = "retinanet";
  i.version = "1.0.0";
  i.benchmark = "ssd";
  i.description =
      "RetinaNet (ResNeXt50-32x4d FPN, focal loss) object detection on the MLPerf OpenImages subset; mini: a "
      "narrow RetinaNet from scratch on generated shapes";
  i.metric_name = "mAP";
  i.metric_target = 0.34;
  i.higher_is_better = true;
  i.devices = {"cpu", "cuda"};
  i.precisions = {"fp32", "tf32", "bf16", "fp16"};
  i.modes = {"ttt", "train", "infer"};
  i.options = option_specs();
  i.configs = {"mlperf.conf", "mini.conf"};
  i.default_config = "mini.conf";
  i.mlperf = mlperf_rules();
  return i;
}

std::string RetinaNetWorkload::check_support(const RunContext& ctx) {
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  if (!why.empty()) return "retinanet: " + why;
  if (parse_precision(ctx.precision) == Precision::fp8)
    return "retinanet: precision fp8 drives Linear layers only and RetinaNet is convolutions; run bf16";
  return {};
}

RetinaNetConfig RetinaNetWorkload::model_config(const Options& o) {
  RetinaNetConfig c;
  c.blocks = o.get_int_list("blocks");
  c.groups = o.get_int("groups");
  c.width_per_group = o.get_int("width-per-group");
  c.stem_channels = o.get_int("stem-channels");
  c.fpn_channels = o.get_int("fpn-channels");
  c.head_convs = o.get_int("head-convs");
  c.trainable_layers = o.get_int("trainable-layers");
  c.num_classes = o.get_int("num-classes");
  c.layout = nn::parse_image_layout(o.get_string("layout"));
  return c;
}

RunInfo RetinaNetWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  const std::string why = check_support(ctx);
  if (!why.empty()) BH_THROW(Unsupported, "{}", why);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  batch_size_ = ctx.batch_size > 0 ? ctx.batch_size : ctx.options.get_int("batch-size");
  build_model();
  build_anchors();
  build_data();
  build_optimizer();
  build_data_parallel();
  log_hyperparameters();
  model_->train(ctx.mode != "infer");
  return run_info();
}

void RetinaNetWorkload::build_model() {
  const Options& o = ctx_.options;
  model_ = std::make_unique<RetinaNet>(model_config(o));
  model_->initialize(ctx_.seed);
  if (o.get_bool("pretrained-backbone") && ctx_.mode == "ttt") {
    const std::string path = o.get_string("backbone-weights");
    BH_CHECK_AS(InvalidArgument, !path.empty(),
                "retinanet: time to train starts from the ImageNet-pretrained ResNeXt50-32x4d backbone, as MLPerf does: "
                "set retinanet.backbone-weights to a weights file converted from torchvision's resnext50_32x4d "
                "checkpoint (tools/peers/weights.py from-torch resnext50_32x4d-7cdf4587.pth resnext50.bhw; see "
                "docs/weights-format.md), or retinanet.pretrained-backbone = false for a run from scratch");
    model_->load_backbone(path);
  }
  if (const std::string w = o.get_string("init-weights"); !w.empty()) nn::load_weights(*model_, w);
  if (const std::string w = o.get_string("save-initial-weights"); !w.empty()) nn::save_weights(*model_, w);
  model_->to(ctx_.device);
  model_->set_precision(precision_.policy());
}

// The grids of P3..P7 follow from the image size through the stride-2 stages (conv1, max pool,
// layer2..4, then P6 and P7), each halving with rounding up; the anchors are the reference's
// (nn/detection.hpp), their sizes times anchor-scale.
void RetinaNetWorkload::build_anchors() {
  const Options& o = ctx_.options;
  const std::int64_t s = o.get_int("image-size");
  std::vector<std::pair<std::int64_t, std::int64_t>> grids;
  std::int64_t g = halve(halve(s));  // conv1, max pool
  for (int level = 0; level < 5; ++level) {  // layer2 = P3, layer3, layer4, P6, P7
    g = halve(g);
    grids.emplace_back(g, g);
  }
  nn::AnchorSpec spec = nn::retinanet_anchor_spec();
  for (auto& sizes : spec.sizes)
    for (double& v : sizes) v *= o.get_float("anchor-scale");
  anchors_ = nn::generate_anchors(spec, s, s, grids);
  level_anchors_.clear();
  std::int64_t at = 0;
  for (const auto& [h, w] : grids) {
    const std::int64_t n = h * w * static_cast<std::int64_t>(spec.aspect_ratios.size() * spec.sizes[0].size());
    level_anchors_.push_back(anchors_.slice(0, at, at + n).contiguous());
    at += n;
  }
  BH_CHECK_AS(InvalidArgument, at == anchors_.size(0), "retinanet: {} anchors do not split into the levels ({})",
              anchors_.size(0), at);
  anchors_ = anchors_.to(ctx_.device);
}

void RetinaNetWorkload::build_data() {
  data_ = build_data_sources(ctx_, batch_size_, model_->config().layout == nn::ImageLayout::nhwc);
  steps_per_epoch_ = data_.train->batches_per_epoch();
}

void RetinaNetWorkload::build_optimizer() {
  const Options& o = ctx_.options;
  const auto warmup = static_cast<std::int64_t>(std::llround(o.get_float("warmup-epochs") * steps_per_epoch_));
  schedule_ = std::make_unique<IterationWarmupSchedule>(static_cast<float>(o.get_float("lr")), o.get_float("warmup-factor"),
                                                        warmup);
  optim::AdamOptions ao;  // beta 0.9/0.999, eps 1e-8, weight decay 0: torch.optim.Adam's defaults
  optimizer_ = std::make_unique<optim::Adam>(model_->trainable_parameters(), ao);  // not the frozen conv1 and layer1
}

void RetinaNetWorkload::build_data_parallel() {
  if (ctx_.world_size <= 1) return;
  BH_CHECK_AS(InvalidArgument, ctx_.communicator != nullptr, "retinanet: world size {} but no communicator",
              ctx_.world_size);
  data_parallel_ = std::make_unique<DataParallel>(model_->trainable_parameters(), *ctx_.communicator);
}

void RetinaNetWorkload::log_hyperparameters() {
  const Options& o = ctx_.options;
  hyper_.clear();
  hyper_.emplace_back("global_batch_size", batch_size_ * ctx_.world_size);
  hyper_.emplace_back("local_batch_size", batch_size_);
  hyper_.emplace_back("gradient_accumulation_steps", std::int64_t{1});
  hyper_.emplace_back("opt_name", std::string("adam"));
  hyper_.emplace_back("opt_base_learning_rate", o.get_float("lr"));
  hyper_.emplace_back("opt_weight_decay", 0.0);
  hyper_.emplace_back("opt_learning_rate_warmup_epochs", o.get_float("warmup-epochs"));
  hyper_.emplace_back("opt_learning_rate_warmup_factor", o.get_float("warmup-factor"));
  hyper_.emplace_back("epoch_count", o.get_int("epochs"));
  hyper_.emplace_back("first_epoch_num", std::int64_t{0});
}

RunInfo RetinaNetWorkload::run_info() const {
  const Options& o = ctx_.options;
  RunInfo info;
  info.samples_per_epoch = data_.samples_per_epoch;
  info.eval_every_samples = 0;  // after every epoch
  info.global_batch_size = batch_size_ * ctx_.world_size;
  info.max_epochs = o.get_int("epochs");
  const std::int64_t s = o.get_int("image-size");
  const double macs = model_->forward_macs(s, s);
  info.infer_flops_per_sample = 2.0 * macs;
  // Note [FLOPs per sample] (docs/plugin-abi.md): 3 x forward, except the frozen backbone layers,
  // which run forward only.
  info.train_flops_per_sample = 3.0 * 2.0 * macs - 2.0 * 2.0 * model_->frozen_forward_macs(s, s);
  info.eval_samples = data_.eval_samples;
  info.metric_target = o.get_float("target");
  return info;
}

Tensor RetinaNetWorkload::as_model_input(const Tensor& images) const {
  BH_CHECK_AS(DataError, images.dim() == 4, "retinanet: expected a batch of images, got {}", shape_str(images.shape()));
  return images;  // the loader already produced the model's layout (data.cpp)
}

void RetinaNetWorkload::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  data_.train->start_epoch(epoch);
}

void RetinaNetWorkload::prepare_batch() {
  if (epoch_ < 0) begin_epoch(0);
  batch_ = data_.train->next();
  if (!batch_) {
    begin_epoch(epoch_ + 1);
    batch_ = data_.train->next();
  }
  BH_CHECK_AS(DataError, batch_.has_value(), "retinanet: the training data source is empty");
}

StepResult RetinaNetWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  if (!batch_) prepare_batch();
  const data::Batch batch = std::move(*batch_);
  batch_.reset();
  const HeadOutputs out = model_->forward(as_model_input(batch["image"]));
  const Tensor& boxes = data_.synthetic_boxes.defined() ? data_.synthetic_boxes : batch["boxes"];
  BatchLoss loss = retinanet_batch_loss(out, anchors_, boxes.to(ctx_.device), batch["labels"], batch["num_boxes"],
                                        precision_.loss_scale());
  model_->backward(loss.dcls, loss.dbox);
  if (data_parallel_) data_parallel_->finish();
  if (precision_.unscale_and_check(optimizer_->parameters())) optimizer_->step(*schedule_);
  optimizer_->zero_grad();
  StepResult r{batch.size(), loss.total()};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

// The reference's evaluate(): detections post-processed per image in the S x S frame, scaled
// back to the image's own size, and scored with COCO mAP against the split's annotations
// (boxes as the JSON has them, `area` and `iscrowd` included).
EvalResult RetinaNetWorkload::evaluate() {
  BH_CHECK_AS(InvalidArgument, data_.eval != nullptr,
              "retinanet: no evaluation set (synthetic data has none); use retinanet.data-dir for ttt");
  const auto math = precision_.policy().math_scope();
  const std::int64_t s = ctx_.options.get_int("image-size");
  model_->train(false);
  metrics::CocoEvaluator coco;
  const coco::CocoFile& gt = *data_.eval_coco;
  data_.eval->start_epoch(0);
  while (auto b = data_.eval->next()) {
    const HeadOutputs out = model_->forward(as_model_input((*b)["image"]));
    const Tensor ids = (*b)["image_id"].to(Device::cpu()).to(DType::i64);
    const Tensor sizes = (*b)["orig_size"].to(Device::cpu()).to(DType::i64);
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      const std::int64_t id = ids.data<std::int64_t>()[i];
      std::vector<Tensor> logits, deltas;
      for (std::size_t l = 0; l < out.cls_logits.size(); ++l) {
        logits.push_back(nn::cast(out.cls_logits[l].select(0, i), DType::f32).to(Device::cpu()).contiguous());
        deltas.push_back(nn::cast(out.bbox_deltas[l].select(0, i), DType::f32).to(Device::cpu()).contiguous());
      }
      const nn::Detections d = nn::retinanet_postprocess(logits, deltas, level_anchors_, s, s);
      const float sy = static_cast<float>(sizes.data<std::int64_t>()[2 * i]) / static_cast<float>(s);
      const float sx = static_cast<float>(sizes.data<std::int64_t>()[2 * i + 1]) / static_cast<float>(s);
      std::vector<metrics::CocoDetection> dets(static_cast<std::size_t>(d.scores.numel()));
      const float* bx = d.boxes.data<float>();
      for (std::size_t k = 0; k < dets.size(); ++k, bx += 4) {
        const float x1 = bx[0] * sx, y1 = bx[1] * sy, x2 = bx[2] * sx, y2 = bx[3] * sy;
        dets[k].category_id = d.labels.data<std::int64_t>()[k];
        dets[k].box = {x1, y1, x2 - x1, y2 - y1};
        dets[k].score = d.scores.data<float>()[k];
      }
      const auto pos = gt.image_position(id);
      BH_CHECK_AS(DataError, pos.has_value(), "{}: image id {} of the evaluation batch is not in the file", gt.source, id);
      std::vector<metrics::CocoGroundTruth> objects;
      for (std::size_t a : gt.annotations_of(*pos)) {
        const coco::CocoAnnotation& ann = gt.annotations[a];
        objects.push_back({ann.category_id, ann.bbox, static_cast<float>(ann.area), ann.iscrowd, {}});
      }
      coco.add_ground_truth(id, objects);
      coco.add_detections(id, dets);
    }
  }
  model_->train(true);
  const metrics::CocoResult r = coco.compute(ctx_.communicator);
  return {r.map(), data_.eval_samples};
}

StepResult RetinaNetWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  if (!infer_images_.defined()) {
    prepare_batch();
    infer_images_ = as_model_input((*batch_)["image"]);
    batch_.reset();
  }
  model_->train(false);
  const HeadOutputs out = model_->forward(infer_images_);
  return {out.cls_logits.front().size(0), std::numeric_limits<double>::quiet_NaN()};
}

void RetinaNetWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

Hyperparameters RetinaNetWorkload::hyperparameters() const { return hyper_; }

void RetinaNetWorkload::teardown() {
  batch_.reset();
  data_parallel_.reset();
  data_.train.reset();  // the loaders first: their datasets hold the annotations
  data_.eval.reset();
  data_ = DataSources{};
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::retinanet
