/* ``LayeredKeyValueState.get`` and ``put`` for a ``str`` key of the fresh layer, compiled.

A per-tuple counting bolt calls ``state.get(word, 0)`` and ``state.put(word, count)`` once a
tuple. Where the key is a ``str`` whose value sits in the fresh layer (``_fresh``: ``str`` key
to an immutable scalar, not yet encoded; see ``providers/_layered.py``), each call is one dict
operation; written in Python, each was also a frame and its type checks, and the two cost a
counting task more than its whole row loop. ``FreshLayer`` is a base class whose ``get`` and
``put`` do that case in C and hand every other call, as it came, to the Python methods that do
the whole work:

    get(key, default=None)
        ``key`` a ``str`` (exactly) with a value in ``self._fresh``: that value.
        Else ``self._get(key, default)``.

    put(key, value)
        ``key`` a ``str`` already in ``self._fresh``, ``self._fast`` true, and ``value`` a scalar
        the fresh layer keeps as it is: an ``int`` within a C ``long long``, a ``float``, a
        ``bool``, an ASCII ``str`` or a ``bytes``, each of exactly that type: set it there.
        Else ``self._put(key, value)``.

Each case is narrower than the Python fast path it shortcuts (``_put`` also takes a key new to
the fresh layer, and ``int`` up to 2**64 - 1), so a call does the same either way; only the
frame is saved. The class has no fields: ``_fresh`` and ``_fast`` are read from the instance
like any attribute, so a subclass keeps its ``__dict__``, rebinds ``_fresh`` freely and pickles
as before.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_forward.h"

static PyObject *str_fresh, *str_fast, *str_get, *str_put;

/* ``self._fresh`` if it is a dict (a new reference), else NULL; never leaves an error set. */
static PyObject *
fresh_of(PyObject *self)
{
    PyObject *fresh = PyObject_GetAttr(self, str_fresh);
    if (fresh == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (!PyDict_CheckExact(fresh)) {
        Py_DECREF(fresh);
        return NULL;
    }
    return fresh;
}

/* One of ``low`` to ``high`` arguments, or a TypeError naming the public method. */
static int
arity(const char *name, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t low, Py_ssize_t high,
      const char *wants)
{
    Py_ssize_t given = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (given < low || given > high) {
        PyErr_Format(PyExc_TypeError, "%s() takes %s (%zd given)", name, wants, given);
        return 0;
    }
    return 1;
}

static PyObject *
layer_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames == NULL && (nargs == 1 || nargs == 2) && PyUnicode_CheckExact(args[0])) {
        PyObject *fresh = fresh_of(self);
        if (fresh != NULL) {
            PyObject *value = PyDict_GetItemWithError(fresh, args[0]); /* borrowed */
            if (value != NULL && value != Py_None) {
                Py_INCREF(value);
                Py_DECREF(fresh);
                return value;
            }
            Py_DECREF(fresh);
            if (PyErr_Occurred()) {
                return NULL;
            }
        }
    }
    if (!arity("get", nargs, kwnames, 1, 2, "a key and an optional default")) {
        return NULL;
    }
    return forward(self, str_get, args, nargs, kwnames);
}

/* Whether ``value`` is a scalar ``put`` may keep in the fresh layer here (see above). */
static int
keeps(PyObject *value)
{
    PyTypeObject *kind = Py_TYPE(value);
    if (kind == &PyLong_Type) {
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (n == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return overflow == 0;
    }
    if (kind == &PyFloat_Type || kind == &PyBool_Type) {
        return 1;
    }
    if (kind == &PyUnicode_Type) {
        return PyUnicode_IS_ASCII(value) && PyUnicode_GET_LENGTH(value) <= 0xFFFFFFFFLL;
    }
    if (kind == &PyBytes_Type) {
        return PyBytes_GET_SIZE(value) <= 0xFFFFFFFFLL;
    }
    return 0;
}

static PyObject *
layer_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames == NULL && nargs == 2 && PyUnicode_CheckExact(args[0]) && keeps(args[1])) {
        PyObject *fast = PyObject_GetAttr(self, str_fast);
        if (fast == NULL) {
            PyErr_Clear();
        }
        else {
            int on = fast == Py_True;
            Py_DECREF(fast);
            PyObject *fresh = on ? fresh_of(self) : NULL;
            if (fresh != NULL) {
                int known = PyDict_Contains(fresh, args[0]);
                int done = known == 1 && PyDict_SetItem(fresh, args[0], args[1]) == 0;
                Py_DECREF(fresh);
                if (done) {
                    Py_RETURN_NONE;
                }
                if (PyErr_Occurred()) {
                    return NULL;
                }
            }
        }
    }
    if (!arity("put", nargs, kwnames, 2, 2, "a key and a value")) {
        return NULL;
    }
    return forward(self, str_put, args, nargs, kwnames);
}

static PyMethodDef layer_methods[] = {
    {"get", (PyCFunction)(void (*)(void))layer_get, METH_FASTCALL | METH_KEYWORDS,
     "get(key, default=None): the value of ``key``, or ``default`` when it is absent."},
    {"put", (PyCFunction)(void (*)(void))layer_put, METH_FASTCALL | METH_KEYWORDS,
     "put(key, value): set ``key``; ``None`` is not a value (use ``delete``)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FreshLayerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "providers._native._fresh.FreshLayer",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "get and put of a str key in the fresh layer, in C; all else in _get and _put.",
    .tp_methods = layer_methods,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "providers._native._fresh",
    .m_doc = "LayeredKeyValueState's get and put of a fresh str key, compiled.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__fresh(void)
{
    str_fresh = PyUnicode_InternFromString("_fresh");
    str_fast = PyUnicode_InternFromString("_fast");
    str_get = PyUnicode_InternFromString("_get");
    str_put = PyUnicode_InternFromString("_put");
    if (!str_fresh || !str_fast || !str_get || !str_put || PyType_Ready(&FreshLayerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&FreshLayerType);
    if (PyModule_AddObject(m, "FreshLayer", (PyObject *)&FreshLayerType) < 0) {
        Py_DECREF(&FreshLayerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
