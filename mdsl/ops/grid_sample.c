/* GridSample as a compiled loop: the "c" binding of mdsl.ops.grid_sample, called through
 * the custom C op convention (attrs: mode as its choice index 0 linear, 1 nearest,
 * 2 cubic, 3 bilinear, 4 bicubic; padding_mode 0 zeros, 1 border, 2 reflection;
 * align_corners 0/1).
 *
 * The steps are the numpy reference's, per output point: each axis's coordinate becomes
 * up to 4 taps (index, weight); the point sums weight products times pixels over every
 * combination of taps. Values are read and summed in double, whatever the float type.
 */
#include <math.h>

enum { GS_LINEAR, GS_NEAREST, GS_CUBIC, GS_BILINEAR, GS_BICUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };
#define GS_MAX_RANK 3
#define GS_MAX_TAPS 4

static double gs_load(const mdsl_tensor *t, int64_t i) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: return ((const float *)t->data)[i];
    case MDSL_DTYPE_FLOAT64: return ((const double *)t->data)[i];
    case MDSL_DTYPE_FLOAT16: return (double)((const _Float16 *)t->data)[i];
    default: return mdsl_bf16_load(((const uint16_t *)t->data)[i]);
    }
}

static void gs_store(mdsl_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: ((float *)t->data)[i] = (float)v; break;
    case MDSL_DTYPE_FLOAT64: ((double *)t->data)[i] = v; break;
    case MDSL_DTYPE_FLOAT16: ((_Float16 *)t->data)[i] = (_Float16)v; break;
    default: ((uint16_t *)t->data)[i] = mdsl_bf16_store((float)v);
    }
}

/* x mirrored at low and high until it lies between them */
static double gs_reflect(double x, double low, double high) {
    const double span = high - low;
    if (span <= 0) return low;
    if (x < low) {
        const double d = low - x, turns = floor(d / span), rest = d - turns * span;
        return fmod(turns, 2.0) == 0 ? low + rest : high - rest;
    }
    if (x > high) {
        const double d = x - high, turns = floor(d / span), rest = d - turns * span;
        return fmod(turns, 2.0) == 0 ? high - rest : low + rest;
    }
    return x;
}

static void gs_cubic(double t, double *w) {
    const double a = -0.75;
    const double d0 = t + 1, d3 = 2 - t, d1 = t, d2 = 1 - t;
    w[0] = ((a * d0 - 5 * a) * d0 + 8 * a) * d0 - 4 * a;
    w[1] = ((a + 2) * d1 - (a + 3)) * d1 * d1 + 1;
    w[2] = ((a + 2) * d2 - (a + 3)) * d2 * d2 + 1;
    w[3] = ((a * d3 - 5 * a) * d3 + 8 * a) * d3 - 4 * a;
}

/* The taps of one axis of `size` pixels for the normalized coordinate g; their count. */
static int gs_axis_taps(double g, int64_t size, int mode, int padding, int align,
                        int64_t *index, double *weight) {
    const double low = align ? 0.0 : -0.5, high = align ? size - 1.0 : size - 0.5;
    double x = align ? (g + 1) / 2 * (double)(size - 1) : ((g + 1) * (double)size - 1) / 2;
    if (mode == GS_NEAREST) x = nearbyint(x); /* half to even, before moving it inside */
    if (x < low || x > high) {
        if (padding == GS_BORDER && mode != GS_CUBIC) x = x < 0 ? 0 : (x > size - 1 ? (double)(size - 1) : x);
        else if (padding == GS_REFLECTION) x = gs_reflect(x, low, high);
    }
    int n;
    double base;
    if (mode == GS_NEAREST) {
        n = 1, base = trunc(x), weight[0] = 1;
    } else if (mode == GS_CUBIC) {
        n = 4, base = floor(x) - 1;
        gs_cubic(x - floor(x), weight);
    } else {
        n = 2, base = floor(x), weight[0] = 1 - (x - base), weight[1] = x - base;
    }
    for (int k = 0; k < n; k++) {
        double i = base + k;
        if (padding == GS_ZEROS && (i < 0 || i >= (double)size)) weight[k] = 0;
        else if (padding == GS_BORDER) i = i < 0 ? 0 : (i > size - 1 ? (double)(size - 1) : i);
        else if (padding == GS_REFLECTION) i = trunc(gs_reflect(i, low, high));
        i = i < 0 ? 0 : (i > size - 1 ? (double)(size - 1) : i);
        index[k] = (int64_t)i;
    }
    return n;
}

int grid_sample_nd(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                   int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs != 3) return 2;
    const mdsl_tensor *x = &inputs[0], *grid = &inputs[1];
    mdsl_tensor *y = &outputs[0];
    int mode = (int)attrs[0];
    mode = mode == GS_BILINEAR ? GS_LINEAR : (mode == GS_BICUBIC ? GS_CUBIC : mode);
    const int padding = (int)attrs[1], align = (int)attrs[2];
    const int rank = x->ndim - 2;
    if (rank < 1 || rank > GS_MAX_RANK) return 2;
    const int64_t batch = x->shape[0], channels = x->shape[1];
    int64_t image = 1, points = 1, strides[GS_MAX_RANK];
    for (int a = rank - 1; a >= 0; a--) strides[a] = image, image *= x->shape[2 + a];
    for (int a = 1; a < grid->ndim - 1; a++) points *= grid->shape[a];
    for (int64_t n = 0; n < batch; n++) {
        for (int64_t p = 0; p < points; p++) {
            int64_t index[GS_MAX_RANK][GS_MAX_TAPS];
            double weight[GS_MAX_RANK][GS_MAX_TAPS];
            int taps[GS_MAX_RANK], combinations = 1;
            for (int a = 0; a < rank; a++) { /* grid values run in reverse axis order */
                const double g = gs_load(grid, (n * points + p) * rank + (rank - 1 - a));
                taps[a] = gs_axis_taps(g, x->shape[2 + a], mode, padding, align, index[a],
                                       weight[a]);
                combinations *= taps[a];
            }
            for (int64_t c = 0; c < channels; c++) {
                const int64_t plane = (n * channels + c) * image;
                double sum = 0;
                for (int k = 0; k < combinations; k++) {
                    double w = 1;
                    int64_t at = plane;
                    for (int a = rank - 1, rest = k; a >= 0; a--) {
                        const int t = rest % taps[a];
                        rest /= taps[a];
                        w *= weight[a][t], at += index[a][t] * strides[a];
                    }
                    if (w != 0) sum += w * gs_load(x, at);
                }
                gs_store(y, (n * channels + c) * points + p, sum);
            }
        }
    }
    return 0;
}
