/* tstream.resp._speedups: the request parser's hot path in C (optional).

   parse_many(data, max_bulk) -> list of commands (each a list of bytes), or None
   parse_one(data, max_bulk)  -> one command (a list of bytes), or None

   Both take a read that is made of whole RESP multibulk requests of bulk strings
   and nothing else (parse_one: exactly one), in one call, as hiredis + the
   checks in resp/parser.py would return it.  Anything else gives None, and the
   caller falls back to the plain-Python/hiredis path, which frames it and gives
   Redis's exact protocol errors: an incomplete last command, inline commands,
   "*0" and "*-1", nested arrays, any element that is not "$", a header that is
   not an integer as Redis writes it (no sign, no leading zero, at most 18
   digits), a bulk length over max_bulk, two bytes other than CRLF after a bulk,
   a count larger than the bytes left could hold (checked before anything is
   allocated: "*2147483647" costs nothing).  Accepting less than hiredis is
   always safe: the fallback is today's path.

   No state is kept between calls; the GIL is held throughout.  On a MemoryError
   (or any Python error) everything built so far is released and NULL returned. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The smallest element: "$0\r\n\r\n". */
#define MIN_ELEMENT 6

enum { PARSED = 1, UNHANDLED = 0, FAILED = -1 };

/* A header integer at *pos as Redis writes it ("0" or [1-9][0-9]{0,17}), then
   CRLF; advances *pos past the CRLF.  0 when it is anything else or incomplete. */
static inline int
read_header_int(const char **pos, const char *end, long long *value)
{
    const char *p = *pos;
    if (p >= end)
        return 0;
    unsigned char c = (unsigned char)*p;
    long long v;
    if (c == '0') {
        v = 0;
        p++;
    }
    else if (c >= '1' && c <= '9') {
        const char *limit = p + 18;  /* 18 digits: no overflow of a long long */
        v = c - '0';
        p++;
        while (p < end && (c = (unsigned char)*p) >= '0' && c <= '9') {
            if (p >= limit)
                return 0;
            v = v * 10 + (c - '0');
            p++;
        }
    }
    else {
        return 0;
    }
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
        return 0;
    *pos = p + 2;
    *value = v;
    return 1;
}

/* One multibulk of bulk strings at *pos into *command (a new list); advances
   *pos past it.  UNHANDLED when the bytes there are anything else (or end
   before it does); FAILED with a Python error set.

   A word equal to the word at the same place in ``previous`` (the command
   before it in the read, or NULL) is that same bytes object, not a copy: a
   pipelined run repeats its command name, key and tag (or BATCH's id, FAST,
   flow and gap), and an object shared costs an incref where a new one costs
   an allocation and a free (bytes are immutable: nothing can tell but `is`,
   which the run paths then find true at once). */
static int
parse_command(const char **pos, const char *end, long long max_bulk, PyObject *previous, PyObject **command)
{
    const char *p = *pos;
    long long count, length;
    if (p >= end || *p != '*')
        return UNHANDLED;
    p++;
    if (!read_header_int(&p, end, &count) || count < 1 || count > (end - p) / MIN_ELEMENT)
        return UNHANDLED;  /* "*0", or more elements than the bytes left could hold */
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return FAILED;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (p >= end || *p != '$')
            goto unhandled;
        p++;
        if (!read_header_int(&p, end, &length) || length > max_bulk || length + 2 > end - p)
            goto unhandled;
        if (p[length] != '\r' || p[length + 1] != '\n')
            goto unhandled;
        PyObject *word = NULL;
        if (previous != NULL && i < PyList_GET_SIZE(previous)) {
            PyObject *same = PyList_GET_ITEM(previous, i);
            if (PyBytes_GET_SIZE(same) == (Py_ssize_t)length
                    && memcmp(PyBytes_AS_STRING(same), p, (size_t)length) == 0) {
                Py_INCREF(same);
                word = same;
            }
        }
        if (word == NULL) {
            word = PyBytes_FromStringAndSize(p, (Py_ssize_t)length);
            if (word == NULL) {
                Py_DECREF(list);  /* (the slots not filled yet are NULL: list_dealloc skips them) */
                return FAILED;
            }
        }
        PyList_SET_ITEM(list, i, word);
        p += length + 2;
    }
    *pos = p;
    *command = list;
    return PARSED;
unhandled:
    Py_DECREF(list);
    return UNHANDLED;
}

/* The arguments (data, max_bulk) as a byte range and a limit; 0 with an error set. */
static int
read_arguments(PyObject *const *args, Py_ssize_t nargs, const char *name, Py_buffer *view,
               long long *max_bulk)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes 2 arguments (%zd given)", name, nargs);
        return 0;
    }
    *max_bulk = PyLong_AsLongLong(args[1]);
    if (*max_bulk == -1 && PyErr_Occurred())
        return 0;
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return 0;
    return 1;
}

static PyObject *
parse_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long max_bulk;
    (void)module;
    if (!read_arguments(args, nargs, "parse_many", &view, &max_bulk))
        return NULL;
    const char *p = (const char *)view.buf, *end = p + view.len;
    PyObject *commands = NULL, *command = NULL;
    if (p >= end)
        goto unhandled;
    commands = PyList_New(0);
    if (commands == NULL)
        goto failed;
    while (p < end) {
        /* (the previous command stays alive in ``commands``: a borrowed reference) */
        int status = parse_command(&p, end, max_bulk, command, &command);
        if (status == UNHANDLED)
            goto unhandled;
        if (status == FAILED)
            goto failed;
        status = PyList_Append(commands, command);
        Py_DECREF(command);
        if (status < 0)
            goto failed;
    }
    PyBuffer_Release(&view);
    return commands;
unhandled:
    Py_XDECREF(commands);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(commands);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *
parse_one(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long max_bulk;
    (void)module;
    if (!read_arguments(args, nargs, "parse_one", &view, &max_bulk))
        return NULL;
    const char *p = (const char *)view.buf, *end = p + view.len;
    PyObject *command = NULL;
    int status = parse_command(&p, end, max_bulk, NULL, &command);
    PyBuffer_Release(&view);
    if (status == FAILED)
        return NULL;
    if (status == UNHANDLED)
        Py_RETURN_NONE;
    if (p != end) {  /* more than one command (or bytes after it): not ours */
        Py_DECREF(command);
        Py_RETURN_NONE;
    }
    return command;
}

static PyMethodDef speedups_methods[] = {
    {"parse_many", (PyCFunction)(void (*)(void))parse_many, METH_FASTCALL,
     "parse_many(data, max_bulk) -> list of commands (lists of bytes) when data is whole\n"
     "RESP multibulks of bulk strings, else None."},
    {"parse_one", (PyCFunction)(void (*)(void))parse_one, METH_FASTCALL,
     "parse_one(data, max_bulk) -> the command (a list of bytes) when data is exactly one\n"
     "RESP multibulk of bulk strings, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "tstream.resp._speedups",
    "The request parser's hot path in C (optional: resp/parser.py falls back to Python).",
    0,
    speedups_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
