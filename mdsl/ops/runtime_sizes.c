/* DynamicCrop as a compiled loop: the "c" binding of mdsl.ops.runtime_sizes, called
 * through the custom C op convention. crops (int64 or int32) holds the begins of every
 * axis, then the ends; output dim a is x's dim a minus both crops, reported in the
 * output's shape (data-dependent: the generated code checks it against x's dim and binds
 * it). A crop below 0 or beyond its dim reports size -1 for that axis and copies nothing:
 * the generated check then fails the run naming the node. Rows are copied by bytes, so
 * every element type works.
 */
#include <string.h>

#define CROP_MAX_RANK 32

static int64_t crop_value(const mdsl_tensor *crops, int64_t at) {
    return crops->dtype == MDSL_DTYPE_INT64 ? ((const int64_t *)crops->data)[at]
                                            : ((const int32_t *)crops->data)[at];
}

int runtime_sizes_dynamic_crop(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                               int n_outputs, const double *attrs, int n_attrs) {
    (void)attrs;
    (void)n_attrs;
    if (n_inputs != 2 || n_outputs != 1) return 2;
    const mdsl_tensor *x = &inputs[0];
    const int rank = x->ndim;
    if (rank > CROP_MAX_RANK || inputs[1].size != 2 * (int64_t)rank) return 1;
    int64_t *size = (int64_t *)outputs[0].shape;
    int64_t begin[CROP_MAX_RANK], stride[CROP_MAX_RANK + 1];
    int valid = 1;
    for (int a = 0; a < rank; a++) {
        const int64_t b = crop_value(&inputs[1], a), e = crop_value(&inputs[1], rank + a);
        const int ok = b >= 0 && e >= 0 && b + e <= x->shape[a];
        size[a] = ok ? x->shape[a] - b - e : -1;
        begin[a] = b;
        valid &= ok;
    }
    if (!valid || rank == 0) {
        if (valid) memcpy(outputs[0].data, x->data, (size_t)mdsl_dtype_bytes(x->dtype));
        return 0;
    }
    const int64_t bytes = mdsl_dtype_bytes(x->dtype);
    stride[rank] = 1;
    for (int a = rank - 1; a >= 0; a--) stride[a] = stride[a + 1] * x->shape[a];
    int64_t rows = 1;
    for (int a = 0; a < rank - 1; a++) rows *= size[a];
    const int64_t row = size[rank - 1] * bytes;
    char *out = (char *)outputs[0].data;
    const char *in = (const char *)x->data;
    for (int64_t r = 0; r < rows; r++) { /* output row r: its index over the leading axes */
        int64_t rest = r, from = begin[rank - 1];
        for (int a = rank - 2; a >= 0; a--) {
            from += (begin[a] + rest % size[a]) * stride[a + 1];
            rest /= size[a];
        }
        memcpy(out + r * row, in + from * bytes, (size_t)row);
    }
    return 0;
}

/* DynamicReshape: x's elements under the shape read from input 1 (ONNX Reshape: 0 copies
 * the input's dim unless allowzero (attrs[0]), one -1 is inferred). A shape that is
 * invalid or does not fit reports size -1 for axis 0 (the generated check then fails the
 * run naming the node) and copies nothing. */
int runtime_sizes_dynamic_reshape(const mdsl_tensor *inputs, int n_inputs,
                                  mdsl_tensor *outputs, int n_outputs, const double *attrs,
                                  int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs < 1) return 2;
    const mdsl_tensor *x = &inputs[0], *shape = &inputs[1];
    const int rank = (int)shape->size, allowzero = attrs[0] != 0.0;
    int64_t *size = (int64_t *)outputs[0].shape;
    int64_t known = 1;
    int inferred = -1, valid = 1;
    for (int a = 0; a < rank; a++) {
        int64_t v = crop_value(shape, a);
        if (v == 0 && !allowzero) {
            if (a >= x->ndim) valid = 0;
            else v = x->shape[a];
        }
        if (v < -1 || (v == -1 && inferred >= 0)) valid = 0;
        if (v == -1) inferred = a;
        else if (valid && __builtin_mul_overflow(known, v, &known)) valid = 0;
        size[a] = v;
    }
    if (valid && inferred >= 0) {
        if (known == 0 || x->size % known) valid = 0;
        else size[inferred] = x->size / known, known = x->size;
    }
    if (!valid || known != x->size) {
        if (rank == 0) return 1; /* no axis to report it on */
        size[0] = -1;
        return 0;
    }
    memcpy(outputs[0].data, x->data, (size_t)(x->size * mdsl_dtype_bytes(x->dtype)));
    return 0;
}

