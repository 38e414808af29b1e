// Helpers of the GPU test programs: normal random vectors, the relative error every check reports, and (in programs
// nvcc compiles) copies to and from the device.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#endif

namespace gputest {

inline std::vector<float> randn(std::mt19937& rng, size_t n, float sd = 1.0f) {
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// max |got − want| / max |want|, infinite on NaN.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs((double)got[i] - want[i]);
        num = std::isnan(d) ? INFINITY : std::max(num, d);
        den = std::max(den, (double)std::fabs(want[i]));
    }
    return num / std::max(den, 1e-30);
}

#ifdef __CUDACC__
template <class T>
T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <class T>
std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
#endif

}  // namespace gputest
