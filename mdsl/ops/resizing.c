/* Resize over sizes known only at run time (symbolic dims): the C form mdsl.codegen
 * calls where the static Resize kernels would table their taps from static sizes. It
 * follows mdsl.ops.resizing step by step, with the taps computed when it runs: one axis
 * at a time in the order the op lists them, each output coordinate mapped back to a
 * fractional input coordinate, nearest copying elements (any type, by bytes), linear and
 * cubic summing taps in double (float32/float64 data) as the reference does.
 *
 * attrs: mode (0 nearest, 1 linear, 2 cubic), coordinate transformation mode (index in
 * COORDINATE_MODES), nearest mode (index in NEAREST_MODES), cubic_coeff_a,
 * exclude_outside, the number of resized axes, then per resized axis its index and its
 * scale (0: output length / input length, as for `sizes`). Output lengths come from the
 * output's shape.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { RESIZE_NEAREST, RESIZE_LINEAR, RESIZE_CUBIC };
enum {
    RESIZE_HALF_PIXEL,
    RESIZE_HALF_PIXEL_SYMMETRIC,
    RESIZE_PYTORCH_HALF_PIXEL,
    RESIZE_ALIGN_CORNERS,
    RESIZE_ASYMMETRIC
};
#define RESIZE_MAX_RANK 32

static double resize_source(int mode, int64_t in_len, int64_t out_len, double scale,
                            int64_t i) {
    const double y = (double)i;
    if (mode == RESIZE_ASYMMETRIC) return y / scale;
    if (mode == RESIZE_ALIGN_CORNERS)
        return out_len == 1 ? 0.0 : y * (double)(in_len - 1) / (double)(out_len - 1);
    if (mode == RESIZE_PYTORCH_HALF_PIXEL && out_len == 1) return 0.0;
    double x = (y + 0.5) / scale - 0.5;
    if (mode == RESIZE_HALF_PIXEL_SYMMETRIC) {
        const double adjustment = (double)out_len / (scale * (double)in_len);
        x += (double)in_len / 2 * (1 - adjustment);
    }
    return x;
}

static int64_t resize_nearest(double x, int nearest_mode) {
    switch (nearest_mode) {
    case 0: return (int64_t)ceil(x - 0.5);  /* round_prefer_floor */
    case 1: return (int64_t)floor(x + 0.5); /* round_prefer_ceil */
    case 2: return (int64_t)floor(x);
    default: return (int64_t)ceil(x);
    }
}

static double resize_near(double d, double a) { return ((a + 2) * d - (a + 3)) * d * d + 1; }
static double resize_far(double d, double a) {
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
}

/* Taps of output index i: n of them, into idx[] (clipped) and w[]. */
static int resize_taps(const double *attrs, int64_t in_len, int64_t out_len, double scale,
                       int64_t i, int64_t *idx, double *w) {
    const int mode = (int)attrs[0];
    const double x = resize_source((int)attrs[1], in_len, out_len, scale, i);
    int n;
    if (mode == RESIZE_NEAREST) {
        n = 1;
        idx[0] = resize_nearest(x, (int)attrs[2]);
        w[0] = 1.0;
    } else {
        const double base = floor(x), t = x - base, a = attrs[3];
        if (mode == RESIZE_LINEAR) {
            n = 2;
            w[0] = 1 - t;
            w[1] = t;
        } else {
            n = 4;
            w[0] = resize_far(1 + t, a);
            w[1] = resize_near(t, a);
            w[2] = resize_near(1 - t, a);
            w[3] = resize_far(2 - t, a);
        }
        for (int k = 0; k < n; k++) idx[k] = (int64_t)base + k - (mode == RESIZE_CUBIC);
    }
    if (attrs[4] != 0.0) { /* exclude_outside: taps outside get 0, the rest renormalized */
        double sum = 0.0;
        for (int k = 0; k < n; k++) {
            if (idx[k] < 0 || idx[k] >= in_len) w[k] = 0.0;
            sum += w[k];
        }
        for (int k = 0; k < n; k++) w[k] = w[k] / sum;
    }
    for (int k = 0; k < n; k++) idx[k] = idx[k] < 0 ? 0 : idx[k] >= in_len ? in_len - 1 : idx[k];
    return n;
}

