/*
 * bellows.scaling._batches: the best per-GPU batch of every (job, GPU count), compiled.
 *
 * The accelerator of _best_local_batches in bellows/scaling/tables.py: for job j and
 * count k, among j's candidate per-GPU batches m (ascending) inside [lo, hi], the one with
 * the most samples per second k*m / t_iter(m, k), and that rate. The same float
 * operations on the same values as the scalar rule of bellows/scaling/timing.py:
 *
 *   t_iter = t_proc + t_ar                                 when the overlap g is 1
 *          = pow(pow(t_proc, g) + pow(t_ar, g), 1 / g)     when t_ar > 0
 *          = t_proc                                        otherwise
 *   rate   = ((double)k * (double)m) / t_iter
 *
 * (pow(t_proc, g) and pow(t_ar, g) come in, taken once per entry), and the same choice:
 * the first maximum in candidate order (only a strictly greater rate replaces the best).
 * The NumPy path evaluates every usable (job, k, candidate) triple in gathered arrays: ~80
 * ns a triple; here one pow and one division, and no triple outside [lo, hi] is visited.
 *
 * best(cand, sizes, t_proc, t_proc_g, t_ar, t_ar_g, lo, hi, feasible, g, rate, batch)
 *
 *   cand       int64 [n, c]: job j's candidates, ascending, in its first sizes[j] entries
 *   sizes      int64 [n]
 *   t_proc,    float64 [n, c]: t_proc at each candidate, and its g-th power
 *   t_proc_g
 *   t_ar,      float64 [n, cols]: the Allreduce time at each k, and its g-th power
 *   t_ar_g
 *   lo, hi     int64 [n, cols]: the per-GPU batches allowed at k
 *   feasible   bool [n, cols]: whether (j, k) is weighed at all
 *   g          the cluster's overlap (a float > 0)
 *   rate       writable float64 [n, cols]: the best rate (left as it is where none is usable)
 *   batch      writable int64 [n, cols]: the m that gives it (likewise)
 *
 * Every array must be C-contiguous. The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { CAND, SIZES, T_PROC, T_PROC_G, T_AR, T_AR_G, LO, HI, FEASIBLE, RATE, BATCH, COUNT };

static const char *names[COUNT] = {"cand", "sizes", "t_proc", "t_proc_g", "t_ar",  "t_ar_g",
                                   "lo",   "hi",    "feasible", "rate",   "batch"};

typedef struct {
    Py_buffer b[COUNT];
    int held; /* how many are acquired, in enum order */
} Views;

static void release(Views *v) {
    for (int i = 0; i < v->held; i++) PyBuffer_Release(&v->b[i]);
    v->held = 0;
}

/* 'i' int64, 'd' float64, '?' bool (or one unsigned byte) */
static int kind_ok(const Py_buffer *b, char kind) {
    const char *f = b->format;
    if (f == NULL) return 0;
    if (f[0] == '=' || f[0] == '<' || f[0] == '@') f++;
    switch (kind) {
        case 'i': return b->itemsize == 8 && (strcmp(f, "l") == 0 || strcmp(f, "q") == 0);
        case 'd': return b->itemsize == 8 && strcmp(f, "d") == 0;
        default: return b->itemsize == 1 && (strcmp(f, "?") == 0 || strcmp(f, "B") == 0);
    }
}

static int shaped(const Py_buffer *b, char kind, int ndim, Py_ssize_t rows, Py_ssize_t cols,
                  const char *name) {
    if (!kind_ok(b, kind) || b->ndim != ndim || b->shape[0] != rows ||
        (ndim == 2 && b->shape[1] != cols)) {
        const char *what = kind == 'i' ? "int64" : kind == 'd' ? "float64" : "bool";
        if (ndim == 1) {
            PyErr_Format(PyExc_ValueError, "%s: expected %s of shape (%zd,)", name, what, rows);
        } else {
            PyErr_Format(PyExc_ValueError, "%s: expected %s of shape (%zd, %zd)", name, what,
                         rows, cols);
        }
        return -1;
    }
    return 0;
}

/* The first candidate of a row >= m (its size if none): candidates ascend. */
static Py_ssize_t first_at_least(const int64_t *cand, Py_ssize_t size, int64_t m) {
    Py_ssize_t left = 0, right = size;
    while (left < right) {
        Py_ssize_t mid = left + (right - left) / 2;
        if (cand[mid] < m) {
            left = mid + 1;
        } else {
            right = mid;
        }
    }
    return left;
}

