// The parallel loader (Note [Loader pipeline] and Note [Loader errors and shutdown] in
// pipeline.hpp).
#include "benchhost/data/pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <tbb/parallel_pipeline.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include "data/internal.hpp"

namespace benchhost::data {

namespace {

// A run of consecutive positions of the epoch's order travelling through the pipeline together
// (one pipeline token). Chunking amortises the per-token cost over cheap samples.
struct Chunk {
  std::vector<std::int64_t> indices;
  std::vector<Sample> samples;  // samples[i] for indices[i], i < samples.size()
  std::exception_ptr error;     // set: indices[samples.size()] failed
};

// Wrap a worker's exception so that it names the sample and its source, keeping where the
// original error was raised.
std::exception_ptr wrap_sample_error(std::exception_ptr cause, const Dataset& dataset,
                                     std::int64_t index, std::int64_t epoch) {
  std::string source;
  try {
    source = dataset.source(index);
  } catch (...) {
  }
  // Name the source unless the cause already does (readers put the path first).
  auto where = [&](const std::string& cause_text) {
    return source.empty() || cause_text.find(source) != std::string::npos
               ? fmt::format("sample {} (epoch {})", index, epoch)
               : fmt::format("sample {} (epoch {}) from {}", index, epoch, source);
  };
  try {
    std::rethrow_exception(cause);
  } catch (const Error& e) {
    return std::make_exception_ptr(DataError(fmt::format("{}: {}", where(e.message()), e.message()), e.file(), e.line()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(DataError(fmt::format("{}: {}", where(e.what()), e.what()), __FILE__, __LINE__));
  } catch (...) {
    return std::make_exception_ptr(DataError(fmt::format("{}: unknown exception", where("")), __FILE__, __LINE__));
  }
}

}  // namespace

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> dataset;
  Sampler sampler;
  LoaderOptions opt;
  tbb::task_arena arena;
  DeviceBackend* backend = nullptr;  // set when the device is not the CPU
  StreamHandle stream = nullptr;     // the side stream for host-to-device copies

  // The epoch in flight. `mu` guards everything below except `stop`.
  std::thread worker;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv_ready;  // a batch was queued, or the producer finished
  std::condition_variable cv_space;  // a batch was taken, or stop was requested
  std::deque<Batch> ready;
  bool finished = true;
  std::exception_ptr error;
  bool started = false;
  LoaderStats stats;

  Impl(std::shared_ptr<const Dataset> d, Sampler s, LoaderOptions o)
      : dataset(std::move(d)), sampler(std::move(s)), opt(std::move(o)),
        arena(std::min(opt.num_threads, tbb::info::default_concurrency())) {}

  // Note [Chunks and tokens]
  // Workers take chunks of up to 64 consecutive positions (fewer for small batches, so that every
  // thread gets work within one batch); the pipeline holds `tokens` chunks at once. With
  // max_samples_in_flight set, chunk * tokens stays within it.
  std::int64_t chunk_size() const {
    std::int64_t c = std::clamp<std::int64_t>(opt.batch_size / (2 * opt.num_threads), 1, 64);
    if (opt.max_samples_in_flight > 0) c = std::clamp<std::int64_t>(c, 1, std::max<std::int64_t>(1, opt.max_samples_in_flight / 2));
    return c;
  }
  std::int64_t tokens() const {
    return opt.max_samples_in_flight > 0 ? std::max<std::int64_t>(1, opt.max_samples_in_flight / chunk_size())
                                         : std::max<std::int64_t>(4 * opt.num_threads, 8);
  }

  // Collate, then copy to the device (CUDA: from pinned memory on the side stream, waiting for
  // the copy here, in the background, so the batch handed to next() is ready to use).
  Batch make_batch(std::vector<Sample>& samples, std::vector<std::int64_t>& indices,
                   std::int64_t epoch, std::int64_t position) {
    Batch b;
    b.epoch = epoch;
    b.position = position;
    b.indices = std::move(indices);
    indices.clear();
    if (backend == nullptr) {
      b.tensors = opt.collate ? opt.collate(samples) : collate(samples);
    } else {
      Allocator& pinned = backend->host_pinned_allocator();
      TensorDict host = opt.collate ? opt.collate(samples) : collate_into(samples, &pinned);
      for (const auto& [name, t] : host.fields()) {
        Tensor src = t.contiguous();
        Tensor dst = Tensor::empty(src.shape(), src.dtype(), opt.device);
        if (src.nbytes())
          backend->copy(dst.raw_data(), opt.device, src.raw_data(), Device::cpu(), src.nbytes(), stream);
        b.tensors.set(name, std::move(dst));
      }
      // The pinned buffers in `host` must outlive the copy: wait before they are released.
      backend->synchronize(opt.device.index, stream);
    }
    samples.clear();
    return b;
  }

  // Queue a batch for next(); false when stop was requested while waiting for space.
  bool push(Batch b) {
    std::unique_lock lk(mu);
    cv_space.wait(lk, [&] { return stop.load() || static_cast<std::int64_t>(ready.size()) < opt.prefetch_batches; });
    if (stop.load()) return false;
    ready.push_back(std::move(b));
    cv_ready.notify_one();
    return true;
  }

  void run_epoch(std::int64_t epoch, std::vector<std::int64_t> order, std::int64_t position) {
    std::exception_ptr failure;
    try {
      std::size_t next_in = 0;
      std::vector<Sample> pending;
      std::vector<std::int64_t> pending_indices;
      pending.reserve(static_cast<std::size_t>(opt.batch_size));
      std::int64_t consumed = position;
      auto fail = [&](std::exception_ptr e) {
        if (!failure) failure = std::move(e);
        stop.store(true);
      };
      const auto chunk = static_cast<std::size_t>(chunk_size());
      // Append one sample; emit the batch when full. False once the epoch must stop.
      auto accept = [&](Sample&& sample, std::int64_t index) -> bool {
        pending.push_back(std::move(sample));
        pending_indices.push_back(index);
        ++consumed;
        if (static_cast<std::int64_t>(pending.size()) < opt.batch_size) return true;
        try {
          return push(make_batch(pending, pending_indices, epoch, consumed));
        } catch (...) {
          fail(std::current_exception());
          return false;
        }
      };
      arena.execute([&] {
        tbb::parallel_pipeline(
            static_cast<std::size_t>(tokens()),
            tbb::make_filter<void, Chunk*>(tbb::filter_mode::serial_in_order,
                [&](tbb::flow_control& fc) -> Chunk* {
                  if (stop.load() || next_in >= order.size()) {
                    fc.stop();
                    return nullptr;
                  }
                  auto* c = new Chunk;
                  const std::size_t end = std::min(order.size(), next_in + chunk);
                  c->indices.assign(order.begin() + static_cast<std::ptrdiff_t>(next_in),
                                    order.begin() + static_cast<std::ptrdiff_t>(end));
                  next_in = end;
                  return c;
                }) &
            tbb::make_filter<Chunk*, Chunk*>(tbb::filter_mode::parallel,
                [&](Chunk* c) -> Chunk* {
                  c->samples.reserve(c->indices.size());
                  for (std::int64_t index : c->indices) {
                    if (stop.load()) break;  // the rest is never delivered
                    try {
                      c->samples.push_back(dataset->get(SampleContext{index, epoch, opt.seed}));
                    } catch (...) {
                      c->error = wrap_sample_error(std::current_exception(), *dataset, index, epoch);
                      break;
                    }
                  }
                  return c;
                }) &
            tbb::make_filter<Chunk*, void>(tbb::filter_mode::serial_in_order,
                [&](Chunk* raw) {
                  std::unique_ptr<Chunk> c(raw);
                  if (failure) return;
                  // Samples before a failure (or a stop) are still delivered in order; the first
                  // bad sample in order wins, so the reported error is deterministic.
                  for (std::size_t i = 0; i < c->samples.size(); ++i)
                    if (!accept(std::move(c->samples[i]), c->indices[i])) return;
                  if (c->error) fail(c->error);
                }));
      });
      if (!failure && !stop.load() && !pending.empty() && !opt.drop_last_batch)
        push(make_batch(pending, pending_indices, epoch, consumed));
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    std::lock_guard lk(mu);
    error = failure;
    finished = true;
    cv_ready.notify_all();
  }

  void stop_epoch() {
    stop.store(true);
    {
      std::lock_guard lk(mu);
      cv_space.notify_all();
    }
    if (worker.joinable()) worker.join();
    std::lock_guard lk(mu);
    ready.clear();
    error = nullptr;
    finished = true;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Sampler sampler, LoaderOptions options) {
  if (!dataset) BH_THROW(InvalidArgument, "DataLoader: dataset is null");
  if (options.batch_size < 1)
    BH_THROW(InvalidArgument, "DataLoader: batch_size {} must be at least 1", options.batch_size);
  if (options.num_threads < 1)
    BH_THROW(InvalidArgument, "DataLoader: num_threads {} must be at least 1", options.num_threads);
  if (options.prefetch_batches < 1)
    BH_THROW(InvalidArgument, "DataLoader: prefetch_batches {} must be at least 1", options.prefetch_batches);
  if (options.max_samples_in_flight < 0)
    BH_THROW(InvalidArgument, "DataLoader: max_samples_in_flight {} is negative", options.max_samples_in_flight);
  if (sampler.options().dataset_size != dataset->size())
    BH_THROW(InvalidArgument, "DataLoader: the sampler covers {} samples but the dataset has {}",
             sampler.options().dataset_size, dataset->size());
  if (sampler.grouped() && sampler.options().group_batch_size != options.batch_size)
    BH_THROW(InvalidArgument,
             "DataLoader: batch_size {} but the sampler groups batches of {} (Note [Grouped batches]); build both "
             "with the same size", options.batch_size, sampler.options().group_batch_size);
  impl_ = std::make_unique<Impl>(std::move(dataset), std::move(sampler), std::move(options));
  if (!impl_->opt.device.is_cpu()) {
    impl_->backend = &device_backend(impl_->opt.device.type);
    impl_->stream = impl_->backend->create_stream(impl_->opt.device.index);
  }
}

DataLoader::~DataLoader() {
  impl_->stop_epoch();
  if (impl_->backend && impl_->stream) impl_->backend->destroy_stream(impl_->opt.device.index, impl_->stream);
}

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t position) {
  impl_->stop_epoch();
  std::vector<std::int64_t> order = impl_->sampler.indices(epoch, position);  // validates position
  impl_->stop.store(false);
  {
    std::lock_guard lk(impl_->mu);
    impl_->finished = false;
    impl_->error = nullptr;
    impl_->started = true;
  }
  impl_->worker = std::thread([this, epoch, position, order = std::move(order)]() mutable {
    impl_->run_epoch(epoch, std::move(order), position);
  });
}

std::optional<Batch> DataLoader::next() {
  Impl& s = *impl_;
  if (!s.started) BH_THROW(InvalidArgument, "DataLoader::next() called before start_epoch()");
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<Batch> out;
  std::exception_ptr error;
  {
    std::unique_lock lk(s.mu);
    s.cv_ready.wait(lk, [&] { return !s.ready.empty() || s.finished; });
    if (!s.ready.empty()) {
      out = std::move(s.ready.front());
      s.ready.pop_front();
      s.cv_space.notify_one();
    } else {
      error = std::exchange(s.error, nullptr);
    }
  }
  s.stats.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out) {
    s.stats.batches += 1;
    s.stats.samples += out->size();
    return out;
  }
  if (s.worker.joinable()) s.worker.join();
  if (error) std::rethrow_exception(error);
  return std::nullopt;
}

std::int64_t DataLoader::batches_per_epoch() const {
  const auto n = impl_->sampler.num_samples();
  const auto b = impl_->opt.batch_size;
  return impl_->opt.drop_last_batch ? n / b : (n + b - 1) / b;
}

std::int64_t DataLoader::batch_size() const { return impl_->opt.batch_size; }
LoaderStats DataLoader::stats() const { return impl_->stats; }
void DataLoader::cancel() { impl_->stop_epoch(); }
const Sampler& DataLoader::sampler() const { return impl_->sampler; }
const LoaderOptions& DataLoader::options() const { return impl_->opt; }

// Note [Training and evaluation loaders] (pipeline.hpp).
namespace {

std::unique_ptr<DataLoader> run_loader(std::shared_ptr<const Dataset> dataset, std::int64_t batch_size,
                                       const RunLoaderOptions& options, bool training) {
  if (!dataset) BH_THROW(InvalidArgument, "{}: dataset is null", training ? "training_loader" : "evaluation_loader");
  SamplerOptions so;
  so.dataset_size = dataset->size();
  so.rank = options.rank;
  so.world_size = options.world_size;
  so.shuffle = training;
  so.seed = options.seed;
  so.tail = training ? TailPolicy::drop : TailPolicy::uneven;
  if (training && !options.group_ids.empty()) {
    so.group_ids = options.group_ids;
    so.group_batch_size = batch_size;
  }
  LoaderOptions lo;
  lo.batch_size = batch_size;
  lo.num_threads = options.num_threads;
  lo.drop_last_batch = training;
  lo.seed = options.seed;
  lo.device = options.device;
  lo.collate = options.collate;
  return std::make_unique<DataLoader>(std::move(dataset), Sampler(std::move(so)), std::move(lo));
}

}  // namespace

std::unique_ptr<DataLoader> training_loader(std::shared_ptr<const Dataset> dataset, std::int64_t batch_size,
                                            const RunLoaderOptions& options) {
  return run_loader(std::move(dataset), batch_size, options, true);
}

std::unique_ptr<DataLoader> evaluation_loader(std::shared_ptr<const Dataset> dataset, std::int64_t batch_size,
                                              const RunLoaderOptions& options) {
  return run_loader(std::move(dataset), batch_size, options, false);
}

}  // namespace benchhost::data
