/* The inner loops of ``_rows.feed_rows`` and ``feed_basic``, compiled: rows that join a run.

``feed_rows`` fills one reused ``Tuple`` with each row, calls the bolt's ``execute`` and, when the
bolt acked that tuple exactly once and kept it nowhere, takes the ack back out of the list it
went into: the row joins the run that is later acked as one batch. Written in Python, that
bookkeeping (the zip over the columns, the three slot stores, the reference count, the length
and identity checks, the ``del``) cost as much per row as a counting bolt's own ``execute``
frame. This does the same steps in C for as many rows as keep joining the run, and hands the
first row that does not back to the Python loop, which deals with it as before.

    stretch(execute, acked, values, roots, t, start, stop, first, single) -> (i, error)

- ``execute``: the bolt's data target, called with ``t`` once per row.
- ``acked``: the list an ack appends its tuple to (``_rows.RowAcks.acked``), a ``list``.
- ``values``: the batch's values, a ``list`` (a bare value per row when ``single``, else the
  row's list of values); ``roots``: each row's root, a ``list`` or an ``array('q')``.
- ``t``: the loop's ``Tuple`` (its ``values``, ``_root`` and ``_edge`` slots are set per row,
  ``_edge`` to ``first + i``).
- Rows ``start`` to ``stop`` (exclusive) are run. ``i`` is ``stop`` when every one joined the
  run; else the row that did not (executed, its acks left in ``acked``). ``error``: ``None``,
  or the exception row ``i``'s ``execute`` raised (its traceback starts in the bolt's frame),
  returned rather than raised so that the caller raises it from its own frame, knowing the row:
  the traceback then reads as the Python loop's did (``_rows._raised_executing``).

    stretch_basic(execute, collector, values, roots, t, start, stop, first, single) -> (i, error)

The same for ``_rows.feed_basic``: a ``BasicBolt``'s ``execute(t, collector)``, whose acks are
the loop's (every row it runs normally joins the run). It stops after the first row whose
``execute`` raised (``error``: any exception; the caller fails the tuple on a
``FailedException`` and goes on) or kept ``t`` (``error`` ``None``, ``i`` < ``stop``: the caller
takes a new ``Tuple`` and goes on from ``i + 1``).

Which references the loop itself holds on ``t`` is read once on entry (the caller's and the
call's own); a row joins the run only if, after ``execute``, ``t``'s count is exactly that plus
the one ack. As in Python, this needs CPython with the GIL, up to 3.13 (``_rows.REUSABLE``).
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_slots.h"

/* Byte offsets of the Tuple's slots, and the type they belong to (``bind``). */
static PyTypeObject *tuple_type = NULL;
static Py_ssize_t off_values = -1, off_root = -1, off_edge = -1;

static PyObject *
bind(PyObject *module, PyObject *type)
{
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the Tuple class");
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)type;
    Py_ssize_t v = slot_offset(t, "values"), r = slot_offset(t, "_root"), e = slot_offset(t, "_edge");
    if (v < 0 || r < 0 || e < 0) {
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(tuple_type, t);
    off_values = v;
    off_root = r;
    off_edge = e;
    Py_RETURN_NONE;
}

