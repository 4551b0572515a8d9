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

// The widest vector instruction set this build was compiled for (the compiler's predefined
// macros), for the benchmarks' and describe()'s report
inline const char *isa_name() {
#if defined(__AVX512F__)
    return "avx512f";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2+fma";
#elif defined(__AVX2__)
    return "avx2";
#elif defined(__AVX__)
    return "avx";
#elif defined(__ARM_NEON) || defined(__ARM_NEON__)
    return "neon";
#elif defined(__SSE2__)
    return "sse2";
#else
    return "scalar";
#endif
}

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
