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

/* ---- encode_stream_id_run: the replies of a pipelined run of XADD (helper xadd10) ----

   encode_stream_id_run(ms, first_seq, count) -> bytes: the stream ids
   "ms-first_seq", "ms-(first_seq + 1)", ... (count of them) as RESP bulk
   strings, concatenated; b"" when count <= 0.  ms and first_seq are unsigned
   64-bit integers and so is the last sequence number (else OverflowError /
   ValueError, and the caller's pure-Python encoder is the reference:
   resp/xentries.py).  One allocation, the result; nothing is kept. */

/* The number of decimal digits of v (1 for 0). */
static inline int
decimal_width(unsigned long long v)
{
    int width = 1;
    while (v >= 10) {
        v /= 10;
        width++;
    }
    return width;
}

/* Write v's `width` decimal digits at out. */
static inline void
write_decimal(char *out, unsigned long long v, int width)
{
    char *p = out + width;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
}

static PyObject *
encode_stream_id_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_stream_id_run(ms, first_seq, count) takes 3 arguments");
        return NULL;
    }
    unsigned long long ms = PyLong_AsUnsignedLongLong(args[0]);
    if (ms == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long first = PyLong_AsUnsignedLongLong(args[1]);
    if (first == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count <= 0)
        return PyBytes_FromStringAndSize("", 0);
    if ((unsigned long long)(count - 1) > ~0ULL - first) {
        PyErr_SetString(PyExc_ValueError, "encode_stream_id_run: the last sequence number is over 64 bits");
        return NULL;
    }
    unsigned long long last = first + (unsigned long long)(count - 1);
    int ms_width = decimal_width(ms);
    /* Every id's bulk string: "$" len "\r\n" ms "-" seq "\r\n"; the sizes by width of seq. */
    Py_ssize_t size = 0;
    {
        unsigned long long seq = first;
        int width = decimal_width(seq);
        unsigned long long bound = 1;  /* 10**width, or 0 past 64 bits */
        for (int i = 0; i < width; i++)
            bound = (bound > ~0ULL / 10) ? 0 : bound * 10;
        for (;;) {
            unsigned long long stop = (bound == 0 || bound - 1 > last) ? last : bound - 1;
            unsigned long long n = stop - seq + 1;
            int id_len = ms_width + 1 + width;
            Py_ssize_t each = 1 + decimal_width((unsigned long long)id_len) + 2 + id_len + 2;
            if ((unsigned long long)n > (unsigned long long)((PY_SSIZE_T_MAX - size) / each))
                return PyErr_NoMemory();
            size += (Py_ssize_t)n * each;
            if (stop == last)
                break;
            seq = stop + 1;
            width++;
            bound = (bound > ~0ULL / 10) ? 0 : bound * 10;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(out);
    char head[48];  /* "$" len "\r\n" ms "-": at most 1 + 2 + 2 + 20 + 1 */
    int head_len = 0, head_width = -1;
    for (unsigned long long seq = first;; seq++) {
        int width = decimal_width(seq);
        if (width != head_width) {  /* the head changes with the id's length only */
            int id_len = ms_width + 1 + width;
            int len_width = decimal_width((unsigned long long)id_len);
            head[0] = '$';
            write_decimal(head + 1, (unsigned long long)id_len, len_width);
            head[1 + len_width] = '\r';
            head[2 + len_width] = '\n';
            write_decimal(head + 3 + len_width, ms, ms_width);
            head[3 + len_width + ms_width] = '-';
            head_len = 4 + len_width + ms_width;
            head_width = width;
        }
        memcpy(p, head, (size_t)head_len);
        p += head_len;
        write_decimal(p, seq, width);
        p += width;
        p[0] = '\r';
        p[1] = '\n';
        p += 2;
        if (seq == last)
            break;
    }
    return out;
}

static PyMethodDef speedups_methods[] = {
    {"parse_many", (PyCFunction)(void (*)(void))parse_many, METH_FASTCALL,
     "parse_many(data, max_bulk) -> list of commands (lists of bytes) when data is whole\n"
     "RESP multibulks of bulk strings, else None."},
    {"parse_one", (PyCFunction)(void (*)(void))parse_one, METH_FASTCALL,
     "parse_one(data, max_bulk) -> the command (a list of bytes) when data is exactly one\n"
     "RESP multibulk of bulk strings, else None."},
    {"encode_stream_id_run", (PyCFunction)(void (*)(void))encode_stream_id_run, METH_FASTCALL,
     "encode_stream_id_run(ms, first_seq, count) -> the ids ms-first_seq, ms-(first_seq+1), ...\n"
     "(count of them) as RESP bulk strings, concatenated (resp/xentries.py's, in C)."},
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
