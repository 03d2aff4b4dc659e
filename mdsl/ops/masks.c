/* Trilu, EyeLike, ReverseSequence and BitCast as compiled loops: the "c" bindings of
 * mdsl.ops.linalg (Trilu: attrs upper, k), mdsl.ops.creation (EyeLike: attrs dtype,
 * unused, and k) and mdsl.ops.movement (ReverseSequence: attrs batch_axis, time_axis;
 * BitCast: the bytes as they are), called through the custom C op convention. Elements are copied by bytes, so every
 * dtype takes the same loop; a sequence length outside [0, steps] returns 1 (an
 * ExecutionError naming the node).
 */
#include <string.h>

/* the bytes of the value 1 in `dtype` */
static void masks_one(int32_t dtype, unsigned char *bytes) {
    memset(bytes, 0, 8);
    switch (dtype) {
    case MDSL_DTYPE_FLOAT32: { const float v = 1.0f; memcpy(bytes, &v, 4); break; }
    case MDSL_DTYPE_FLOAT64: { const double v = 1.0; memcpy(bytes, &v, 8); break; }
    case MDSL_DTYPE_FLOAT16: { const _Float16 v = 1.0f; memcpy(bytes, &v, 2); break; }
    case MDSL_DTYPE_BFLOAT16: { const uint16_t v = 0x3F80; memcpy(bytes, &v, 2); break; }
    default: bytes[0] = 1; /* integers and bool, little-endian */
    }
}

int masks_trilu(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs,
                const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1 || n_attrs != 2) return 2;
    const mdsl_tensor *x = &inputs[0];
    const int upper = attrs[0] != 0;
    const int64_t k = (int64_t)attrs[1], bytes = mdsl_dtype_bytes(x->dtype);
    const int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    const int64_t matrices = rows * cols ? x->size / (rows * cols) : 0;
    const unsigned char *src = (const unsigned char *)x->data;
    unsigned char *dst = (unsigned char *)outputs[0].data;
    for (int64_t m = 0; m < matrices; m++) {
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t j = 0; j < cols; j++) {
                const int64_t at = ((m * rows + i) * cols + j) * bytes;
                const int keep = upper ? j - i >= k : j - i <= k;
                if (keep) memcpy(dst + at, src + at, (size_t)bytes);
                else memset(dst + at, 0, (size_t)bytes);
            }
        }
    }
    return 0;
}

int masks_eye_like(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                   int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 1 || n_outputs != 1 || n_attrs != 2) return 2;
    mdsl_tensor *y = &outputs[0];
    const int64_t k = (int64_t)attrs[1], bytes = mdsl_dtype_bytes(y->dtype);
    const int64_t rows = y->shape[0], cols = y->shape[1];
    unsigned char one[8], *dst = (unsigned char *)y->data;
    masks_one(y->dtype, one);
    memset(dst, 0, (size_t)(y->size * bytes));
    for (int64_t i = 0; i < rows; i++) {
        const int64_t j = i + k;
        if (j >= 0 && j < cols) memcpy(dst + (i * cols + j) * bytes, one, (size_t)bytes);
    }
    return 0;
}

int masks_reverse_sequence(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                           int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs != 2) return 2;
    const mdsl_tensor *x = &inputs[0], *lens = &inputs[1];
    const int batch_axis = (int)attrs[0];
    const int64_t bytes = mdsl_dtype_bytes(x->dtype);
    const int64_t batch = x->shape[batch_axis], steps = x->shape[1 - batch_axis];
    int64_t inner = 1;
    for (int d = 2; d < x->ndim; d++) inner *= x->shape[d];
    /* element (b, t) of the (batch, time) view, wherever the axes are */
    const int64_t b_stride = batch_axis == 0 ? steps * inner : inner;
    const int64_t t_stride = batch_axis == 0 ? inner : batch * inner;
    const unsigned char *src = (const unsigned char *)x->data;
    unsigned char *dst = (unsigned char *)outputs[0].data;
    const int64_t *n_of = (const int64_t *)lens->data;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t n = n_of[b];
        if (n < 0 || n > steps) return 1;
        for (int64_t t = 0; t < steps; t++) {
            const int64_t from = t < n ? n - 1 - t : t;
            memcpy(dst + (b * b_stride + t * t_stride) * bytes,
                   src + (b * b_stride + from * t_stride) * bytes, (size_t)(inner * bytes));
        }
    }
    return 0;
}

/* BitCast: both dtypes are as wide (the prototype checks), so the bytes are copied. */
int masks_bit_cast(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                   int n_outputs, const double *attrs, int n_attrs) {
    (void)attrs; (void)n_attrs;
    if (n_inputs != 1 || n_outputs != 1 || outputs[0].size != inputs[0].size) return 2;
    const int64_t bytes = inputs[0].size * mdsl_dtype_bytes(inputs[0].dtype);
    if (bytes > 0) memcpy(outputs[0].data, inputs[0].data, (size_t)bytes);
    return 0;
}
