/*
 * Hand-written fused C loops: the practical speed limit for the pointwise and row
 * workloads, and a STREAM triad for the memory-bandwidth limit.
 *
 * Built by benchmarks/hand_c.py with gcc -O3 -march=native -fopenmp -fno-math-errno
 * (no -ffast-math). exp and erf are inline polynomial approximations that the compiler
 * vectorizes; the `_libm` variant calls libm's erff/expf instead, declared `omp declare
 * simd` so glibc's vector math library (libmvec) supplies the vector versions.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float expf(float);

void hc_set_threads(int n) { omp_set_num_threads(n); }

/* An empty call: the cost of crossing from Python into C through cffi. */
void hc_noop(void) {}

/* exp(x) for float32: Cody-Waite range reduction and a degree-6 polynomial (Cephes),
 * about 1 ulp; inputs are clamped to the normal range. */
static inline float hc_exp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = n * -0.693359375f + x;
    r = n * 2.12194440e-4f + r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* erf(x) for float32: the odd/even rational approximation on [-4, 4] used by Eigen and
 * XLA (erf is +-1 in float32 outside it). */
static inline float hc_erf(float x) {
    x = x < -4.0f ? -4.0f : x;
    x = x > 4.0f ? 4.0f : x;
    const float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x * p / q;
}

/* W1: y = gelu(x * a + b) * sigmoid(x) + x, exact (erf) GELU. */
void hc_w1(const float *restrict x, float *restrict y, int64_t n, float a, float b) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i] * a + b;
        const float gelu = 0.5f * v * (1.0f + hc_erf(v * 0.70710678118654752f));
        const float sig = 1.0f / (1.0f + hc_exp(-x[i]));
        y[i] = gelu * sig + x[i];
    }
}

/* W1 with libm's erff/expf (vectorized through libmvec). */
void hc_w1_libm(const float *restrict x, float *restrict y, int64_t n, float a, float b) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i] * a + b;
        const float gelu = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        const float sig = 1.0f / (1.0f + expf(-x[i]));
        y[i] = gelu * sig + x[i];
    }
}

/* W2: layer norm over the last axis (rows x cols), two-pass mean and variance. */
void hc_layer_norm(const float *restrict x, const float *restrict gamma,
                   const float *restrict beta, float *restrict y, int64_t rows, int64_t cols,
                   float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; j++) sum += xr[j];
        const float mean = sum / (float)cols;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t j = 0; j < cols; j++) sq += (xr[j] - mean) * (xr[j] - mean);
        const float rstd = 1.0f / sqrtf(sq / (float)cols + eps);
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
    }
}

/* W3: softmax over the last axis (rows x cols). */
void hc_softmax(const float *restrict x, float *restrict y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int64_t j = 0; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; j++) {
            const float e = hc_exp(xr[j] - m);
            yr[j] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

/* STREAM triad: a = b + s * c. */
void hc_triad(float *restrict a, const float *restrict b, const float *restrict c, int64_t n,
              float s) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
