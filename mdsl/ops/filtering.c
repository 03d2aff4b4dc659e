/* Compress and Unique as compiled loops: the "c" bindings of mdsl.ops.filtering, called
 * through the custom C op convention (attrs in prototype order: Compress axis; Unique
 * axis, sorted; an axis of None is NaN and means the flattened input).
 *
 * Both are data-dependent: each output arrives sized by the op's bound (the length of
 * what is filtered), and the function reports how many entries it kept by writing the
 * count into output 0's shape along the filtered axis; the generated code checks and
 * binds it. Results are written contiguously at the actual count. Slices are copied by
 * bytes, so every element type works; Unique compares elements by their type (NaN after
 * every number and equal to NaN, as numpy.unique, which ONNX's reference calls).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* x seen as (outer, length, inner) around the filtered axis: the whole tensor as one row
 * when `axis_attr` is NaN (None). The axis is returned normalized (0 when flattened). */
typedef struct {
    const char *data;
    int32_t dtype;
    int64_t outer, length, inner, bytes;
    int axis;
} filter_view;

static int filter_view_of(const mdsl_tensor *x, double axis_attr, filter_view *v) {
    v->data = (const char *)x->data;
    v->dtype = x->dtype;
    v->bytes = mdsl_dtype_bytes(x->dtype);
    v->outer = 1;
    v->inner = 1;
    if (isnan(axis_attr)) {
        v->axis = 0;
        v->length = x->size;
        return 0;
    }
    int axis = (int)axis_attr;
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return 1;
    v->axis = axis;
    v->length = x->shape[axis];
    for (int d = 0; d < axis; d++) v->outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) v->inner *= x->shape[d];
    return 0;
}

/* Copy slice `from` of v (along its axis) to slice `to` of an output of `count` slices. */
static void filter_copy_slice(const filter_view *v, char *out, int64_t count, int64_t from,
                              int64_t to) {
    const int64_t row = v->inner * v->bytes;
    for (int64_t o = 0; o < v->outer; o++)
        memcpy(out + (o * count + to) * row, v->data + (o * v->length + from) * row,
               (size_t)row);
}

int filtering_compress(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                       int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs < 1) return 2;
    filter_view v;
    if (filter_view_of(&inputs[0], attrs[0], &v)) return 1;
    const unsigned char *keep = (const unsigned char *)inputs[1].data;
    const int64_t n = inputs[1].size;
    if (n > v.length) return 1; /* a condition longer than the axis */
    int64_t count = 0;
    for (int64_t j = 0; j < n; j++) count += keep[j] != 0;
    for (int64_t j = 0, to = 0; j < n; j++)
        if (keep[j]) filter_copy_slice(&v, (char *)outputs[0].data, count, j, to++);
    ((int64_t *)outputs[0].shape)[v.axis] = count;
    return 0;
}

/* -- Unique --------------------------------------------------------------------------- */
#define UNIQUE_ORDER(a, b) (((a) > (b)) - ((a) < (b)))
#define UNIQUE_FLOAT_ORDER(a, b) \
    (isnan(a) ? !isnan(b) : isnan(b) ? -1 : UNIQUE_ORDER(a, b))

