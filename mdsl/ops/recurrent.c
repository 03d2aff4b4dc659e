/* Recurrent layers (ONNX LSTM, GRU, RNN) as compiled loops: the "c" bindings of
 * mdsl.ops.recurrent, called through the custom C op convention (mdsl_tensor records,
 * attrs as doubles in prototype order, a str attr with choices as its choice index).
 *
 * Attrs, in prototype order: hidden_size, direction (0 forward, 1 reverse,
 * 2 bidirectional), layout (0: [seq, batch, ...], 1: [batch, seq, ...]), clip (0: none),
 * then one op-specific attr: LSTM input_forget, GRU linear_before_reset, RNN activation
 * (0 Tanh, 1 Relu, 2 Sigmoid).
 *
 * Inputs: X, W, R, B, sequence_lens, initial_h (and LSTM: initial_c, P); outputs Y, Y_h
 * (and LSTM: Y_c). Each time step computes the input projection x.W^T and the recurrent
 * projection h.R^T of every gate for one batch row, applies the gate equations, and
 * writes Y at the step's position (rows past a sequence's length stay zero and keep
 * their state, as ONNX specifies; a sequence of length 0 ends in zero states, as ONNX
 * Runtime gives). The element type is float or double (one copy of the
 * loops per type, made by the RECURRENT_KERNELS macro below).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t seq, batch, input, hidden, dirs;
    int direction, layout;
    double clip;
} rec_dims;

static int rec_dims_of(const mdsl_tensor *in, const double *attrs, rec_dims *d) {
    if (in[0].ndim != 3 || in[1].ndim != 3) return 1;
    d->layout = (int)attrs[2];
    d->seq = in[0].shape[d->layout ? 1 : 0];
    d->batch = in[0].shape[d->layout ? 0 : 1];
    d->input = in[0].shape[2];
    d->hidden = (int64_t)attrs[0];
    d->dirs = in[1].shape[0];
    d->direction = (int)attrs[1];
    d->clip = attrs[3];
    return 0;
}

/* Offset of (t, dir, b, 0) in Y and of (dir, b, 0) in a state tensor. */
static int64_t rec_y_at(const rec_dims *d, int64_t t, int64_t dir, int64_t b) {
    if (d->layout) return ((b * d->seq + t) * d->dirs + dir) * d->hidden;
    return ((t * d->dirs + dir) * d->batch + b) * d->hidden;
}

static int64_t rec_state_at(const rec_dims *d, int64_t dir, int64_t b) {
    if (d->layout) return (b * d->dirs + dir) * d->hidden;
    return (dir * d->batch + b) * d->hidden;
}

static int64_t rec_x_at(const rec_dims *d, int64_t t, int64_t b) {
    return (d->layout ? b * d->seq + t : t * d->batch + b) * d->input;
}

static int64_t rec_length(const mdsl_tensor *lens, const rec_dims *d, int64_t b) {
    int64_t n = d->seq;
    if (lens->data != NULL) {
        n = lens->dtype == MDSL_DTYPE_INT64 ? ((const int64_t *)lens->data)[b]
                                             : ((const int32_t *)lens->data)[b];
    }
    return n < 0 ? 0 : (n > d->seq ? d->seq : n);
}

static int rec_reverse(const rec_dims *d, int64_t dir) {
    return d->direction == 1 || (d->direction == 2 && dir == 1);
}

#define RECURRENT_KERNELS(T, SUFFIX)                                                         \
static T rec_clip_##SUFFIX(T v, double clip) {                                             \
    if (clip > 0) { if (v > (T)clip) return (T)clip; if (v < (T)-clip) return (T)-clip; }   \
    return v;                                                                               \
}                                                                                           \
static T rec_sigmoid_##SUFFIX(T v) { return (T)1 / ((T)1 + exp(-v)); }                     \
                                                                                            \
