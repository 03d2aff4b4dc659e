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

static int64_t crop_element_bytes(int32_t dtype) {
    switch (dtype) {
    case MDSL_DTYPE_INT16: case MDSL_DTYPE_UINT16: case MDSL_DTYPE_FLOAT16:
    case MDSL_DTYPE_BFLOAT16: return 2;
    case MDSL_DTYPE_INT32: case MDSL_DTYPE_UINT32: case MDSL_DTYPE_FLOAT32: return 4;
    case MDSL_DTYPE_INT64: case MDSL_DTYPE_UINT64: case MDSL_DTYPE_FLOAT64: return 8;
    default: return 1; /* bool, int8, uint8 */
    }
}

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
        if (valid) memcpy(outputs[0].data, x->data, (size_t)crop_element_bytes(x->dtype));
        return 0;
    }
    const int64_t bytes = crop_element_bytes(x->dtype);
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
    memcpy(outputs[0].data, x->data, (size_t)(x->size * crop_element_bytes(x->dtype)));
    return 0;
}
