//===- threads.h - the CPU step's worker threads ------------------*- C++ -*-===//
//
// One pool of worker threads per step library, sized by tcc_step_set_threads
// (tcc-run --threads; 1 until called), that the kernels and the generated
// step's fused loops split their work across with parallel_for.
//
// Deterministic: parallel_for cuts [0, n) into chunks that depend only on n,
// the grain and the thread count, and every element is computed by the same
// code whichever thread runs its chunk. The kernels split only work whose
// elements do not share an accumulation (rows, heads, elements; the GEMMs by
// rows of the product), so a step's results do not depend on the thread
// count at all; the reductions across elements stay on one thread.
//
// A parallel_for inside a chunk (a kernel called from a parallel loop) runs
// on the calling thread. Between jobs the workers poll for about 20
// microseconds, yielding the core between polls (the next kernel usually
// follows sooner), then sleep on a condition variable.
//
//===----------------------------------------------------------------------===//
#ifndef TCC_RUNTIME_CPU_THREADS_H
#define TCC_RUNTIME_CPU_THREADS_H

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace tcc::cpu {

class ThreadPool {
public:
  /// The step library's one pool.
  static ThreadPool &get() {
    static ThreadPool pool;
    return pool;
  }

  ~ThreadPool() { resize(1); }

  int threads() const { return threads_; }

  /// Keeps `n` threads in all (the caller and n - 1 workers).
  void resize(int n) {
    n = std::max(1, n);
    if (n == threads_)
      return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (std::thread &t : workers_)
      t.join();
    workers_.clear();
    stop_ = false;
    threads_ = n;
    // A worker starts from the generation of now: a job posted before the
    // thread runs is still new to it.
    const uint64_t now = generation_.load();
    for (int i = 1; i < n; ++i)
      workers_.emplace_back([this, now] { work(now); });
  }

  /// Whether the calling thread is running a chunk (a nested parallel_for
  /// then runs serially).
  static bool &inside() {
    thread_local bool flag = false;
    return flag;
  }

  /// Runs task(t) for t in [0, tasks) on the pool, the caller included;
  /// returns when all are done. A worker that is slow to wake (the cores
  /// are busy with another process) is not waited for: whoever is running
  /// takes the tasks. Each claim names its job's generation, so a worker
  /// that wakes late never takes a task of a later job.
  template <class F> void run(int64_t tasks, F &task) {
    if (tasks <= 0)
      return;
    if (tasks == 1 || threads_ == 1 || inside() || tasks >= (int64_t(1) << 31)) {
      for (int64_t t = 0; t < tasks; ++t)
        task(t);
      return;
    }
    const Job job{&task, [](void *f, int64_t t) { (*static_cast<F *>(f))(t); }, tasks};
    uint32_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gen = static_cast<uint32_t>(generation_.load() + 1);
      job_ = job;
      finished_.store(0);
      claim_.store(uint64_t(gen) << 32);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    drain(job, gen);
    if (!spin([&] { return finished_.load(std::memory_order_acquire) == tasks; })) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return finished_.load() == tasks; });
    }
  }

private:
  struct Job {
    void *task = nullptr;
    void (*call)(void *, int64_t) = nullptr;
    int64_t tasks = 0;
  };

  ThreadPool() = default;

  /// Polls `ready` for about 20 microseconds, yielding the core between
  /// polls (another process, or another step's threads, may need it more);
  /// whether it became true.
  template <class P> static bool spin(P &&ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    for (int i = 0;; ++i) {
      if (ready())
        return true;
      if ((i & 7) == 7 && std::chrono::steady_clock::now() > until)
        return false;
      std::this_thread::yield();
    }
  }

  /// Claims and runs tasks of job `gen` until none is left (or a later job
  /// has replaced it).
  void drain(const Job &job, uint32_t gen) {
    const bool was = inside();
    inside() = true;
    for (;;) {
      uint64_t c = claim_.load(std::memory_order_acquire);
      if (static_cast<uint32_t>(c >> 32) != gen || static_cast<int64_t>(c & 0xffffffffu) >= job.tasks)
        break;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel))
        continue;
      job.call(job.task, static_cast<int64_t>(c & 0xffffffffu));
      if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.tasks) {
        std::lock_guard<std::mutex> lock(mu_);
        done_.notify_all();
      }
    }
    inside() = was;
  }

  void work(uint64_t seen) {
    for (;;) {
      // The next job usually follows within microseconds: poll, then sleep.
      if (!spin([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_.load() != seen; });
      }
      Job job;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_)
          return;
        seen = generation_.load();
        job = job_;
      }
      drain(job, static_cast<uint32_t>(seen));
    }
  }

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};
  Job job_;
  /// The current job's generation (high 32 bits) and next task (low 32).
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> finished_{0};
};

/// Calls body(lo, hi) on consecutive chunks that cover [0, n), at most one
/// per thread and none smaller than `grain` (except the last): serially when
/// n < 2 * grain or the pool has one thread. The chunks depend only on n,
/// grain and the thread count.
template <class F> inline void parallel_for(int64_t n, int64_t grain, F &&body) {
  ThreadPool &pool = ThreadPool::get();
  const int64_t threads = pool.threads();
  const int64_t chunks =
      (threads == 1 || ThreadPool::inside()) ? 1 : std::min(threads, n / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    if (n > 0)
      body(int64_t(0), n);
    return;
  }
  auto task = [&](int64_t t) { body(n * t / chunks, n * (t + 1) / chunks); };
  pool.run(chunks, task);
}

} // namespace tcc::cpu

#endif // TCC_RUNTIME_CPU_THREADS_H
