/* tstream.engine._window: the duplicate window's run claim in C (optional;
   engine/ingest.py Ingest.claim_run, with ``_claim_ids_python`` as its fallback).

   claim_ids(table, ids, offset, runs, stored_ns) -> True or False

   Enters ``ids`` (a tuple of message ids) into ``table`` (the window's dict: id ->
   offset), ``ids[i]`` with the value ``offset + i``, when none of them is in the
   table and none repeats within ``ids``, and appends the run's expiry record
   ``(stored_ns, ids, offset)`` to ``runs`` (a deque): True.  Else the table is
   left as it was, nothing appended, and False.  The pure-Python fallback is
   engine/ingest.py ``_claim_ids_python``.

   One PyDict_SetDefault per id: the lookup and the insert in one probe; the id
   was new exactly when the table grew by one.  At the first id already there
   (stored before, or repeated in the run), the ids entered so far are deleted
   again; they were all new, so each is the key entered now.  On an error
   (memory: an int, the table's resize, the record; an unhashable id) the same
   taking back, then the error.  Deleting a key whose hash is cached allocates
   nothing.

   The record and ``ids`` are kept for the window's length and hold only bytes
   and ints, which cannot be part of a reference cycle: they are untracked by
   the cyclic collector at once (what a collection would do to them, as
   _PyTuple_MaybeUntrack, after walking them first). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

static PyObject *append_name;  /* "append", interned (module init) */

static void
take_back(PyObject *table, PyObject *ids, Py_ssize_t entered)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);  /* (an error being raised survives the deletes) */
    for (Py_ssize_t j = 0; j < entered; j++) {
        if (PyDict_DelItem(table, PyTuple_GET_ITEM(ids, j)) < 0)
            PyErr_Clear();  /* (cannot happen: the key is there, its hash known) */
    }
    PyErr_Restore(type, value, traceback);
}

static PyObject *
claim_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "claim_ids() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *table = args[0], *ids = args[1], *runs = args[3], *stored_ns = args[4];
    /* (exact ints: the record below, kept untracked by the collector, must not hold
       an object that could reach back to it) */
    if (!PyDict_CheckExact(table) || !PyTuple_CheckExact(ids) || !PyLong_CheckExact(args[2])
            || !PyLong_CheckExact(stored_ns)) {
        PyErr_SetString(PyExc_TypeError, "claim_ids() takes a dict, a tuple, an int, a deque and an int");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[2]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(ids);
    if (offset < 0 || offset > LLONG_MAX - count) {
        PyErr_SetString(PyExc_OverflowError, "claim_ids() offset out of range");
        return NULL;
    }
    Py_ssize_t size = PyDict_GET_SIZE(table);
    int all_bytes = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *mid = PyTuple_GET_ITEM(ids, i);
        all_bytes &= PyBytes_CheckExact(mid);
        PyObject *value = PyLong_FromLongLong(offset + i);
        if (value == NULL) {
            take_back(table, ids, i);
            return NULL;
        }
        PyObject *found = PyDict_SetDefault(table, mid, value);  /* (borrowed) */
        Py_DECREF(value);  /* (the table holds it when entered) */
        if (found == NULL) {
            take_back(table, ids, i);
            return NULL;
        }
        if (PyDict_GET_SIZE(table) == size) {  /* in the table already, or repeated within ids */
            take_back(table, ids, i);
            Py_RETURN_FALSE;
        }
        size++;
    }
    PyObject *record = PyTuple_Pack(3, stored_ns, ids, args[2]);
    if (record == NULL) {
        take_back(table, ids, count);
        return NULL;
    }
    if (all_bytes) {
        if (PyObject_GC_IsTracked(ids))
            PyObject_GC_UnTrack(ids);
        PyObject_GC_UnTrack(record);
    }
    PyObject *done = PyObject_CallMethodOneArg(runs, append_name, record);
    Py_DECREF(record);
    if (done == NULL) {
        take_back(table, ids, count);
        return NULL;
    }
    Py_DECREF(done);
    Py_RETURN_TRUE;
}

static PyMethodDef window_methods[] = {
    {"claim_ids", (PyCFunction)(void (*)(void))claim_ids, METH_FASTCALL,
     "claim_ids(table, ids, offset, runs, stored_ns) -> True with ids[i] entered as offset + i\n"
     "and (stored_ns, ids, offset) appended to runs when no id of the tuple ids is in the dict\n"
     "table nor repeated; else False, the table and runs unchanged."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef window_module = {
    PyModuleDef_HEAD_INIT,
    "tstream.engine._window",
    "The duplicate window's run claim in C (optional: engine/ingest.py falls back to Python).",
    0,
    window_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__window(void)
{
    if (append_name == NULL) {  /* (kept for the process's life, as the module's code is) */
        append_name = PyUnicode_InternFromString("append");
        if (append_name == NULL)
            return NULL;
    }
    return PyModuleDef_Init(&window_module);
}