/* out[g] = bias[g] + sum_k v[k] * M[g][k] for g < rows (M row-major, rows x cols). */      \
static void rec_project_##SUFFIX(T *out, const T *m, const T *v, const T *bias,            \
                                 int64_t rows, int64_t cols) {                              \
    for (int64_t g = 0; g < rows; g++) {                                                    \
        T acc = bias ? bias[g] : (T)0;                                                      \
        const T *row = m + g * cols;                                                        \
        for (int64_t k = 0; k < cols; k++) acc += row[k] * v[k];                            \
        out[g] = acc;                                                                       \
    }                                                                                       \
}                                                                                           \
                                                                                            \
/* The state of (dir, b) before step 0: initial_h (or initial_c) or zeros. */              \
static void rec_init_##SUFFIX(T *state, const mdsl_tensor *init, const rec_dims *d,        \
                              int64_t dir, int64_t b) {                                     \
    if (init->data == NULL) { memset(state, 0, sizeof(T) * d->hidden); return; }            \
    memcpy(state, (const T *)init->data + rec_state_at(d, dir, b), sizeof(T) * d->hidden);  \
}                                                                                           \
                                                                                            \
static int lstm_##SUFFIX(const mdsl_tensor *in, mdsl_tensor *out, const double *attrs) {   \
    rec_dims d;                                                                             \
    if (rec_dims_of(in, attrs, &d)) return 1;                                               \
    const int64_t NH = d.hidden, NIN = d.input;                                                \
    const int input_forget = attrs[4] != 0;                                                 \
    T *y = (T *)out[0].data, *y_h = (T *)out[1].data, *y_c = (T *)out[2].data;              \
    T *work = (T *)malloc(sizeof(T) * 10 * NH);                                              \
    if (work == NULL) return 2;                                                             \
    T *gx = work, *gh = work + 4 * NH, *h = work + 8 * NH, *c = work + 9 * NH;                 \
    memset(y, 0, sizeof(T) * out[0].size);                                                  \
    for (int64_t dir = 0; dir < d.dirs; dir++) {                                            \
        const T *w = (const T *)in[1].data + dir * 4 * NH * NIN;                               \
        const T *r = (const T *)in[2].data + dir * 4 * NH * NH;                               \
        const T *wb = in[3].data ? (const T *)in[3].data + dir * 8 * NH : NULL;              \
        const T *rb = wb ? wb + 4 * NH : NULL;                                               \
        const T *p = in[7].data ? (const T *)in[7].data + dir * 3 * NH : NULL;               \
        for (int64_t b = 0; b < d.batch; b++) {                                             \
            const int64_t len = rec_length(&in[4], &d, b);                                  \
            rec_init_##SUFFIX(h, &in[5], &d, dir, b);                                       \
            rec_init_##SUFFIX(c, &in[6], &d, dir, b);                                       \
            for (int64_t step = 0; step < len; step++) {                                    \
                const int64_t t = rec_reverse(&d, dir) ? len - 1 - step : step;             \
                rec_project_##SUFFIX(gx, w, (const T *)in[0].data + rec_x_at(&d, t, b),     \
                                     wb, 4 * NH, NIN);                                         \
                rec_project_##SUFFIX(gh, r, h, rb, 4 * NH, NH);                               \
                for (int64_t j = 0; j < NH; j++) { /* gates i, o, f, c */                    \
                    T gi = gx[j] + gh[j], go = gx[NH + j] + gh[NH + j];                       \
                    T gf = gx[2 * NH + j] + gh[2 * NH + j], gc = gx[3 * NH + j] + gh[3 * NH + j]; \
                    if (p) { gi += p[j] * c[j]; gf += p[2 * NH + j] * c[j]; }                \
                    T i_ = rec_sigmoid_##SUFFIX(rec_clip_##SUFFIX(gi, d.clip));             \
                    T f_ = input_forget ? (T)1 - i_                                         \
                                        : rec_sigmoid_##SUFFIX(rec_clip_##SUFFIX(gf, d.clip)); \
                    T c_ = tanh(rec_clip_##SUFFIX(gc, d.clip));                             \
                    c[j] = f_ * c[j] + i_ * c_;                                             \
                    if (p) go += p[NH + j] * c[j];                                           \
                    T o_ = rec_sigmoid_##SUFFIX(rec_clip_##SUFFIX(go, d.clip));             \
                    h[j] = o_ * tanh(c[j]);                                                 \
                }                                                                           \
                memcpy(y + rec_y_at(&d, t, dir, b), h, sizeof(T) * NH);                      \
            }                                                                               \
            if (len == 0) { memset(h, 0, sizeof(T) * NH); memset(c, 0, sizeof(T) * NH); }     \
            memcpy(y_h + rec_state_at(&d, dir, b), h, sizeof(T) * NH);                       \
            memcpy(y_c + rec_state_at(&d, dir, b), c, sizeof(T) * NH);                       \
        }                                                                                   \
    }                                                                                       \
    free(work);                                                                             \
    return 0;                                                                               \
}                                                                                           \
                                                                                            \
