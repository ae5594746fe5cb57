/* A ``BasicBolt``'s ``collector.emit([word])``, compiled: the fast path of ``_TaskBasicCollector``.

A split bolt emits several tuples per input, each a one-``str`` list on a stream fields-grouped
on that field. ``_TaskBasicCollector.emit`` (``_collector.py``) has a fast path for that shape:
the word's entry in the stream's memo (``_Memo``: ``value -> (its batch, the first equal
str)``), then two appends, the value and the input tuple's root. Written in Python, the frame
around those steps was as long as the steps. ``BasicEmit`` is a base class whose ``emit`` takes
that path in C and hands every other call, as it came, to the Python method (``_emit``):

    emit(values, stream=DEFAULT_STREAM)
        ``self`` of the bound collector class, ``values`` a ``list`` or ``tuple`` of one exact
        ``str``, ``self._fast[stream]`` a memo, ``self._input`` a ``Tuple`` of one tree
        (``_more`` is ``None``): the memo's entry (routed by its ``__missing__`` the first
        time), then ``batch[0].append(first_equal_str)`` and ``batch[1].append(root)``.
        Else ``self._emit(values, stream)``.

Nothing is changed before every check has passed, so a call the C path declines reaches the
Python method as if this were not there.

    bind(Tuple, collector_class, default_stream)

Reads the slots' offsets (``Tuple._more``, ``Tuple._root``, the collector's ``_input`` and
``_fast``) and the default stream's name, once at import.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_slots.h"
#include "providers/_native/_forward.h"

static PyTypeObject *tuple_type = NULL, *collector_type = NULL;
static PyObject *default_stream = NULL, *str_emit = NULL;
static Py_ssize_t off_more = -1, off_root = -1, off_input = -1, off_fast = -1;

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) ||
        !PyUnicode_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "bind() takes the Tuple class, the collector class and the default stream");
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)args[0], *c = (PyTypeObject *)args[1];
    Py_ssize_t more = slot_offset(t, "_more"), root = slot_offset(t, "_root");
    Py_ssize_t input = more < 0 || root < 0 ? -1 : slot_offset(c, "_input");
    Py_ssize_t fast = input < 0 ? -1 : slot_offset(c, "_fast");
    if (fast < 0) {
        return NULL;
    }
    Py_INCREF(t);
    Py_XSETREF(tuple_type, t);
    Py_INCREF(c);
    Py_XSETREF(collector_type, c);
    Py_INCREF(args[2]);
    Py_XSETREF(default_stream, args[2]);
    off_more = more;
    off_root = root;
    off_input = input;
    off_fast = fast;
    Py_RETURN_NONE;
}

/* The one ``str`` of ``values`` (borrowed), or NULL: not a one-``str`` list or tuple. */
static PyObject *
one_str(PyObject *values)
{
    PyObject *value;
    if (PyList_CheckExact(values) && PyList_GET_SIZE(values) == 1) {
        value = PyList_GET_ITEM(values, 0);
    }
    else if (PyTuple_CheckExact(values) && PyTuple_GET_SIZE(values) == 1) {
        value = PyTuple_GET_ITEM(values, 0);
    }
    else {
        return NULL;
    }
    return PyUnicode_CheckExact(value) ? value : NULL;
}

/* Append ``value`` and ``root`` to the batch of ``entry`` (a memo's ``(batch, str)``).
   1: done; 0: ``entry`` is not of that shape, nothing changed; -1: an error. */
static int
append(PyObject *entry, PyObject *root)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
        return 0;
    }
    PyObject *batch = PyTuple_GET_ITEM(entry, 0), *value = PyTuple_GET_ITEM(entry, 1);
    if (!PyList_CheckExact(batch) || PyList_GET_SIZE(batch) < 2) {
        return 0;
    }
    PyObject *values = PyList_GET_ITEM(batch, 0), *roots = PyList_GET_ITEM(batch, 1);
    if (!PyList_CheckExact(values) || !PyList_CheckExact(roots)) {
        return 0;
    }
    /* As the Python path does it: the value, then the root (each fails only out of memory). */
    if (PyList_Append(values, value) < 0 || PyList_Append(roots, root) < 0) {
        return -1;
    }
    return 1;
}

static PyObject *
basic_emit(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs < 1 || nargs > 2 || Py_TYPE(self) != collector_type) {
        return forward(self, str_emit, args, nargs, kwnames);
    }
    /* Only exact str keys are looked up here: hashing them runs no Python code. */
    PyObject *stream = nargs == 2 ? args[1] : default_stream;
    PyObject *value = one_str(args[0]);
    PyObject *anchor = slot(self, off_input), *fast = slot(self, off_fast);
    if (value == NULL || !PyUnicode_CheckExact(stream) || anchor == NULL || fast == NULL ||
        !PyDict_CheckExact(fast) || !PyObject_TypeCheck(anchor, tuple_type) ||
        slot(anchor, off_more) != Py_None || slot(anchor, off_root) == NULL) {
        return forward(self, str_emit, args, nargs, kwnames);
    }
    PyObject *memo = PyDict_GetItemWithError(fast, stream); /* borrowed */
    if (memo == NULL || !PyDict_Check(memo)) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return forward(self, str_emit, args, nargs, kwnames);
    }
    /* Held: a first emit of the value runs the memo's ``__missing__``, Python code. */
    PyObject *root = Py_NewRef(slot(anchor, off_root));
    PyObject *entry = PyDict_GetItemWithError(memo, value); /* borrowed */
    if (entry != NULL) {
        Py_INCREF(entry);
    }
    else if (!PyErr_Occurred()) {
        entry = PyObject_GetItem(memo, value); /* routed now */
    }
    int done = entry == NULL ? -1 : append(entry, root);
    Py_XDECREF(entry);
    Py_DECREF(root);
    if (done < 0) {
        return NULL;
    }
    if (done == 0) {
        return forward(self, str_emit, args, nargs, kwnames);
    }
    Py_RETURN_NONE;
}

static PyMethodDef emit_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))basic_emit, METH_FASTCALL | METH_KEYWORDS,
     "emit(values, stream='default'): emit anchored to the current input tuple."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BasicEmitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "statefulbolts.runtime._native._basicemit.BasicEmit",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "emit of a one-str list on a memoized stream, in C; all else in _emit.",
    .tp_methods = emit_methods,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "Take the Tuple class, the collector class and the default stream; see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "statefulbolts.runtime._native._basicemit",
    .m_doc = "A BasicBolt's emit of one str, compiled (see _basicemit.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__basicemit(void)
{
    str_emit = PyUnicode_InternFromString("_emit");
    if (str_emit == NULL || PyType_Ready(&BasicEmitType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&BasicEmitType);
    if (PyModule_AddObject(m, "BasicEmit", (PyObject *)&BasicEmitType) < 0) {
        Py_DECREF(&BasicEmitType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