/* ONNX Slice of one axis of size dim: its first index (*first) and its length. Starts and
 * ends count from the end when negative, then clamp to [0, dim] stepping forward and
 * [-1, dim - 1] stepping backward (as numpy, ONNX's reference, and ONNX Runtime: a start
 * before the axis selects nothing); INT64_MAX and INT64_MIN ends mean "to the end". Lengths are counted unsigned so a huge step cannot overflow. */
static int64_t slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step,
                          int64_t *first) {
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (step > 0) {
        start = start < 0 ? 0 : start > dim ? dim : start;
        end = end < 0 ? 0 : end > dim ? dim : end;
        *first = start;
        return end > start ? (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step + 1) : 0;
    }
    start = start < -1 ? -1 : start > dim - 1 ? dim - 1 : start;
    end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
    *first = start;
    const uint64_t stride = (uint64_t)(-(step + 1)) + 1; /* |step|, INT64_MIN too */
    return start > end ? (int64_t)((uint64_t)(start - end - 1) / stride + 1) : 0;
}

/* The elements of x at first[a] + i * step[a] along each axis a, i < size[a], written
 * contiguously to out (rank >= 1; every axis has its entry, unsliced ones first 0 step 1). */
static void slice_copy(const mdsl_tensor *x, const int64_t *first, const int64_t *step,
                       const int64_t *size, void *out) {
    const int rank = x->ndim;
    const int64_t bytes = mdsl_dtype_bytes(x->dtype);
    int64_t stride[CROP_MAX_RANK + 1], rows = 1;
    stride[rank] = 1;
    for (int a = rank - 1; a >= 0; a--) stride[a] = stride[a + 1] * x->shape[a];
    for (int a = 0; a < rank - 1; a++) rows *= size[a];
    const int64_t last = rank - 1, count = size[last];
    char *to = (char *)out;
    const char *in = (const char *)x->data;
    for (int64_t r = 0; r < rows && count > 0; r++) { /* output row r over the leading axes */
        int64_t rest = r, from = first[last];
        for (int a = rank - 2; a >= 0; a--) {
            from += (first[a] + rest % size[a] * step[a]) * stride[a + 1];
            rest /= size[a];
        }
        if (step[last] == 1) {
            memcpy(to, in + from * bytes, (size_t)(count * bytes));
            to += count * bytes;
            continue;
        }
        for (int64_t i = 0; i < count; i++, to += bytes)
            memcpy(to, in + (from + i * step[last]) * bytes, (size_t)bytes);
    }
}

/* Where a slice's indices come from: starts and ends are int tensors; axes and steps are
 * int tensors too, or (tensor NULL) attr lists, or (both NULL) 0..count-1 and all 1. */
typedef struct {
    const mdsl_tensor *starts, *ends, *axes, *steps;
    const double *attr_axes, *attr_steps;
} slice_args;

static int64_t slice_arg(const mdsl_tensor *t, const double *attr, int64_t k, int64_t dflt) {
    if (t != NULL) return crop_value(t, k);
    return attr != NULL ? (int64_t)attr[k] : dflt;
}

/* Slices `count` axes of x (ONNX Slice) into out. size[a] is written for every axis;
 * known[k] >= 0 is the length the graph already knows for the k-th sliced axis (a slice of
 * another length fails the run). Returns 0, or -1 for a bad axis or step, 1 for a known
 * length not met. */