static int gru_##SUFFIX(const mdsl_tensor *in, mdsl_tensor *out, const double *attrs) {    \
    rec_dims d;                                                                             \
    if (rec_dims_of(in, attrs, &d)) return 1;                                               \
    const int64_t NH = d.hidden, NIN = d.input;                                                \
    const int linear_before_reset = attrs[4] != 0;                                          \
    T *y = (T *)out[0].data, *y_h = (T *)out[1].data;                                       \
    T *work = (T *)malloc(sizeof(T) * 8 * NH);                                               \
    if (work == NULL) return 2;                                                             \
    T *gx = work, *gh = work + 3 * NH, *h = work + 6 * NH, *rh = work + 7 * NH;                \
    memset(y, 0, sizeof(T) * out[0].size);                                                  \
    for (int64_t dir = 0; dir < d.dirs; dir++) {                                            \
        const T *w = (const T *)in[1].data + dir * 3 * NH * NIN;                               \
        const T *r = (const T *)in[2].data + dir * 3 * NH * NH;                               \
        const T *wb = in[3].data ? (const T *)in[3].data + dir * 6 * NH : NULL;              \
        const T *rb = wb ? wb + 3 * NH : NULL;                                               \
        for (int64_t b = 0; b < d.batch; b++) {                                             \
            const int64_t len = rec_length(&in[4], &d, b);                                  \
            rec_init_##SUFFIX(h, &in[5], &d, dir, b);                                       \
            for (int64_t step = 0; step < len; step++) {                                    \
                const int64_t t = rec_reverse(&d, dir) ? len - 1 - step : step;             \
                rec_project_##SUFFIX(gx, w, (const T *)in[0].data + rec_x_at(&d, t, b),     \
                                     wb, 3 * NH, NIN);                                         \
                /* gates z, r from h; the h gate's recurrent part depends on the mode */    \
                rec_project_##SUFFIX(gh, r, h, rb, (linear_before_reset ? 3 : 2) * NH, NH);   \
                for (int64_t j = 0; j < 2 * NH; j++)                                         \
                    gx[j] = rec_sigmoid_##SUFFIX(rec_clip_##SUFFIX(gx[j] + gh[j], d.clip)); \
                if (!linear_before_reset) {                                                 \
                    for (int64_t j = 0; j < NH; j++) rh[j] = gx[NH + j] * h[j];               \
                    rec_project_##SUFFIX(gh + 2 * NH, r + 2 * NH * NH, rh,                     \
                                         rb ? rb + 2 * NH : NULL, NH, NH);                     \
                }                                                                           \
                for (int64_t j = 0; j < NH; j++) {                                           \
                    T rec = linear_before_reset ? gx[NH + j] * gh[2 * NH + j] : gh[2 * NH + j]; \
                    T cand = tanh(rec_clip_##SUFFIX(gx[2 * NH + j] + rec, d.clip));          \
                    h[j] = ((T)1 - gx[j]) * cand + gx[j] * h[j];                            \
                }                                                                           \
                memcpy(y + rec_y_at(&d, t, dir, b), h, sizeof(T) * NH);                      \
            }                                                                               \
            if (len == 0) memset(h, 0, sizeof(T) * NH);                                      \
            memcpy(y_h + rec_state_at(&d, dir, b), h, sizeof(T) * NH);                       \
        }                                                                                   \
    }                                                                                       \
    free(work);                                                                             \
    return 0;                                                                               \
}                                                                                           \
                                                                                            \