static void weigh(const Views *v, Py_ssize_t n, Py_ssize_t c, Py_ssize_t cols, double g) {
    const int64_t *cand = v->b[CAND].buf, *sizes = v->b[SIZES].buf;
    const double *t_proc = v->b[T_PROC].buf, *t_proc_g = v->b[T_PROC_G].buf;
    const double *t_ar = v->b[T_AR].buf, *t_ar_g = v->b[T_AR_G].buf;
    const int64_t *lo = v->b[LO].buf, *hi = v->b[HI].buf;
    const uint8_t *feasible = v->b[FEASIBLE].buf;
    double *rate = v->b[RATE].buf;
    int64_t *batch = v->b[BATCH].buf;
    const int add = g == 1.0;
    const double inverse = 1.0 / g;
    for (Py_ssize_t j = 0; j < n; j++) {
        const int64_t *ms = cand + j * c;
        const double *tp = t_proc + j * c, *tpg = t_proc_g + j * c;
        for (Py_ssize_t k = 0; k < cols; k++) {
            Py_ssize_t at = j * cols + k;
            if (!feasible[at]) continue;
            const int64_t low = lo[at] > 1 ? lo[at] : 1, high = hi[at];
            const double ar = t_ar[at], ar_g = t_ar_g[at];
            double best = rate[at];
            int64_t pick = batch[at];
            for (Py_ssize_t i = first_at_least(ms, sizes[j], low); i < sizes[j]; i++) {
                const int64_t m = ms[i];
                if (m > high) break;
                double t;
                if (add) {
                    t = tp[i] + ar;
                } else if (ar > 0) {
                    t = pow(tpg[i] + ar_g, inverse);
                } else {
                    t = tp[i];
                }
                const double x = ((double)k * (double)m) / t;
                if (x > best) {
                    best = x;
                    pick = m;
                }
            }
            rate[at] = best;
            batch[at] = pick;
        }
    }
}

static PyObject *best(PyObject *self, PyObject *args) {
    PyObject *objs[COUNT];
    double g;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOdOO:best", &objs[CAND], &objs[SIZES], &objs[T_PROC],
                          &objs[T_PROC_G], &objs[T_AR], &objs[T_AR_G], &objs[LO], &objs[HI],
                          &objs[FEASIBLE], &g, &objs[RATE], &objs[BATCH])) {
        return NULL;
    }
    if (!(g > 0.0) || !isfinite(g)) {
        PyErr_Format(PyExc_ValueError, "g: expected a finite number > 0, got %R",
                     PyTuple_GET_ITEM(args, 9));
        return NULL;
    }
    Views v = {.held = 0};
    for (int i = 0; i < COUNT; i++) {
        int writable = i == RATE || i == BATCH;
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &v.b[i], flags) < 0) {
            PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s array", names[i],
                         writable ? " writable" : "");
            release(&v);
            return NULL;
        }
        v.held++;
    }
    Py_buffer *b = v.b;
    if (b[CAND].ndim != 2 || b[RATE].ndim != 2) { /* they give the shapes of the others */
        PyErr_SetString(PyExc_ValueError, "cand, rate: expected two dimensions");
        release(&v);
        return NULL;
    }
    Py_ssize_t n = b[CAND].shape[0], c = b[CAND].shape[1], cols = b[RATE].shape[1];
    if (shaped(&b[CAND], 'i', 2, n, c, "cand") < 0 || shaped(&b[SIZES], 'i', 1, n, 0, "sizes") < 0 ||
        shaped(&b[T_PROC], 'd', 2, n, c, "t_proc") < 0 ||
        shaped(&b[T_PROC_G], 'd', 2, n, c, "t_proc_g") < 0 ||
        shaped(&b[T_AR], 'd', 2, n, cols, "t_ar") < 0 ||
        shaped(&b[T_AR_G], 'd', 2, n, cols, "t_ar_g") < 0 ||
        shaped(&b[LO], 'i', 2, n, cols, "lo") < 0 || shaped(&b[HI], 'i', 2, n, cols, "hi") < 0 ||
        shaped(&b[FEASIBLE], '?', 2, n, cols, "feasible") < 0 ||
        shaped(&b[RATE], 'd', 2, n, cols, "rate") < 0 ||
        shaped(&b[BATCH], 'i', 2, n, cols, "batch") < 0) {
        release(&v);
        return NULL;
    }
    const int64_t *sizes = b[SIZES].buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (sizes[j] < 0 || sizes[j] > c) { /* every read stays inside the rows */
            PyErr_Format(PyExc_ValueError, "sizes[%zd]: expected 0 <= size <= %zd, got %lld", j,
                         c, (long long)sizes[j]);
            release(&v);
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    weigh(&v, n, c, cols, g);
    Py_END_ALLOW_THREADS
    release(&v);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"best", best, METH_VARARGS,
     "best(cand, sizes, t_proc, t_proc_g, t_ar, t_ar_g, lo, hi, feasible, g, rate, batch)\n\n"
     "The best per-GPU batch of every (job, k), into rate and batch (see "
     "bellows/scaling/tables.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batches",
    "The best per-GPU batch of every (job, GPU count), compiled (bellows.scaling.tables).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__batches(void) { return PyModule_Create(&module); }