static int slice_run(const mdsl_tensor *x, const slice_args *s, int64_t count,
                     const int64_t *known, int64_t *size, void *out) {
    const int rank = x->ndim;
    int64_t first[CROP_MAX_RANK], step[CROP_MAX_RANK];
    int sliced[CROP_MAX_RANK] = {0};
    for (int a = 0; a < rank; a++) first[a] = 0, step[a] = 1, size[a] = x->shape[a];
    for (int64_t k = 0; k < count; k++) {
        int64_t a = slice_arg(s->axes, s->attr_axes, k, k);
        const int64_t st = slice_arg(s->steps, s->attr_steps, k, 1);
        if (a < 0) a += rank;
        if (a < 0 || a >= rank || sliced[a] || st == 0) return -1;
        sliced[a] = 1;
        step[a] = st;
        size[a] = slice_axis(x->shape[a], crop_value(s->starts, k), crop_value(s->ends, k), st,
                             &first[a]);
        if (known != NULL && known[k] >= 0 && known[k] != size[a]) return 1;
    }
    if (rank == 0) memcpy(out, x->data, (size_t)mdsl_dtype_bytes(x->dtype));
    else slice_copy(x, first, step, size, out);
    return 0;
}

static int slice_index_dtypes(const mdsl_tensor *inputs, int from, int to) {
    for (int i = from; i < to; i++)
        if (inputs[i].dtype != MDSL_DTYPE_INT64 && inputs[i].dtype != MDSL_DTYPE_INT32) return 0;
    return 1;
}

/* DynamicSlice: inputs x, starts, ends; attrs axes, steps, lengths, dynamic (NaN), then the
 * lists axes, steps and lengths, each as its length (-1: absent) and its elements. Each
 * sliced length the graph does not know is reported in the output's shape. */
int runtime_sizes_dynamic_slice(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                                int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 3 || n_outputs != 1 || !slice_index_dtypes(inputs, 1, 3)) return 2;
    const mdsl_tensor *x = &inputs[0];
    const int64_t count = inputs[1].size;
    if (x->ndim > CROP_MAX_RANK || count > x->ndim || inputs[2].size != count) return 2;
    const double *list[3]; /* axes, steps, lengths: NULL when absent */
    int at = 4;
    for (int l = 0; l < 3; l++) {
        if (at >= n_attrs) return 2;
        const int64_t n = (int64_t)attrs[at++];
        list[l] = n < 0 ? NULL : attrs + at;
        if (n > 0 && (n != count || at + n > n_attrs)) return 2;
        at += n < 0 ? 0 : (int)n;
    }
    int64_t known[CROP_MAX_RANK], size[CROP_MAX_RANK];
    for (int64_t k = 0; k < count; k++) known[k] = list[2] ? (int64_t)list[2][k] : -1;
    const slice_args args = {&inputs[1], &inputs[2], NULL, NULL, list[0], list[1]};
    const int status = slice_run(x, &args, count, known, size, outputs[0].data);
    if (status != 0) return status < 0 ? 2 : 1;
    int64_t *reported = (int64_t *)outputs[0].shape;
    for (int64_t k = 0; k < count; k++) {
        int64_t a = list[0] ? (int64_t)list[0][k] : k;
        if (a < 0) a += x->ndim;
        if (known[k] < 0) reported[a] = size[a];
    }
    return 0;
}

/* DynamicSliceAxes: inputs x, starts, ends, axes, steps (all read at run time); every
 * output dim is reported. A bad axis (outside the rank, repeated) or a step of 0 reports
 * size -1 for axis 0, and the generated check fails the run naming the node. */
