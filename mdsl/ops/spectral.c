/* DFT as a compiled loop: the "c" binding of mdsl.ops.spectral, called through the
 * custom C op convention (attrs: axis, inverse, onesided, dft_length).
 *
 * Each transform is the direct sum over its n points in double (O(n^2); the signals
 * models transform are short frames), twiddles taken from (k * t) mod n so long
 * transforms keep their accuracy. The layout is (outer, axis, inner, 1 or 2).
 */
#include <math.h>

static double dft_load(const mdsl_tensor *t, int64_t i) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: return ((const float *)t->data)[i];
    case MDSL_DTYPE_FLOAT64: return ((const double *)t->data)[i];
    case MDSL_DTYPE_FLOAT16: return (double)((const _Float16 *)t->data)[i];
    default: return mdsl_bf16_load(((const uint16_t *)t->data)[i]);
    }
}

static void dft_store(mdsl_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: ((float *)t->data)[i] = (float)v; break;
    case MDSL_DTYPE_FLOAT64: ((double *)t->data)[i] = v; break;
    case MDSL_DTYPE_FLOAT16: ((_Float16 *)t->data)[i] = (_Float16)v; break;
    default: ((uint16_t *)t->data)[i] = mdsl_bf16_store((float)v);
    }
}

int spectral_dft(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                 int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1 || n_attrs != 4) return 2;
    const mdsl_tensor *x = &inputs[0];
    mdsl_tensor *y = &outputs[0];
    const int rank = x->ndim;
    int axis = (int)attrs[0];
    if (axis < 0) axis += rank;
    const int inverse = (int)attrs[1], onesided = (int)attrs[2];
    const int64_t m = x->shape[axis], out_size = y->shape[axis];
    const int64_t in_last = x->shape[rank - 1], out_last = y->shape[rank - 1];
    const int real_out = inverse && onesided; /* the inverse real transform */
    int64_t n = (int64_t)attrs[3];
    if (n == 0) n = real_out ? 2 * (m - 1) : m;
    if (n <= 0) return 2;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = axis + 1; d < rank - 1; d++) inner *= x->shape[d];
    const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / (double)n : 1.0;
    const double step = 2.0 * M_PI / (double)n;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const int64_t in_base = o * m * inner + i, out_base = o * out_size * inner + i;
            for (int64_t k = 0; k < out_size; k++) {
                double re = 0, im = 0;
                const int64_t terms = real_out ? n : (m < n ? m : n);
                for (int64_t t = 0; t < terms; t++) {
                    /* real_out: frequency t of the full spectrum, the mirror of n - t */
                    const int64_t f = real_out && t > n / 2 ? n - t : t;
                    double a = 0, b = 0;
                    if (f < m) {
                        a = dft_load(x, (in_base + f * inner) * in_last);
                        b = in_last == 2 ? dft_load(x, (in_base + f * inner) * in_last + 1) : 0;
                    }
                    if (real_out && f != t) b = -b;
                    const double angle = sign * step * (double)((k * t) % n);
                    const double c = cos(angle), s = sin(angle);
                    re += a * c - b * s;
                    im += a * s + b * c;
                }
                dft_store(y, (out_base + k * inner) * out_last, re * scale);
                if (out_last == 2) dft_store(y, (out_base + k * inner) * out_last + 1, im * scale);
            }
        }
    }
    return 0;
}