static float unique_bf16(const char *p) {
    uint32_t bits = (uint32_t)(*(const uint16_t *)p) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* -1, 0 or 1: element a before, equal to, or after element b. */
static int unique_element_order(int32_t dtype, const char *a, const char *b) {
    switch (dtype) {
    case MDSL_DTYPE_FLOAT32: return UNIQUE_FLOAT_ORDER(*(const float *)a, *(const float *)b);
    case MDSL_DTYPE_FLOAT64: return UNIQUE_FLOAT_ORDER(*(const double *)a, *(const double *)b);
    case MDSL_DTYPE_FLOAT16: {
        const float x = (float)*(const _Float16 *)a, y = (float)*(const _Float16 *)b;
        return UNIQUE_FLOAT_ORDER(x, y);
    }
    case MDSL_DTYPE_BFLOAT16: {
        const float x = unique_bf16(a), y = unique_bf16(b);
        return UNIQUE_FLOAT_ORDER(x, y);
    }
    case MDSL_DTYPE_INT8: return UNIQUE_ORDER(*(const int8_t *)a, *(const int8_t *)b);
    case MDSL_DTYPE_INT16: return UNIQUE_ORDER(*(const int16_t *)a, *(const int16_t *)b);
    case MDSL_DTYPE_INT32: return UNIQUE_ORDER(*(const int32_t *)a, *(const int32_t *)b);
    case MDSL_DTYPE_INT64: return UNIQUE_ORDER(*(const int64_t *)a, *(const int64_t *)b);
    case MDSL_DTYPE_UINT16: return UNIQUE_ORDER(*(const uint16_t *)a, *(const uint16_t *)b);
    case MDSL_DTYPE_UINT32: return UNIQUE_ORDER(*(const uint32_t *)a, *(const uint32_t *)b);
    case MDSL_DTYPE_UINT64: return UNIQUE_ORDER(*(const uint64_t *)a, *(const uint64_t *)b);
    default: return UNIQUE_ORDER(*(const uint8_t *)a, *(const uint8_t *)b); /* bool, uint8 */
    }
}

/* Slices i and j of v compared element by element in row-major order (numpy.unique's
 * order over an axis). */
static int unique_slice_order(const filter_view *v, int64_t i, int64_t j) {
    for (int64_t o = 0; o < v->outer; o++) {
        const char *a = v->data + ((o * v->length + i) * v->inner) * v->bytes;
        const char *b = v->data + ((o * v->length + j) * v->inner) * v->bytes;
        for (int64_t k = 0; k < v->inner; k++) {
            const int c = unique_element_order(v->dtype, a + k * v->bytes, b + k * v->bytes);
            if (c) return c;
        }
    }
    return 0;
}

/* Whether slice i of the view comes strictly before slice j (the sort is stable, so each
 * run of equal slices starts with its first occurrence). */
static int unique_slice_before(const void *view, int64_t i, int64_t j) {
    return unique_slice_order(view, i, j) < 0;
}

/* -- Unique of single elements: a stable radix sort of order-preserving integer keys -- */
static uint64_t unique_float_key(uint64_t bits, int width) { /* IEEE bits -> key */
    const uint64_t sign = (uint64_t)1 << (width - 1);
    if ((bits & ~sign) == 0) bits = 0; /* -0.0 equals 0.0 */
    return bits & sign ? ~bits & ((sign << 1) - 1) : bits | sign;
}

/* A key per element of v whose unsigned order is unique_element_order's (NaNs share the
 * largest key). */
static uint64_t unique_key(const filter_view *v, int64_t i) {
    const char *p = v->data + i * v->bytes;
    switch (v->dtype) {
    case MDSL_DTYPE_FLOAT32: case MDSL_DTYPE_FLOAT16: case MDSL_DTYPE_BFLOAT16: {
        const float f = v->dtype == MDSL_DTYPE_FLOAT32   ? *(const float *)p
                        : v->dtype == MDSL_DTYPE_FLOAT16 ? (float)*(const _Float16 *)p
                                                         : unique_bf16(p);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        return isnan(f) ? UINT64_MAX : unique_float_key(bits, 32);
    }
    case MDSL_DTYPE_FLOAT64: {
        const double d = *(const double *)p;
        uint64_t bits;
        memcpy(&bits, &d, sizeof bits);
        return isnan(d) ? UINT64_MAX : unique_float_key(bits, 64);
    }
    case MDSL_DTYPE_INT8: return (uint64_t)(int64_t)*(const int8_t *)p ^ ((uint64_t)1 << 63);
    case MDSL_DTYPE_INT16: return (uint64_t)(int64_t)*(const int16_t *)p ^ ((uint64_t)1 << 63);
    case MDSL_DTYPE_INT32: return (uint64_t)(int64_t)*(const int32_t *)p ^ ((uint64_t)1 << 63);
    case MDSL_DTYPE_INT64: return (uint64_t)*(const int64_t *)p ^ ((uint64_t)1 << 63);
    case MDSL_DTYPE_UINT16: return *(const uint16_t *)p;
    case MDSL_DTYPE_UINT32: return *(const uint32_t *)p;
    case MDSL_DTYPE_UINT64: return *(const uint64_t *)p;
    default: return *(const uint8_t *)p; /* bool, uint8 */
    }
}

/* order[] = element numbers sorted stably by key (LSD radix, one byte per pass, passes
 * where every key has the same byte skipped); key[] receives the keys in that order. */
static int unique_radix_order(const filter_view *v, int64_t *order, int64_t *tmp,
                              uint64_t *key, int64_t n) {
    uint64_t *spare = malloc((size_t)(n + 1) * sizeof *spare);
    if (!spare) return 1;
    for (int64_t i = 0; i < n; i++) {
        order[i] = i;
        key[i] = unique_key(v, i);
    }
    for (int shift = 0; shift < 64; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++) count[((key[i] >> shift) & 255) + 1]++;
        if (n && count[((key[0] >> shift) & 255) + 1] == n) continue;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = count[(key[i] >> shift) & 255]++;
            tmp[at] = order[i];
            spare[at] = key[i];
        }
        memcpy(order, tmp, (size_t)n * sizeof *order);
        memcpy(key, spare, (size_t)n * sizeof *key);
    }
    free(spare);
    return 0;
}