int runtime_sizes_dynamic_slice_axes(const mdsl_tensor *inputs, int n_inputs,
                                     mdsl_tensor *outputs, int n_outputs, const double *attrs,
                                     int n_attrs) {
    (void)attrs;
    (void)n_attrs;
    if (n_inputs != 5 || n_outputs != 1 || !slice_index_dtypes(inputs, 1, 5)) return 2;
    const mdsl_tensor *x = &inputs[0];
    const int64_t count = inputs[1].size;
    if (x->ndim > CROP_MAX_RANK) return 2;
    if (count > x->ndim) { /* some axis repeats or lies outside the rank */
        if (x->ndim == 0) return 1;
        ((int64_t *)outputs[0].shape)[0] = -1;
        return 0;
    }
    const slice_args args = {&inputs[1], &inputs[2], &inputs[3], &inputs[4], NULL, NULL};
    int64_t size[CROP_MAX_RANK];
    const int status = slice_run(x, &args, count, NULL, size, outputs[0].data);
    if (status < 0 && x->ndim == 0) return 1;
    int64_t *reported = (int64_t *)outputs[0].shape;
    for (int a = 0; a < x->ndim; a++) reported[a] = status < 0 ? -1 : size[a];
    return 0;
}

/* Pad in mode edge, reflect or wrap over sizes known only at run time (the "c" form of a
 * Pad whose input has symbolic dims: mdsl.codegen.lower_indexing). attrs[0] is the mode
 * (1 reflect, 2 edge, 3 wrap: its index in mdsl.ops.padding.PAD_MODES), then each axis'
 * begin and end pads (static; negative ones crop first, as the reference does). Output
 * index o of an axis reads input index lo + pad_source(o - begin, kept), as numpy.pad
 * (ONNX's reference). An empty axis padded to a non-empty one has nothing to read: 1. */
static int64_t pad_source(int64_t i, int64_t n, int mode) {
    if (i >= 0 && i < n) return i;
    if (mode == 2) return i < 0 ? 0 : n - 1;
    if (mode == 3) return (i % n + n) % n;
    const int64_t period = 2 * (n - 1); /* reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ... */
    if (period == 0) return 0;
    const int64_t r = (i % period + period) % period;
    return r < n ? r : period - r;
}

int runtime_sizes_pad(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                      int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1) return 2;
    const mdsl_tensor *x = &inputs[0], *y = &outputs[0];
    const int rank = x->ndim, mode = (int)attrs[0];
    if (rank < 1 || rank > CROP_MAX_RANK || n_attrs != 1 + 2 * rank || y->ndim != rank) return 2;
    int64_t lo[CROP_MAX_RANK], begin[CROP_MAX_RANK], kept[CROP_MAX_RANK];
    int64_t stride[CROP_MAX_RANK + 1], rows = 1;
    for (int a = 0; a < rank; a++) {
        const int64_t b = (int64_t)attrs[1 + 2 * a], e = (int64_t)attrs[2 + 2 * a];
        lo[a] = b < 0 ? -b : 0;
        begin[a] = b > 0 ? b : 0;
        kept[a] = x->shape[a] - lo[a] - (e < 0 ? -e : 0);
        if (kept[a] <= 0 && y->shape[a] > 0) return 1;
    }
    stride[rank] = 1;
    for (int a = rank - 1; a >= 0; a--) stride[a] = stride[a + 1] * x->shape[a];
    for (int a = 0; a < rank - 1; a++) rows *= y->shape[a];
    const int64_t bytes = mdsl_dtype_bytes(x->dtype), last = rank - 1, count = y->shape[last];
    char *to = (char *)y->data;
    const char *in = (const char *)x->data;
    for (int64_t r = 0; r < rows && count > 0; r++) { /* output row r over the leading axes */
        int64_t rest = r, from = 0;
        for (int a = rank - 2; a >= 0; a--) {
            const int64_t o = rest % y->shape[a];
            from += (lo[a] + pad_source(o - begin[a], kept[a], mode)) * stride[a + 1];
            rest /= y->shape[a];
        }
        for (int64_t o = 0; o < count; o++, to += bytes) {
            const int64_t i = lo[last] + pad_source(o - begin[last], kept[last], mode);
            memcpy(to, in + (from + i) * bytes, (size_t)bytes);
        }
    }
    return 0;
}
