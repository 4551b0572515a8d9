// Threads for the native kernels: f(thread, first unit, end unit) over contiguous blocks of work
// units (a deterministic partition). With OpenMP the threads are PyTorch's own (the loader uses an
// OpenMP build only when it links the runtime torch already loaded), so they are warm and do not
// compete with torch's workers still spinning after the previous op; otherwise std::thread.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace synthlab {

inline int clamp_threads(int nthreads, long total) { return std::max(1, (int)std::min<long>(nthreads, total)); }

template <class F>
void parallel_units(long total, int nthreads, F f) {
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        f(t, total * t / n, total * (t + 1) / n);
    }
#else
    std::vector<std::thread> pool;
    for (int t = 1; t < nthreads; ++t) pool.emplace_back(f, t, total * t / nthreads, total * (t + 1) / nthreads);
    f(0, 0L, total / nthreads);
    for (auto &th : pool) th.join();
#endif
}

}  // namespace synthlab
