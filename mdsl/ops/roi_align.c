/* RoiAlign as a compiled loop: the "c" binding of mdsl.ops.roi_align, called through the
 * custom C op convention (attrs: coordinate_transformation_mode 0 half_pixel,
 * 1 output_half_pixel; mode 0 avg, 1 max; output_height, output_width, sampling_ratio,
 * spatial_scale).
 *
 * Per box and bin, the samples' corner indices and weights are those of the numpy
 * reference (Caffe2's bilinear rule: a sample more than a pixel outside counts 0, one
 * on the last row or column uses it twice). Sums are in double. A batch index outside
 * the batch returns 1 (an ExecutionError naming the node).
 */
#include <math.h>

static double ra_load(const mdsl_tensor *t, int64_t i) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: return ((const float *)t->data)[i];
    case MDSL_DTYPE_FLOAT64: return ((const double *)t->data)[i];
    case MDSL_DTYPE_FLOAT16: return (double)((const _Float16 *)t->data)[i];
    default: return mdsl_bf16_load(((const uint16_t *)t->data)[i]);
    }
}

static void ra_store(mdsl_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case MDSL_DTYPE_FLOAT32: ((float *)t->data)[i] = (float)v; break;
    case MDSL_DTYPE_FLOAT64: ((double *)t->data)[i] = v; break;
    case MDSL_DTYPE_FLOAT16: ((_Float16 *)t->data)[i] = (_Float16)v; break;
    default: ((uint16_t *)t->data)[i] = mdsl_bf16_store((float)v);
    }
}

typedef struct { int64_t low, high; double w_low, w_high; } ra_tap;

/* One sample coordinate p along an axis of `limit` pixels. */
static ra_tap ra_sample(double p, int64_t limit) {
    ra_tap t = {0, 0, 0, 0};
    if (p < -1.0 || p > (double)limit) return t;
    if (p < 0) p = 0;
    t.low = (int64_t)p;
    if (t.low >= limit - 1) {
        t.low = t.high = limit - 1;
        p = (double)t.low;
    } else {
        t.high = t.low + 1;
    }
    t.w_high = p - (double)t.low, t.w_low = 1 - t.w_high;
    return t;
}

int roi_align_2d(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                 int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 3 || n_outputs != 1 || n_attrs != 6) return 2;
    const mdsl_tensor *x = &inputs[0], *rois = &inputs[1], *indices = &inputs[2];
    mdsl_tensor *y = &outputs[0];
    const int half_pixel = (int)attrs[0] == 0, max_mode = (int)attrs[1] == 1;
    const int64_t out_h = (int64_t)attrs[2], out_w = (int64_t)attrs[3];
    const int64_t ratio = (int64_t)attrs[4];
    const double scale = attrs[5], offset = half_pixel ? 0.5 : 0.0;
    const int64_t batch = x->shape[0], channels = x->shape[1];
    const int64_t height = x->shape[2], width = x->shape[3], boxes = rois->shape[0];
    for (int64_t r = 0; r < boxes; r++) {
        const int64_t b = indices->dtype == MDSL_DTYPE_INT64
                              ? ((const int64_t *)indices->data)[r]
                              : ((const int32_t *)indices->data)[r];
        if (b < 0 || b >= batch) return 1;
        const double x1 = ra_load(rois, r * 4) * scale - offset;
        const double y1 = ra_load(rois, r * 4 + 1) * scale - offset;
        double box_w = ra_load(rois, r * 4 + 2) * scale - offset - x1;
        double box_h = ra_load(rois, r * 4 + 3) * scale - offset - y1;
        if (!half_pixel) box_w = box_w > 1 ? box_w : 1, box_h = box_h > 1 ? box_h : 1;
        const double bin_h = box_h / (double)out_h, bin_w = box_w / (double)out_w;
        const int64_t grid_h = ratio > 0 ? ratio : (int64_t)ceil(bin_h);
        const int64_t grid_w = ratio > 0 ? ratio : (int64_t)ceil(bin_w);
        const double count = grid_h * grid_w > 1 ? (double)(grid_h * grid_w) : 1.0;
        for (int64_t c = 0; c < channels; c++) {
            const int64_t plane = (b * channels + c) * height * width;
            for (int64_t ph = 0; ph < out_h; ph++) {
                for (int64_t pw = 0; pw < out_w; pw++) {
                    double pooled = 0;
                    int first = 1;
                    for (int64_t iy = 0; iy < grid_h; iy++) {
                        const ra_tap ty = ra_sample(
                            y1 + ph * bin_h + (iy + 0.5) * bin_h / (double)grid_h, height);
                        for (int64_t ix = 0; ix < grid_w; ix++) {
                            const ra_tap tx = ra_sample(
                                x1 + pw * bin_w + (ix + 0.5) * bin_w / (double)grid_w, width);
                            const double v[4] = {
                                ty.w_low * tx.w_low * ra_load(x, plane + ty.low * width + tx.low),
                                ty.w_low * tx.w_high * ra_load(x, plane + ty.low * width + tx.high),
                                ty.w_high * tx.w_low * ra_load(x, plane + ty.high * width + tx.low),
                                ty.w_high * tx.w_high * ra_load(x, plane + ty.high * width + tx.high),
                            };
                            if (!max_mode) {
                                pooled += v[0] + v[1] + v[2] + v[3];
                                continue;
                            }
                            double m = v[0];
                            for (int k = 1; k < 4; k++) m = v[k] > m ? v[k] : m;
                            pooled = first || m > pooled ? m : pooled;
                            first = 0;
                        }
                    }
                    ra_store(y, ((r * channels + c) * out_h + ph) * out_w + pw,
                             max_mode ? pooled : pooled / count);
                }
            }
        }
    }
    return 0;
}
