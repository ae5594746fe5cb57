/* Reading a Python class's ``__slots__`` by their byte offsets, for the modules of this package.

A slot of a class with ``__slots__`` is a member descriptor on the class; its offset in an
instance is fixed once the class exists, so a module asks for it once (when it is bound to the
class) and then reads the slot as a struct field, without an attribute lookup.
*/

#ifndef STATEFULBOLTS_NATIVE_SLOTS_H
#define STATEFULBOLTS_NATIVE_SLOTS_H

#include <Python.h>
#include <structmember.h>

/* The offset of slot ``name`` of ``type`` (found along its MRO); -1 with an error set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, const char *name)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        return -1;
    }
    if (!PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
        Py_DECREF(descr);
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    Py_ssize_t offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    return offset;
}

/* The object in the slot at ``offset`` of ``obj`` (borrowed); NULL when the slot is unset. */
static inline PyObject *
slot(PyObject *obj, Py_ssize_t offset)
{
    return *(PyObject **)((char *)obj + offset);
}

#endif