static int64_t resize_bytes(int32_t dtype) {
    switch (dtype) {
    case MDSL_DTYPE_INT16: case MDSL_DTYPE_UINT16: case MDSL_DTYPE_FLOAT16:
    case MDSL_DTYPE_BFLOAT16: return 2;
    case MDSL_DTYPE_INT32: case MDSL_DTYPE_UINT32: case MDSL_DTYPE_FLOAT32: return 4;
    case MDSL_DTYPE_INT64: case MDSL_DTYPE_UINT64: case MDSL_DTYPE_FLOAT64: return 8;
    default: return 1;
    }
}

/* One axis: src (outer, in_len, inner) -> dst (outer, out_len, inner). Nearest copies
 * `bytes`-sized elements; interpolation sums doubles. */
static int resize_axis(const double *attrs, const char *src, char *dst, int64_t outer,
                       int64_t in_len, int64_t out_len, int64_t inner, double scale,
                       int64_t bytes) {
    if (in_len == 0) return out_len * outer * inner == 0 ? 0 : 1;
    int64_t idx[4];
    double w[4];
    for (int64_t j = 0; j < out_len; j++) {
        const int n = resize_taps(attrs, in_len, out_len, scale, j, idx, w);
        for (int64_t o = 0; o < outer; o++) {
            if (attrs[0] == RESIZE_NEAREST) {
                memcpy(dst + ((o * out_len + j) * inner) * bytes,
                       src + ((o * in_len + idx[0]) * inner) * bytes, (size_t)(inner * bytes));
                continue;
            }
            double *out = (double *)dst + (o * out_len + j) * inner;
            for (int64_t i = 0; i < inner; i++) {
                double total = 0.0;
                for (int k = 0; k < n; k++)
                    total = total + ((const double *)src)[(o * in_len + idx[k]) * inner + i] * w[k];
                out[i] = total;
            }
        }
    }
    return 0;
}

int resize_symbolic(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                    int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1 || n_attrs < 6) return 2;
    const mdsl_tensor *x = &inputs[0];
    const int rank = x->ndim, count = (int)attrs[5];
    const int nearest = attrs[0] == RESIZE_NEAREST;
    if (rank > RESIZE_MAX_RANK || n_attrs != 6 + 2 * count) return 2;
    if (!nearest && x->dtype != MDSL_DTYPE_FLOAT32 && x->dtype != MDSL_DTYPE_FLOAT64) return 2;
    const int64_t bytes = nearest ? resize_bytes(x->dtype) : (int64_t)sizeof(double);
    int64_t shape[RESIZE_MAX_RANK], largest = x->size;
    for (int d = 0; d < rank; d++) shape[d] = x->shape[d];
    for (int c = 0; c < count; c++) { /* the largest intermediate, for the work buffers */
        shape[(int)attrs[6 + 2 * c]] = outputs[0].shape[(int)attrs[6 + 2 * c]];
        int64_t size = 1;
        for (int d = 0; d < rank; d++) size *= shape[d];
        if (size > largest) largest = size;
    }
    char *work = malloc((size_t)(2 * (largest > 0 ? largest : 1) * bytes));
    if (!work) return 1;
    char *cur = work, *next = work + largest * bytes;
    for (int d = 0; d < rank; d++) shape[d] = x->shape[d];
    if (nearest) {
        memcpy(cur, x->data, (size_t)(x->size * bytes));
    } else {
        for (int64_t i = 0; i < x->size; i++)
            ((double *)cur)[i] = x->dtype == MDSL_DTYPE_FLOAT32 ? ((const float *)x->data)[i]
                                                                : ((const double *)x->data)[i];
    }
    int status = 0;
    for (int c = 0; c < count && !status; c++) {
        const int a = (int)attrs[6 + 2 * c];
        const int64_t in_len = shape[a], out_len = outputs[0].shape[a];
        const double scale = attrs[7 + 2 * c] > 0 ? attrs[7 + 2 * c]
                                                  : (double)out_len / (double)in_len;
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < a; d++) outer *= shape[d];
        for (int d = a + 1; d < rank; d++) inner *= shape[d];
        status = resize_axis(attrs, cur, next, outer, in_len, out_len, inner, scale, bytes);
        shape[a] = out_len;
        char *t = cur;
        cur = next;
        next = t;
    }
    if (!status) {
        const int64_t size = outputs[0].size;
        if (nearest)
            memcpy(outputs[0].data, cur, (size_t)(size * bytes));
        else if (x->dtype == MDSL_DTYPE_FLOAT32)
            for (int64_t i = 0; i < size; i++)
                ((float *)outputs[0].data)[i] = (float)((double *)cur)[i];
        else
            memcpy(outputs[0].data, cur, (size_t)(size * bytes));
    }
    free(work);
    return status;
}
