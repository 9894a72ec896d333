/*
 * bellows.optimizer._windowed: the windowed DP's layers and backtrack, compiled.
 *
 * The accelerator of bellows/optimizer/windowed.py (as _heapq is of heapq): the same DP
 * over the same windows, the same float additions (E_{j-1}(g - k) + values[j, k], one
 * IEEE double addition each) and the same choices (the smallest k attaining the maximum:
 * only a strictly greater candidate replaces the best so far), so it returns what the NumPy
 * layers return, bit for bit. A NumPy layer is three to five calls of ~4 us each however
 * narrow the window; here a layer costs its cells, about a nanosecond each.
 *
 * run(rows, lo, hi, firsts, lasts, starts, choices, gpus) -> (found, objective)
 *
 *   rows     float64 [jobs, cols], C-contiguous: values[j, k]; -inf where not allowed
 *   lo, hi   int64 [jobs]: layer j's window, the GPUs rows 0..j may use (lo <= hi)
 *   firsts,  int64 [jobs]: the counts of row j that are tried (finite for the row and
 *   lasts      reaching the previous window); a state keeps its choice less firsts[j]
 *   starts   int64 [jobs + 1]: where layer j's choices begin in `choices`
 *   choices  writable unsigned 1-, 2- or 4-byte integers, starts[jobs] of them (filled)
 *   gpus     writable int64 [jobs]: the allocation (filled when found)
 *
 * found is False when the backtrack leaves a window or the optimum is -inf (the caller
 * then widens the windows, as windowed.py does). The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer rows, lo, hi, firsts, lasts, starts, choices, gpus;
    int held; /* how many of the above are acquired, in that order */
} Views;

static void release(Views *v) {
    Py_buffer *all[] = {&v->rows,   &v->lo,     &v->hi,      &v->firsts,
                        &v->lasts,  &v->starts, &v->choices, &v->gpus};
    for (int i = 0; i < v->held; i++) PyBuffer_Release(all[i]);
    v->held = 0;
}

static int is_int64(const Py_buffer *b) {
    return b->itemsize == 8 && b->format != NULL &&
           (strcmp(b->format, "l") == 0 || strcmp(b->format, "q") == 0 ||
            strcmp(b->format, "=q") == 0 || strcmp(b->format, "<q") == 0);
}

static int acquire(Views *v, PyObject *obj, Py_buffer *b, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    v->held++;
    return 0;
}

static int check_ints(const Py_buffer *b, Py_ssize_t n, const char *name) {
    if (!is_int64(b) || b->ndim != 1 || b->shape[0] != n) {
        PyErr_Format(PyExc_ValueError, "%s: expected int64 of length %zd", name, n);
        return -1;
    }
    return 0;
}