/* Store ``value`` (a new reference, stolen) in the slot at ``offset`` of ``obj``. */
static inline void
store(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject **slot = (PyObject **)((char *)obj + offset);
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* What both loops take: the batch's columns, rows start..stop, the ledger number of row 0. */
typedef struct {
    PyObject *values; /* a list */
    PyObject *roots;  /* a list, or NULL when ``ids`` holds them */
    const long long *ids;
    Py_buffer view;
    Py_ssize_t start, stop, first;
    int single;
} Batch;

static void
release(Batch *b)
{
    if (b->view.obj != NULL) {
        PyBuffer_Release(&b->view);
    }
}

/* Read ``values, roots, start, stop, first, single`` from ``args``; 0, or -1 with an error set. */
static int
read_batch(PyObject *const *args, PyObject *t, Batch *b)
{
    memset(b, 0, sizeof(*b));
    b->values = args[0];
    b->start = PyLong_AsSsize_t(args[2]);
    b->stop = PyLong_AsSsize_t(args[3]);
    b->first = PyLong_AsSsize_t(args[4]);
    b->single = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || b->single < 0) {
        return -1;
    }
    if (tuple_type == NULL || Py_TYPE(t) != tuple_type) {
        PyErr_SetString(PyExc_TypeError, "the loop takes a Tuple of the bound class");
        return -1;
    }
    if (!PyList_CheckExact(b->values)) {
        PyErr_SetString(PyExc_TypeError, "the loop takes the values as a list");
        return -1;
    }
    PyObject *roots = args[1];
    Py_ssize_t n_roots;
    if (PyList_CheckExact(roots)) {
        b->roots = roots;
        n_roots = PyList_GET_SIZE(roots);
    }
    else {
        if (PyObject_GetBuffer(roots, &b->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            return -1;
        }
        if (b->view.itemsize != 8 || b->view.format == NULL || strcmp(b->view.format, "q") != 0) {
            release(b);
            PyErr_SetString(PyExc_TypeError, "the loop takes the roots as a list or an array('q')");
            return -1;
        }
        b->ids = (const long long *)b->view.buf;
        n_roots = b->view.len / 8;
    }
    if (b->start < 0 || b->stop > PyList_GET_SIZE(b->values) || b->stop > n_roots) {
        release(b);
        PyErr_SetString(PyExc_IndexError, "the loop was given rows beyond the batch");
        return -1;
    }
    return 0;
}

/* Fill ``t`` with row ``i``: ``_edge``, ``_root``, then ``values``. 0, or -1 with an error set. */
static int
fill(PyObject *t, Batch *b, Py_ssize_t i)
{
    if (i >= PyList_GET_SIZE(b->values)) {
        PyErr_SetString(PyExc_IndexError, "the batch's values shrank under the loop");
        return -1;
    }
    PyObject *edge = PyLong_FromSsize_t(b->first + i);
    if (edge == NULL) {
        return -1;
    }
    store(t, off_edge, edge);
    PyObject *root;
    if (b->ids != NULL) {
        root = PyLong_FromLongLong(b->ids[i]);
        if (root == NULL) {
            return -1;
        }
    }
    else {
        root = Py_NewRef(PyList_GET_ITEM(b->roots, i));
    }
    store(t, off_root, root);
    PyObject *value = PyList_GET_ITEM(b->values, i);
    PyObject *row;
    if (b->single) {
        row = PyList_New(1);
        if (row == NULL) {
            return -1;
        }
        PyList_SET_ITEM(row, 0, Py_NewRef(value));
    }
    else {
        row = Py_NewRef(value);
    }
    store(t, off_values, row);
    return 0;
}

/* ``(i, None)``, or ``(i, the exception raised)`` with the error indicator cleared. */
static PyObject *
ended(Py_ssize_t i, Batch *b, int raised)
{
    release(b);
    if (!raised) {
        return Py_BuildValue("(nO)", i, Py_None);
    }
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(error, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    PyObject *result = Py_BuildValue("(nO)", i, error);
    Py_XDECREF(error);
    return result;
}

static PyObject *
stretch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "stretch() takes 9 arguments");
        return NULL;
    }
    PyObject *execute = args[0], *acked = args[1], *t = args[4];
    PyObject *const batch_args[6] = {args[2], args[3], args[5], args[6], args[7], args[8]};
    if (!PyList_CheckExact(acked)) {
        PyErr_SetString(PyExc_TypeError, "stretch() takes acked as a list");
        return NULL;
    }
    Batch b;
    if (read_batch(batch_args, t, &b) < 0) {
        return NULL;
    }
    Py_ssize_t alone = Py_REFCNT(t); /* the caller's and this call's */
    for (Py_ssize_t i = b.start; i < b.stop; i++) {
        if (fill(t, &b, i) < 0) {
            return ended(i, &b, 1);
        }
        Py_ssize_t before = PyList_GET_SIZE(acked);
        PyObject *result = PyObject_CallOneArg(execute, t);
        if (result == NULL) {
            return ended(i, &b, 1);
        }
        Py_DECREF(result);
        Py_ssize_t after = PyList_GET_SIZE(acked);
        if (after == before + 1 && PyList_GET_ITEM(acked, after - 1) == t
            && Py_REFCNT(t) == alone + 1) {
            /* Acked once, kept nowhere: take the ack back out (``del acked[-1]``). */
            Py_SET_SIZE(acked, after - 1);
            Py_DECREF(t);
            continue;
        }
        return ended(i, &b, 0);
    }
    return ended(b.stop, &b, 0);
}

static PyObject *
stretch_basic(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "stretch_basic() takes 9 arguments");
        return NULL;
    }
    PyObject *execute = args[0], *t = args[4];
    PyObject *const batch_args[6] = {args[2], args[3], args[5], args[6], args[7], args[8]};
    PyObject *call[2] = {t, args[1]}; /* execute(t, collector) */
    Batch b;
    if (read_batch(batch_args, t, &b) < 0) {
        return NULL;
    }
    Py_ssize_t alone = Py_REFCNT(t); /* the caller's, this call's and the collector's */
    for (Py_ssize_t i = b.start; i < b.stop; i++) {
        if (fill(t, &b, i) < 0) {
            return ended(i, &b, 1);
        }
        PyObject *result = PyObject_Vectorcall(execute, call, 2, NULL);
        if (result == NULL) {
            return ended(i, &b, 1);
        }
        Py_DECREF(result);
        if (Py_REFCNT(t) != alone) {
            return ended(i, &b, 0); /* the bolt kept this one */
        }
    }
    return ended(b.stop, &b, 0);
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "Take the Tuple class whose slots ``stretch`` fills."},
    {"stretch", (PyCFunction)(void (*)(void))stretch, METH_FASTCALL,
     "Run rows while each joins the run; see the module's docstring."},
    {"stretch_basic", (PyCFunction)(void (*)(void))stretch_basic, METH_FASTCALL,
     "Run a BasicBolt's rows while none raises or is kept; see the module's docstring."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "statefulbolts.runtime._native._rowloop",
    "The inner loop of _rows.feed_rows, compiled (see _rowloop.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__rowloop(void)
{
    return PyModule_Create(&module);
}