static int rnn_##SUFFIX(const mdsl_tensor *in, mdsl_tensor *out, const double *attrs) {    \
    rec_dims d;                                                                             \
    if (rec_dims_of(in, attrs, &d)) return 1;                                               \
    const int64_t NH = d.hidden, NIN = d.input;                                                \
    const int activation = (int)attrs[4];                                                   \
    T *y = (T *)out[0].data, *y_h = (T *)out[1].data;                                       \
    T *work = (T *)malloc(sizeof(T) * 3 * NH);                                               \
    if (work == NULL) return 2;                                                             \
    T *gx = work, *gh = work + NH, *h = work + 2 * NH;                                        \
    memset(y, 0, sizeof(T) * out[0].size);                                                  \
    for (int64_t dir = 0; dir < d.dirs; dir++) {                                            \
        const T *w = (const T *)in[1].data + dir * NH * NIN;                                   \
        const T *r = (const T *)in[2].data + dir * NH * NH;                                   \
        const T *wb = in[3].data ? (const T *)in[3].data + dir * 2 * NH : NULL;              \
        const T *rb = wb ? wb + NH : NULL;                                                   \
        for (int64_t b = 0; b < d.batch; b++) {                                             \
            const int64_t len = rec_length(&in[4], &d, b);                                  \
            rec_init_##SUFFIX(h, &in[5], &d, dir, b);                                       \
            for (int64_t step = 0; step < len; step++) {                                    \
                const int64_t t = rec_reverse(&d, dir) ? len - 1 - step : step;             \
                rec_project_##SUFFIX(gx, w, (const T *)in[0].data + rec_x_at(&d, t, b),     \
                                     wb, NH, NIN);                                             \
                rec_project_##SUFFIX(gh, r, h, rb, NH, NH);                                   \
                for (int64_t j = 0; j < NH; j++) {                                           \
                    T v = rec_clip_##SUFFIX(gx[j] + gh[j], d.clip);                         \
                    h[j] = activation == 1 ? (v > 0 ? v : (T)0)                             \
                         : activation == 2 ? rec_sigmoid_##SUFFIX(v) : (T)tanh(v);          \
                }                                                                           \
                memcpy(y + rec_y_at(&d, t, dir, b), h, sizeof(T) * NH);                      \
            }                                                                               \
            if (len == 0) memset(h, 0, sizeof(T) * NH);                                      \
            memcpy(y_h + rec_state_at(&d, dir, b), h, sizeof(T) * NH);                       \
        }                                                                                   \
    }                                                                                       \
    free(work);                                                                             \
    return 0;                                                                               \
}

RECURRENT_KERNELS(float, f32)
RECURRENT_KERNELS(double, f64)

int recurrent_lstm(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                   int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 8 || n_outputs != 3 || n_attrs != 5) return 1;
    return inputs[0].dtype == MDSL_DTYPE_FLOAT64 ? lstm_f64(inputs, outputs, attrs)
                                                 : lstm_f32(inputs, outputs, attrs);
}

int recurrent_gru(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                  int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 6 || n_outputs != 2 || n_attrs != 5) return 1;
    return inputs[0].dtype == MDSL_DTYPE_FLOAT64 ? gru_f64(inputs, outputs, attrs)
                                                 : gru_f32(inputs, outputs, attrs);
}

int recurrent_rnn(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs,
                  int n_outputs, const double *attrs, int n_attrs) {
    if (n_inputs != 6 || n_outputs != 2 || n_attrs != 5) return 1;
    return inputs[0].dtype == MDSL_DTYPE_FLOAT64 ? rnn_f64(inputs, outputs, attrs)
                                                 : rnn_f32(inputs, outputs, attrs);
}