/* The DP proper, on raw arrays; returns 1 found, 0 not found, -1 out of memory. */
static int solve(const double *rows, Py_ssize_t jobs, Py_ssize_t cols, const int64_t *lo,
                 const int64_t *hi, const int64_t *firsts, const int64_t *lasts,
                 const int64_t *starts, void *choices, Py_ssize_t choice_size, int64_t *gpus,
                 double *objective) {
    int64_t top = 0;
    for (Py_ssize_t j = 0; j < jobs; j++) top = hi[j] > top ? hi[j] : top;
    double *prev = PyMem_RawMalloc(sizeof(double) * (size_t)(top + 1));
    double *cur = PyMem_RawMalloc(sizeof(double) * (size_t)(top + 1));
    if (prev == NULL || cur == NULL) {
        PyMem_RawFree(prev);
        PyMem_RawFree(cur);
        return -1;
    }
    prev[0] = 0.0; /* E_{-1}: no rows, no GPUs */
    int64_t plo = 0, phi = 0;
    for (Py_ssize_t j = 0; j < jobs; j++) {
        const double *row = rows + j * cols;
        const int64_t first = firsts[j], last = lasts[j];
        int64_t start = starts[j] - lo[j];
        for (int64_t g = lo[j]; g <= hi[j]; g++) {
            /* counts whose predecessor g - k lies in the previous window (-inf elsewhere) */
            int64_t k = g - phi > first ? g - phi : first;
            int64_t k_end = g - plo < last ? g - plo : last;
            double best = -INFINITY;
            int64_t pick = 0; /* all -inf: the first count, as argmax gives */
            for (; k <= k_end; k++) {
                double candidate = prev[g - k] + row[k];
                if (candidate > best) {
                    best = candidate;
                    pick = k - first;
                }
            }
            cur[g] = best;
            switch (choice_size) {
                case 1: ((uint8_t *)choices)[start + g] = (uint8_t)pick; break;
                case 2: ((uint16_t *)choices)[start + g] = (uint16_t)pick; break;
                default: ((uint32_t *)choices)[start + g] = (uint32_t)pick; break;
            }
        }
        double *swap = prev;
        prev = cur;
        cur = swap;
        plo = lo[j];
        phi = hi[j];
    }
    /* the first maximum of the last layer: the fewest GPUs in total */
    int64_t used = plo;
    for (int64_t g = plo + 1; g <= phi; g++) {
        if (prev[g] > prev[used]) used = g;
    }
    *objective = prev[used];
    PyMem_RawFree(prev);
    PyMem_RawFree(cur);
    int64_t g = used;
    for (Py_ssize_t j = jobs - 1; j >= 0; j--) {
        if (g < lo[j] || g > hi[j]) return 0;
        int64_t at = starts[j] + g - lo[j], pick;
        switch (choice_size) {
            case 1: pick = ((const uint8_t *)choices)[at]; break;
            case 2: pick = ((const uint16_t *)choices)[at]; break;
            default: pick = ((const uint32_t *)choices)[at]; break;
        }
        gpus[j] = pick + firsts[j];
        g -= gpus[j];
    }
    return g == 0 && *objective != -INFINITY;
}

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *objs[8];
    if (!PyArg_UnpackTuple(args, "run", 8, 8, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                           &objs[5], &objs[6], &objs[7])) {
        return NULL;
    }
    Views v = {.held = 0};
    Py_buffer *bufs[] = {&v.rows,  &v.lo,     &v.hi,      &v.firsts,
                         &v.lasts, &v.starts, &v.choices, &v.gpus};
    const char *names[] = {"rows",  "lo",     "hi",      "firsts",
                           "lasts", "starts", "choices", "gpus"};
    for (int i = 0; i < 8; i++) {
        if (acquire(&v, objs[i], bufs[i], i >= 6, names[i]) < 0) {
            release(&v);
            return NULL;
        }
    }
    if (v.rows.ndim != 2 || v.rows.itemsize != 8 || strcmp(v.rows.format, "d") != 0) {
        PyErr_SetString(PyExc_ValueError, "rows: expected float64 of two dimensions");
        release(&v);
        return NULL;
    }
    Py_ssize_t jobs = v.rows.shape[0], cols = v.rows.shape[1];
    if (check_ints(&v.lo, jobs, "lo") < 0 || check_ints(&v.hi, jobs, "hi") < 0 ||
        check_ints(&v.firsts, jobs, "firsts") < 0 || check_ints(&v.lasts, jobs, "lasts") < 0 ||
        check_ints(&v.starts, jobs + 1, "starts") < 0 || check_ints(&v.gpus, jobs, "gpus") < 0) {
        release(&v);
        return NULL;
    }
    const int64_t *lo = v.lo.buf, *hi = v.hi.buf, *firsts = v.firsts.buf, *lasts = v.lasts.buf;
    const int64_t *starts = v.starts.buf;
    Py_ssize_t size = v.choices.itemsize;
    int bad = jobs == 0 || (size != 1 && size != 2 && size != 4) || v.choices.ndim != 1 ||
              starts[0] != 0 || starts[jobs] != v.choices.shape[0];
    for (Py_ssize_t j = 0; j < jobs && !bad; j++) {
        /* every read and write stays inside the arrays: windows, counts, choice offsets */
        bad = lo[j] < 0 || lo[j] > hi[j] || starts[j + 1] - starts[j] != hi[j] - lo[j] + 1 ||
              firsts[j] < 0 || lasts[j] >= cols ||
              (lasts[j] - firsts[j] > (size == 1 ? 0xFF : size == 2 ? 0xFFFF : 0xFFFFFFFFLL));
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "windows: expected 0 <= lo <= hi, starts[j+1]-starts[j] = hi-lo+1, "
                        "0 <= firsts, lasts < columns, choices of 1, 2 or 4 bytes");
        release(&v);
        return NULL;
    }
    double objective = -INFINITY;
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = solve(v.rows.buf, jobs, cols, lo, hi, firsts, lasts, starts, v.choices.buf, size,
                  v.gpus.buf, &objective);
    Py_END_ALLOW_THREADS
    release(&v);
    if (found < 0) return PyErr_NoMemory();
    return Py_BuildValue("(Od)", found ? Py_True : Py_False, objective);
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS,
     "run(rows, lo, hi, firsts, lasts, starts, choices, gpus) -> (found, objective)\n\n"
     "The windowed DP's layers and backtrack (see bellows/optimizer/windowed.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_windowed",
    "The windowed DP's layers and backtrack, compiled (bellows.optimizer.windowed).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__windowed(void) { return PyModule_Create(&module); }
