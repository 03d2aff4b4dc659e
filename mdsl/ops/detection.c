/* NonZero and NonMaxSuppression as compiled loops: the "c" bindings of
 * mdsl.ops.detection, called through the custom C op convention (NonMaxSuppression's
 * attrs in prototype order: center_point_box, max_output_boxes_per_class, iou_threshold,
 * score_threshold (NaN: none)).
 *
 * Both are data-dependent: the output arrives sized by the op's bound and the function
 * reports how many rows it produced in the output's shape (NonZero: axis 1, the count of
 * nonzero elements; NonMaxSuppression: axis 0, the boxes kept); the generated code checks
 * and binds it. Both follow the numpy reference step by step: NonZero in row-major order,
 * NMS per batch and class over the boxes sorted by score (highest first, ties in index
 * order, NaN last), IoU in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether element i of x is nonzero (a float by value: -0.0 is zero, NaN is not). */
static int nz_element(const mdsl_tensor *x, int64_t i) {
    switch (x->dtype) {
    case MDSL_DTYPE_FLOAT32: return ((const float *)x->data)[i] != 0.0f;
    case MDSL_DTYPE_FLOAT64: return ((const double *)x->data)[i] != 0.0;
    case MDSL_DTYPE_FLOAT16: return (float)((const _Float16 *)x->data)[i] != 0.0f;
    case MDSL_DTYPE_BFLOAT16: return (((const uint16_t *)x->data)[i] & 0x7fff) != 0;
    case MDSL_DTYPE_INT16: case MDSL_DTYPE_UINT16: return ((const uint16_t *)x->data)[i] != 0;
    case MDSL_DTYPE_INT32: case MDSL_DTYPE_UINT32: return ((const uint32_t *)x->data)[i] != 0;
    case MDSL_DTYPE_INT64: case MDSL_DTYPE_UINT64: return ((const uint64_t *)x->data)[i] != 0;
    default: return ((const uint8_t *)x->data)[i] != 0; /* bool, int8, uint8 */
    }
}

int detection_nonzero(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                      int n_outputs, const double *attrs, int n_attrs) {
    (void)attrs;
    (void)n_attrs;
    if (n_inputs != 1 || n_outputs != 1) return 2;
    const mdsl_tensor *x = &inputs[0];
    int64_t count = 0;
    for (int64_t i = 0; i < x->size; i++) count += nz_element(x, i);
    int64_t *y = (int64_t *)outputs[0].data;
    for (int64_t i = 0, j = 0; i < x->size; i++) {
        if (!nz_element(x, i)) continue;
        int64_t rest = i; /* the coordinates of i, last axis first */
        for (int d = x->ndim - 1; d >= 0; d--) {
            y[d * count + j] = rest % x->shape[d];
            rest /= x->shape[d];
        }
        if (x->ndim == 0) y[j] = 0;
        j++;
    }
    ((int64_t *)outputs[0].shape)[1] = count;
    return 0;
}

/* -- NonMaxSuppression ---------------------------------------------------------------- */
#if defined(__GNUC__) && !defined(__clang__)
#define NMS_EXACT __attribute__((optimize("fp-contract=off"))) /* as numpy: no fused ops */
#else
#define NMS_EXACT
#endif

static double nms_score(const mdsl_tensor *s, int64_t at) {
    return s->dtype == MDSL_DTYPE_FLOAT64 ? ((const double *)s->data)[at]
           : s->dtype == MDSL_DTYPE_FLOAT16 ? (double)((const _Float16 *)s->data)[at]
                                            : (double)((const float *)s->data)[at];
}

/* numpy.minimum / maximum (NaN wins) and Python's min / max (the first unless the
 * second is strictly smaller / larger), as the reference uses them. */
static double np_min(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b; }
static double np_max(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b; }
static double py_min(double a, double b) { return b < a ? b : a; }
static double py_max(double a, double b) { return b > a ? b : a; }

/* Box `at` of `boxes` as corners (y1, x1, y2, x2), y1 <= y2 and x1 <= x2. */
NMS_EXACT static void nms_corners(const mdsl_tensor *boxes, int64_t at, int centre,
                                  double *c) {
    double v[4];
    for (int k = 0; k < 4; k++) v[k] = nms_score(boxes, at * 4 + k);
    if (centre) { /* (x, y, w, h) */
        c[0] = v[1] - v[3] / 2;
        c[1] = v[0] - v[2] / 2;
        c[2] = v[1] + v[3] / 2;
        c[3] = v[0] + v[2] / 2;
        return;
    }
    c[0] = np_min(v[0], v[2]);
    c[1] = np_min(v[1], v[3]);
    c[2] = np_max(v[0], v[2]);
    c[3] = np_max(v[1], v[3]);
}

NMS_EXACT static double nms_iou(const double *a, const double *b) {
    const double area_a = (a[2] - a[0]) * (a[3] - a[1]);
    const double area_b = (b[2] - b[0]) * (b[3] - b[1]);
    if (area_a <= 0 || area_b <= 0) return 0.0;
    const double inter_h = py_max(0.0, py_min(a[2], b[2]) - py_max(a[0], b[0]));
    const double inter_w = py_max(0.0, py_min(a[3], b[3]) - py_max(a[1], b[1]));
    const double inter = inter_h * inter_w;
    return inter / (area_a + area_b - inter);
}

/* Whether box i comes before box j: the higher score first, NaN last, ties by index. */
static int nms_before(const void *scores, int64_t i, int64_t j) {
    const double *s = scores;
    if (isnan(s[j])) return !isnan(s[i]) || i < j;
    if (isnan(s[i])) return 0;
    return s[i] > s[j] || (s[i] == s[j] && i < j);
}

int detection_nms(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                  int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 2 || n_outputs != 1 || n_attrs < 4) return 2;
    const mdsl_tensor *boxes = &inputs[0], *scores = &inputs[1];
    const int centre = attrs[0] != 0.0;
    const int64_t limit = (int64_t)attrs[1];
    const double iou_threshold = attrs[2], score_threshold = attrs[3];
    const int64_t batches = scores->shape[0], classes = scores->shape[1];
    const int64_t n = scores->shape[2];
    double *work = malloc((size_t)(5 * n + 1) * sizeof(double));
    int64_t *order = malloc((size_t)(3 * n + 1) * sizeof(int64_t));
    if (!work || !order) {
        free(work);
        free(order);
        return 1;
    }
    double *s = work, *corners = work + n;
    int64_t *tmp = order + n, *kept = tmp + n;
    int64_t *y = (int64_t *)outputs[0].data, rows = 0;
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t i = 0; i < n; i++) nms_corners(boxes, b * n + i, centre, corners + 4 * i);
        for (int64_t c = 0; c < classes; c++) {
            for (int64_t i = 0; i < n; i++) s[i] = nms_score(scores, (b * classes + c) * n + i);
            ops_stable_sort(nms_before, s, order, tmp, n);
            int64_t count = 0;
            for (int64_t r = 0; r < n && count < limit; r++) {
                const int64_t i = order[r];
                if (!isnan(score_threshold) && !(s[i] > score_threshold)) break;
                int keep = 1;
                for (int64_t k = 0; k < count && keep; k++)
                    keep = nms_iou(corners + 4 * i, corners + 4 * kept[k]) <= iou_threshold;
                if (keep) kept[count++] = i;
            }
            for (int64_t k = 0; k < count; k++, rows++) {
                y[3 * rows] = b;
                y[3 * rows + 1] = c;
                y[3 * rows + 2] = kept[k];
            }
        }
    }
    free(work);
    free(order);
    ((int64_t *)outputs[0].shape)[0] = rows;
    return 0;
}
