/* GatherND and ScatterND as compiled loops: the "c" bindings of mdsl.ops.indexing_nd,
 * called through the custom C op convention (attrs: GatherND batch_dims; ScatterND
 * reduction as its choice index 0 none, 1 add, 2 mul, 3 max, 4 min).
 *
 * Each coordinate tuple of `indices` (its last axis) becomes an element offset into
 * data; the slice behind it is copied (GatherND, ScatterND without reduction: any
 * element type, by bytes) or combined element by element (ScatterND's reductions, on
 * numeric types other than the half floats). A coordinate out of range returns 1, which
 * fails the run with an ExecutionError naming the node.
 */
#include <string.h>

static int64_t nd_coordinate(const mdsl_tensor *indices, int64_t at) {
    return indices->dtype == MDSL_DTYPE_INT64 ? ((const int64_t *)indices->data)[at]
                                              : ((const int32_t *)indices->data)[at];
}

/* Element offset (within one batch) of tuple `tuple`, whose k coordinates index the data
 * axes first .. first + k - 1; -1 when a coordinate is out of range. */
static int64_t nd_tuple_offset(const mdsl_tensor *data, const mdsl_tensor *indices,
                               int64_t tuple, int64_t k, int first) {
    int64_t offset = 0;
    for (int64_t a = 0; a < k; a++) {
        const int64_t size = data->shape[first + a];
        int64_t c = nd_coordinate(indices, tuple * k + a);
        if (c < 0) c += size;
        if (c < 0 || c >= size) return -1;
        int64_t stride = 1;
        for (int32_t d = first + (int32_t)a + 1; d < data->ndim; d++) stride *= data->shape[d];
        offset += c * stride;
    }
    return offset;
}

static int64_t nd_product(const int64_t *shape, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++) n *= shape[d];
    return n;
}

int indexing_gather_nd(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                       int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs != 1) return 2;
    const mdsl_tensor *data = &inputs[0], *indices = &inputs[1];
    const int batch_dims = (int)attrs[0];
    const int64_t k = indices->shape[indices->ndim - 1];
    const int64_t bytes = mdsl_dtype_bytes(data->dtype);
    const int64_t batches = nd_product(data->shape, 0, batch_dims);
    const int64_t slice = nd_product(data->shape, batch_dims + (int)k, data->ndim);
    const int64_t batch_size = nd_product(data->shape, batch_dims, data->ndim);
    const int64_t tuples = batches ? indices->size / k / batches : 0;
    char *out = (char *)outputs[0].data;
    const char *src = (const char *)data->data;
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t j = 0; j < tuples; j++) {
            const int64_t tuple = b * tuples + j;
            const int64_t offset = nd_tuple_offset(data, indices, tuple, k, batch_dims);
            if (offset < 0) return 1;
            memcpy(out + tuple * slice * bytes, src + (b * batch_size + offset) * bytes,
                   (size_t)(slice * bytes));
        }
    }
    return 0;
}

#define ND_COMBINE(T)                                                                     \
    do {                                                                                  \
        T *o = (T *)dst;                                                                  \
        const T *u = (const T *)src;                                                      \
        for (int64_t e = 0; e < slice; e++) {                                             \
            switch (reduction) {                                                          \
            case 1: o[e] = (T)(o[e] + u[e]); break;                                       \
            case 2: o[e] = (T)(o[e] * u[e]); break;                                       \
            case 3: if (u[e] > o[e]) o[e] = u[e]; break;                                  \
            default: if (u[e] < o[e]) o[e] = u[e]; break;                                 \
            }                                                                             \
        }                                                                                 \
    } while (0)

static int nd_combine(int32_t dtype, int reduction, char *dst, const char *src, int64_t slice) {
    switch (dtype) {
    case MDSL_DTYPE_FLOAT32: ND_COMBINE(float); return 0;
    case MDSL_DTYPE_FLOAT64: ND_COMBINE(double); return 0;
    case MDSL_DTYPE_INT64: ND_COMBINE(int64_t); return 0;
    case MDSL_DTYPE_INT32: ND_COMBINE(int32_t); return 0;
    case MDSL_DTYPE_INT16: ND_COMBINE(int16_t); return 0;
    case MDSL_DTYPE_INT8: ND_COMBINE(int8_t); return 0;
    case MDSL_DTYPE_UINT8: case MDSL_DTYPE_BOOL: ND_COMBINE(uint8_t); return 0;
    default: return 3; /* half floats: no reduction here */
    }
}

int indexing_scatter_nd(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                        int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 3 || n_outputs != 1 || n_attrs != 1) return 2;
    const mdsl_tensor *data = &inputs[0], *indices = &inputs[1], *updates = &inputs[2];
    const int reduction = (int)attrs[0];
    const int64_t k = indices->shape[indices->ndim - 1];
    const int64_t bytes = mdsl_dtype_bytes(data->dtype);
    const int64_t slice = nd_product(data->shape, (int)k, data->ndim);
    const int64_t tuples = indices->size / k;
    char *out = (char *)outputs[0].data;
    memcpy(out, data->data, (size_t)(data->size * bytes));
    for (int64_t j = 0; j < tuples; j++) { /* in order: a later duplicate wins */
        const int64_t offset = nd_tuple_offset(data, indices, j, k, 0);
        if (offset < 0) return 1;
        char *dst = out + offset * bytes;
        const char *src = (const char *)updates->data + j * slice * bytes;
        if (reduction == 0) {
            memcpy(dst, src, (size_t)(slice * bytes));
        } else if (nd_combine(data->dtype, reduction, dst, src, slice)) {
            return 3;
        }
    }
    return 0;
}
