/* A stable merge sort of the indices 0..n-1, shared by the "c" bindings that sort
 * (detection.c: NonMaxSuppression's boxes by score; filtering.c: Unique's slices). The
 * Python modules put this text before their own source; the guard keeps one copy when a
 * graph compiles both sources into one translation unit.
 */
#ifndef MDSL_OPS_STABLE_SORT
#define MDSL_OPS_STABLE_SORT
#include <string.h>

/* Whether index i must come strictly before index j (ties keep their index order). */
typedef int (*ops_index_before)(const void *context, int64_t i, int64_t j);

/* order[] = 0..n-1 sorted stably by `before`, bottom-up; `tmp` holds n entries. */
static void ops_stable_sort(ops_index_before before, const void *context, int64_t *order,
                            int64_t *tmp, int64_t n) {
    int64_t *src = order, *dst = tmp;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            const int64_t mid = lo + width < n ? lo + width : n;
            const int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t a = lo, b = mid, at = lo;
            while (a < mid && b < hi)
                dst[at++] = before(context, src[b], src[a]) ? src[b++] : src[a++];
            while (a < mid) dst[at++] = src[a++];
            while (b < hi) dst[at++] = src[b++];
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != order) memcpy(order, src, (size_t)n * sizeof *order);
}
#endif