int filtering_unique(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                     int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 4 || n_attrs < 2) return 2;
    filter_view v;
    if (filter_view_of(&inputs[0], attrs[0], &v)) return 1;
    const int sorted = attrs[1] != 0.0;
    const int64_t n = v.length;
    const int single = v.outer == 1 && v.inner == 1; /* slices of one element */
    int64_t *order = malloc((size_t)(4 * n + 1) * sizeof(int64_t));
    uint64_t *key = single ? malloc((size_t)(n + 1) * sizeof(uint64_t)) : NULL;
    if (!order || (single && !key) || (single && unique_radix_order(&v, order, order + n, key, n))) {
        free(order);
        free(key);
        return 1;
    }
    int64_t *tmp = order + n, *group = tmp + n, *rank = group + n;
    if (!single) ops_stable_sort(unique_slice_before, &v, order, tmp, n);
    int64_t count = 0; /* group[i]: slice i's run in sorted order; tmp[g]: run g's first */
    for (int64_t s = 0; s < n; s++) {
        const int differs = single ? s == 0 || key[s - 1] != key[s]
                                   : s == 0 || unique_slice_order(&v, order[s - 1], order[s]) != 0;
        if (differs) tmp[count++] = order[s];
        group[order[s]] = count - 1;
    }
    free(key);
    if (sorted) {
        for (int64_t g = 0; g < count; g++) rank[g] = g;
    } else { /* renumber the runs by first occurrence */
        for (int64_t i = 0, next = 0; i < n; i++)
            if (tmp[group[i]] == i) rank[group[i]] = next++;
    }
    int64_t *first = (int64_t *)outputs[1].data, *inverse = (int64_t *)outputs[2].data;
    int64_t *counts = (int64_t *)outputs[3].data;
    for (int64_t g = 0; g < count; g++) {
        first[rank[g]] = tmp[g];
        counts[rank[g]] = 0;
        filter_copy_slice(&v, (char *)outputs[0].data, count, tmp[g], rank[g]);
    }
    for (int64_t i = 0; i < n; i++) {
        inverse[i] = rank[group[i]];
        counts[rank[group[i]]]++;
    }
    free(order);
    ((int64_t *)outputs[0].shape)[v.axis] = count;
    return 0;
}
