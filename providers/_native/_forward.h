/* Handing a call a compiled method declined to its Python twin, as it came.

The framework's compiled methods (``providers/_native/_fresh.c``,
``statefulbolts/runtime/_native/_basicemit.c``) each take one common case and give every other
call to a Python method of the same object that does the whole work. ``forward`` makes that
call with the arguments and keywords exactly as the compiled method received them, so a wrong
call raises what the Python method raises.
*/

#ifndef STATEFULBOLTS_NATIVE_FORWARD_H
#define STATEFULBOLTS_NATIVE_FORWARD_H

#include <Python.h>

/* ``self.<name>(*args, **kwargs)``, from a METH_FASTCALL | METH_KEYWORDS method's arguments. */
static PyObject *
forward(PyObject *self, PyObject *name, PyObject *const *args, Py_ssize_t nargs,
        PyObject *kwnames)
{
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[4];
    PyObject **stack = total < 4 ? small : PyMem_New(PyObject *, total + 1);
    if (stack == NULL) {
        return PyErr_NoMemory();
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) {
        stack[i + 1] = args[i];
    }
    PyObject *result = PyObject_VectorcallMethod(name, stack, (size_t)nargs + 1, kwnames);
    if (stack != small) {
        PyMem_Free(stack);
    }
    return result;
}

#endif
