/* tstream.engine._columns: a run's store into the active node's columns in C
   (optional; engine/stream.py Stream.append_columns, whose plain-Python path
   ``_append_chunks`` stays the fallback: TSTREAM_PURE_PYTHON=1, or no build),
   the columns of a pipelined run's commands (``run_columns``, below;
   fallback ``zip(*rows)``), and a node's block bodies at its seal
   (``block_bodies``, below; fallback engine/node.py ``_block_bodies_python``).

   store_run(buf, ends, tags, times, datas, tids, now_ns, run_times, start,
             room_entries, room_bytes) -> stored

   The node's columns (engine/node.py ActiveNode, with its tables): ``buf`` the
   payloads (a bytearray), ``ends`` the end of each payload with a leading 0
   (array 'I' or 'Q'), ``tags`` the tag ids (array 'I'), ``times`` (array 'q').
   Stores the pairs ``datas[start:]`` (a sequence of bytes-like payloads),
   as many as fit: at most ``room_entries`` (the node's free offsets), and while
   the payloads stored stay within ``room_bytes`` (``node_max_bytes`` minus the
   buffer's length; negative while a seal is owed), but one at least in a node
   that holds none (an entry bigger than the limit gets a node of its own).
   Their tag ids: ``tids``, one int for every pair, or a list or tuple indexed
   as ``datas``; their times: ``now_ns``, or ``run_times[j]`` (a buffer of
   int64, indexed as ``datas``) when that is not None.  Returns how many were
   stored (0: none fits, the node is to be sealed first), or -1 when the
   buffer would outgrow 4 GiB with 32-bit ends (nothing stored: the caller
   widens ``ends`` to 'Q' and calls again).

   With ``start`` 0 every payload of ``datas`` is checked before any change
   (TypeError, as ``b"".join`` words it); a later call for the rest of the
   same run (``start`` > 0) checks only its node's share, the rest having
   been checked by the first.  The tag ids and times are converted before
   any change too: an error leaves the node as it was.  The columns grow in one step each (three
   ``frombytes`` of buffers filled here, then the payloads copied into the
   bytearray); a failure at any step (MemoryError, BufferError while a column
   is exported) shrinks the columns grown before it back to their length,
   which allocates nothing (the size field of the array or bytearray, as their
   own small shrinks do): all or nothing.  The result int is made before the
   first change. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* array.array.frombytes, the method descriptor (module init): called with the
   column as its first argument, it skips the method's lookup on the instance
   that PyObject_VectorcallMethod makes at every call (three a store). */
static PyObject *array_frombytes;

/* The length of payload ``item`` (bytes, or any contiguous bytes-like), or -1
   with a TypeError worded as b"".join's (``index``: its place in the run). */
static Py_ssize_t
payload_length(PyObject *item, Py_ssize_t index)
{
    if (PyBytes_CheckExact(item))
        return PyBytes_GET_SIZE(item);
    Py_buffer view;
    if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) != 0) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Format(PyExc_TypeError, "sequence item %zd: expected a bytes-like object, %.80s found",
                         index, Py_TYPE(item)->tp_name);
        }
        return -1;
    }
    Py_ssize_t length = view.len;
    PyBuffer_Release(&view);
    return length;
}

/* The item size of array ``column`` (its buffer's), or -1 with an error. */
static Py_ssize_t
column_itemsize(PyObject *column)
{
    Py_buffer view;
    if (PyObject_GetBuffer(column, &view, PyBUF_FORMAT) != 0)
        return -1;
    Py_ssize_t itemsize = view.itemsize;
    PyBuffer_Release(&view);
    return itemsize;
}

/* Append ``filled`` (a bytes object of whole items) to array ``column``. */
static int
grow_column(PyObject *column, PyObject *filled)
{
    PyObject *call[2] = {column, filled};
    PyObject *done = PyObject_Vectorcall(array_frombytes, call, 2, NULL);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* Shrink a grown array back to ``length`` items: its size field only (the
   array keeps its allocation, as its own small shrinks do; allocates nothing). */
static void
shrink_column(PyObject *column, Py_ssize_t length)
{
    Py_SET_SIZE(column, length);
}

/* store_run with ``datas`` a tuple or a list. */
static PyObject *
store_sequence(PyObject *const *args, PyObject *datas)
{
    PyObject *buf = args[0], *ends = args[1], *tags = args[2], *times = args[3];
    PyObject *tids = args[5], *run_times = args[7];
    if (!PyByteArray_CheckExact(buf)) {
        PyErr_SetString(PyExc_TypeError, "store_run() takes the payloads' column as a bytearray");
        return NULL;
    }
    long long now_ns = PyLong_AsLongLong(args[6]);
    if (now_ns == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[8]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t room_entries = PyLong_AsSsize_t(args[9]);
    if (room_entries == -1 && PyErr_Occurred())
        return NULL;
    long long room_bytes = PyLong_AsLongLong(args[10]);
    if (room_bytes == -1 && PyErr_Occurred())
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(datas);
    Py_ssize_t npairs = PySequence_Fast_GET_SIZE(datas);
    if (start < 0 || start > npairs) {
        PyErr_SetString(PyExc_ValueError, "store_run() start out of range");
        return NULL;
    }
    Py_ssize_t end_size = column_itemsize(ends);
    if (end_size < 0)
        return NULL;
    if ((end_size != 4 && end_size != 8) || column_itemsize(tags) != 4 || column_itemsize(times) != 8) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "store_run() takes the columns array('I' or 'Q'), array('I'), array('q')");
        return NULL;
    }
    int one_tid = PyLong_CheckExact(tids);
    if (!one_tid && !((PyList_CheckExact(tids) || PyTuple_CheckExact(tids))
                      && PySequence_Fast_GET_SIZE(tids) >= npairs)) {
        PyErr_SetString(PyExc_TypeError, "store_run() takes an int or a sequence of tag ids as long as the payloads");
        return NULL;
    }

    /* Every payload checked; the run's share that fits: k pairs, ``total`` bytes. */
    int node_empty = Py_SIZE(times) == 0;
    Py_ssize_t k = 0;
    long long total = 0;
    int full = room_entries <= 0;
    for (Py_ssize_t j = start; j < npairs; j++) {
        /* A call for the rest of a run (start > 0) follows the run's first call
           (start 0), which checked every payload: it stops at its node's share,
           so that a run over many nodes costs O(pairs), not O(pairs * nodes). */
        if (full && start > 0)
            break;
        Py_ssize_t length = payload_length(items[j], j);
        if (length < 0)
            return NULL;
        if (!full) {
            if (total + length <= room_bytes || (k == 0 && node_empty)) {
                total += length;
                if (++k == room_entries)
                    full = 1;
            }
            else {
                full = 1;
            }
        }
    }
    if (k == 0)
        return PyLong_FromLong(0);
    Py_ssize_t buf_len = PyByteArray_GET_SIZE(buf);
    if (total > PY_SSIZE_T_MAX - buf_len)
        return PyErr_NoMemory();
    if (end_size == 4 && (unsigned long long)(buf_len + total) > 0xFFFFFFFFULL)
        return PyLong_FromLong(-1);

    Py_buffer times_view = {0};
    if (run_times != Py_None) {
        if (PyObject_GetBuffer(run_times, &times_view, PyBUF_FORMAT) != 0)
            return NULL;
        if (times_view.itemsize != 8 || times_view.len / 8 < npairs) {
            PyBuffer_Release(&times_view);
            PyErr_SetString(PyExc_TypeError, "store_run() takes run_times as int64 items, as many as the payloads");
            return NULL;
        }
    }
    PyObject *result = PyLong_FromSsize_t(k);
    PyObject *ends_add = PyBytes_FromStringAndSize(NULL, k * end_size);
    PyObject *tags_add = PyBytes_FromStringAndSize(NULL, k * 4);
    PyObject *times_add = PyBytes_FromStringAndSize(NULL, k * 8);
    if (result == NULL || ends_add == NULL || tags_add == NULL || times_add == NULL)
        goto fail;

    /* The three columns' new items, filled before any change. */
    {
        char *e = PyBytes_AS_STRING(ends_add);
        uint64_t position = (uint64_t)buf_len;
        for (Py_ssize_t j = start; j < start + k; j++) {
            PyObject *item = items[j];
            position += (uint64_t)(PyBytes_CheckExact(item) ? PyBytes_GET_SIZE(item)
                                                             : payload_length(item, j));
            if (end_size == 4) {
                uint32_t v = (uint32_t)position;
                memcpy(e, &v, 4);
            }
            else {
                memcpy(e, &position, 8);
            }
            e += end_size;
        }
        if (PyErr_Occurred())  /* (a bytes-like whose second look failed) */
            goto fail;
        uint32_t *t = (uint32_t *)PyBytes_AS_STRING(tags_add);
        if (one_tid) {
            unsigned long tid = PyLong_AsUnsignedLong(tids);
            if ((tid == (unsigned long)-1 && PyErr_Occurred()) || tid > 0xFFFFFFFFUL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_OverflowError, "tag id out of range");
                goto fail;
            }
            for (Py_ssize_t j = 0; j < k; j++)
                t[j] = (uint32_t)tid;
        }
        else {
            PyObject **ids = PySequence_Fast_ITEMS(tids);
            for (Py_ssize_t j = 0; j < k; j++) {
                unsigned long tid = PyLong_AsUnsignedLong(ids[start + j]);
                if ((tid == (unsigned long)-1 && PyErr_Occurred()) || tid > 0xFFFFFFFFUL) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_OverflowError, "tag id out of range");
                    goto fail;
                }
                t[j] = (uint32_t)tid;
            }
        }
        int64_t *m = (int64_t *)PyBytes_AS_STRING(times_add);
        if (run_times == Py_None) {
            for (Py_ssize_t j = 0; j < k; j++)
                m[j] = (int64_t)now_ns;
        }
        else {
            memcpy(m, (char *)times_view.buf + start * 8, (size_t)k * 8);
        }
    }

    /* The changes, each taken back if a later one fails. */
    Py_ssize_t ends_len = Py_SIZE(ends), tags_len = Py_SIZE(tags), times_len = Py_SIZE(times);
    if (grow_column(ends, ends_add) < 0)
        goto fail;
    if (grow_column(tags, tags_add) < 0) {
        shrink_column(ends, ends_len);
        goto fail;
    }
    if (grow_column(times, times_add) < 0) {
        shrink_column(ends, ends_len);
        shrink_column(tags, tags_len);
        goto fail;
    }
    if (PyByteArray_Resize(buf, buf_len + (Py_ssize_t)total) < 0) {
        shrink_column(ends, ends_len);
        shrink_column(tags, tags_len);
        shrink_column(times, times_len);
        goto fail;
    }
    {
        char *into = PyByteArray_AS_STRING(buf) + buf_len;
        for (Py_ssize_t j = start; j < start + k; j++) {
            PyObject *item = items[j];
            if (PyBytes_CheckExact(item)) {
                Py_ssize_t length = PyBytes_GET_SIZE(item);
                memcpy(into, PyBytes_AS_STRING(item), (size_t)length);
                into += length;
                continue;
            }
            Py_buffer view;
            if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) != 0) {  /* (checked above: cannot fail) */
                shrink_column(ends, ends_len);
                shrink_column(tags, tags_len);
                shrink_column(times, times_len);
                Py_SET_SIZE(buf, buf_len);  /* (as bytearray's own small shrink) */
                PyByteArray_AS_STRING(buf)[buf_len] = '\0';
                goto fail;
            }
            memcpy(into, view.buf, (size_t)view.len);
            into += view.len;
            PyBuffer_Release(&view);
        }
    }
    if (run_times != Py_None)
        PyBuffer_Release(&times_view);
    Py_DECREF(ends_add);
    Py_DECREF(tags_add);
    Py_DECREF(times_add);
    return result;

fail:
    if (run_times != Py_None)
        PyBuffer_Release(&times_view);
    Py_XDECREF(result);
    Py_XDECREF(ends_add);
    Py_XDECREF(tags_add);
    Py_XDECREF(times_add);
    return NULL;
}

static PyObject *
store_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "store_run() takes 11 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *datas = args[4];
    if (PyTuple_CheckExact(datas) || PyList_CheckExact(datas))
        return store_sequence(args, datas);
    /* any other sequence: as a list (one copy of the references) */
    PyObject *listed = PySequence_List(datas);
    if (listed == NULL)
        return NULL;
    PyObject *stored = store_sequence(args, listed);
    Py_DECREF(listed);
    return stored;
}

/* run_columns(rows, first) -> the columns ``first, first + 1, ...`` of ``rows``
   (a list of lists or tuples, all of one length: a pipelined run's argvs), each
   a tuple: what ``tuple(zip(*rows))[first:]`` gives, without zip's iterators
   (one tuple per column, filled row by row).  A row of another length, or an
   empty ``rows``: ValueError.  On an error nothing is left behind. */
static PyObject *
run_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "run_columns() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rows = args[0];
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "run_columns() takes a list or tuple of rows");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(args[1]);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t nrows = PySequence_Fast_GET_SIZE(rows);
    PyObject **row_items = PySequence_Fast_ITEMS(rows);
    if (nrows == 0 || !(PyList_CheckExact(row_items[0]) || PyTuple_CheckExact(row_items[0]))) {
        PyErr_SetString(PyExc_ValueError, "run_columns() takes one row at least, each a list or tuple");
        return NULL;
    }
    Py_ssize_t width = PySequence_Fast_GET_SIZE(row_items[0]);
    if (first < 0 || first > width) {
        PyErr_SetString(PyExc_ValueError, "run_columns() first column out of range");
        return NULL;
    }
    Py_ssize_t ncols = width - first;
    PyObject *columns = PyTuple_New(ncols);
    if (columns == NULL)
        return NULL;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        PyObject *column = PyTuple_New(nrows);
        if (column == NULL) {
            Py_DECREF(columns);
            return NULL;
        }
        PyTuple_SET_ITEM(columns, c, column);
    }
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject *row = row_items[r];
        if (!(PyList_CheckExact(row) || PyTuple_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != width) {
            Py_DECREF(columns);  /* (a tuple's unset items are NULL: its dealloc skips them) */
            PyErr_SetString(PyExc_ValueError, "run_columns() takes rows of one length, each a list or tuple");
            return NULL;
        }
        PyObject **words = PySequence_Fast_ITEMS(row) + first;
        for (Py_ssize_t c = 0; c < ncols; c++) {
            PyObject *word = words[c];
            Py_INCREF(word);
            PyTuple_SET_ITEM(PyTuple_GET_ITEM(columns, c), r, word);
        }
    }
    return columns;
}

/* block_bodies(buf, ends, tags, times, count, per_block) -> a list of bytes:
   the raw bodies of a node's blocks at its seal (engine/node.py
   ActiveNode.seal_begin; fallback ``_block_bodies_python`` there, the same
   bytes), on a little-endian host.  The node's first ``count`` entries, cut
   into blocks of ``per_block`` (the last one shorter); each body is the
   block's payloads, zeros up to a multiple of 8, its ends rebased to its first
   payload byte (``count + 1`` ends of the node, a leading 0; 4 or 8 bytes each,
   as ``ends``'s items), its tag ids (4 bytes) and times (8 bytes): what
   blocks.py ``_block_body`` makes of the block's slices.  The rebase is a
   subtraction per end here (in Python it was two big ints made from the
   bytes and one subtracted: ~2,000 instructions a read of 16 TWRITE).
   ValueError when the tables do not hold ``count`` entries, or the ends go
   backwards or past the buffer; nothing is left behind on an error. */
static PyObject *
block_bodies(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "block_bodies() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[4]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t per_block = PyLong_AsSsize_t(args[5]);
    if (per_block == -1 && PyErr_Occurred())
        return NULL;
    if (count < 1 || per_block < 1) {
        PyErr_SetString(PyExc_ValueError, "block_bodies() needs count and per_block >= 1");
        return NULL;
    }
    Py_buffer views[4];
    int held = 0;
    PyObject *bodies = NULL;
    for (; held < 4; held++) {
        if (PyObject_GetBuffer(args[held], &views[held], held ? PyBUF_FORMAT : PyBUF_SIMPLE) != 0)
            goto done;
    }
    Py_ssize_t esize = views[1].itemsize;
    if ((esize != 4 && esize != 8) || views[2].itemsize != 4 || views[3].itemsize != 8
            || views[1].len < (count + 1) * esize || views[2].len < count * 4 || views[3].len < count * 8) {
        PyErr_SetString(PyExc_ValueError, "block_bodies() takes ends ('I' or 'Q'), tags ('I') and times ('q') "
                        "of count entries");
        goto done;
    }
    const char *payloads = (const char *)views[0].buf;
    const char *ends = (const char *)views[1].buf;
    const char *tag_bytes = (const char *)views[2].buf;
    const char *time_bytes = (const char *)views[3].buf;
    /* the ends, checked once: from 0 up, never backwards, within the buffer */
    uint64_t previous = 0;
    for (Py_ssize_t i = 0; i <= count; i++) {
        uint64_t end;
        if (esize == 4) {
            uint32_t narrow;
            memcpy(&narrow, ends + i * 4, 4);
            end = narrow;
        } else {
            memcpy(&end, ends + i * 8, 8);
        }
        if (end < previous || end > (uint64_t)views[0].len) {
            PyErr_SetString(PyExc_ValueError, "block_bodies() ends go backwards or past the buffer");
            goto done;
        }
        previous = end;
    }
    Py_ssize_t nblocks = (count + per_block - 1) / per_block;
    bodies = PyList_New(nblocks);
    if (bodies == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < nblocks; k++) {
        Py_ssize_t a = k * per_block;
        Py_ssize_t c = a + per_block < count ? a + per_block : count;
        uint64_t pa, pc;
        if (esize == 4) {
            uint32_t narrow;
            memcpy(&narrow, ends + a * 4, 4);
            pa = narrow;
            memcpy(&narrow, ends + c * 4, 4);
            pc = narrow;
        } else {
            memcpy(&pa, ends + a * 8, 8);
            memcpy(&pc, ends + c * 8, 8);
        }
        Py_ssize_t payload_len = (Py_ssize_t)(pc - pa);
        Py_ssize_t pad = (-payload_len) & 7;
        Py_ssize_t n = c - a;
        PyObject *body = PyBytes_FromStringAndSize(NULL, payload_len + pad + (n + 1) * esize + n * 12);
        if (body == NULL) {
            Py_CLEAR(bodies);  /* (a list's unset items are NULL: its dealloc skips them) */
            goto done;
        }
        char *out = PyBytes_AS_STRING(body);
        memcpy(out, payloads + pa, (size_t)payload_len);
        out += payload_len;
        memset(out, 0, (size_t)pad);
        out += pad;
        if (esize == 4) {
            uint32_t base = (uint32_t)pa;
            for (Py_ssize_t i = a; i <= c; i++, out += 4) {
                uint32_t end;
                memcpy(&end, ends + i * 4, 4);
                end -= base;
                memcpy(out, &end, 4);
            }
        } else {
            for (Py_ssize_t i = a; i <= c; i++, out += 8) {
                uint64_t end;
                memcpy(&end, ends + i * 8, 8);
                end -= pa;
                memcpy(out, &end, 8);
            }
        }
        memcpy(out, tag_bytes + a * 4, (size_t)(n * 4));
        out += n * 4;
        memcpy(out, time_bytes + a * 8, (size_t)(n * 8));
        PyList_SET_ITEM(bodies, k, body);
    }
done:
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    return bodies;
}

/* ASCII "msgid" in any case, the word before a TWRITE's message id. */
static int
is_msgid_word(PyObject *word)
{
    if (!PyBytes_CheckExact(word) || PyBytes_GET_SIZE(word) != 5)
        return 0;
    const char *w = PyBytes_AS_STRING(word);
    return (w[0] | 0x20) == 'm' && (w[1] | 0x20) == 's' && (w[2] | 0x20) == 'g' && (w[3] | 0x20) == 'i'
           && (w[4] | 0x20) == 'd';
}

/* msgid_columns(rows) -> (tags, datas, ids), three tuples, for a pipelined run of
   ``TWRITE key tag entry MSGID id`` (rows: lists or tuples of six words) on one key
   with the word MSGID (any case) in each row; None when a row is of another length,
   its key is not the first row's (bytes compared), or its fifth word is not MSGID
   (commands/streams.py ``_msgid_run`` then goes command by command).  What
   ``run_columns(rows, 1)`` and the checks of the key and MSGID columns give,
   without building those two columns (a tuple each) to compare them.  On an error
   nothing is left behind. */
static PyObject *
msgid_columns(PyObject *module, PyObject *rows)
{
    (void)module;
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "msgid_columns() takes a list or tuple of rows");
        return NULL;
    }
    Py_ssize_t nrows = PySequence_Fast_GET_SIZE(rows);
    PyObject **row_items = PySequence_Fast_ITEMS(rows);
    if (nrows == 0)
        Py_RETURN_NONE;
    PyObject *row = row_items[0];
    if (!(PyList_CheckExact(row) || PyTuple_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != 6)
        Py_RETURN_NONE;
    PyObject *key = PySequence_Fast_ITEMS(row)[1];
    if (!PyBytes_CheckExact(key))
        Py_RETURN_NONE;
    Py_ssize_t key_size = PyBytes_GET_SIZE(key);
    const char *key_bytes = PyBytes_AS_STRING(key);
    for (Py_ssize_t r = 0; r < nrows; r++) {  /* every check first: nothing is built for a run that does not fit */
        row = row_items[r];
        if (!(PyList_CheckExact(row) || PyTuple_CheckExact(row)) || PySequence_Fast_GET_SIZE(row) != 6)
            Py_RETURN_NONE;
        PyObject **words = PySequence_Fast_ITEMS(row);
        PyObject *other = words[1];
        if (other != key && !(PyBytes_CheckExact(other) && PyBytes_GET_SIZE(other) == key_size
                              && memcmp(PyBytes_AS_STRING(other), key_bytes, (size_t)key_size) == 0))
            Py_RETURN_NONE;
        if (!is_msgid_word(words[4]))
            Py_RETURN_NONE;
    }
    PyObject *columns = PyTuple_New(3);
    if (columns == NULL)
        return NULL;
    for (Py_ssize_t c = 0; c < 3; c++) {
        PyObject *column = PyTuple_New(nrows);
        if (column == NULL) {
            Py_DECREF(columns);
            return NULL;
        }
        PyTuple_SET_ITEM(columns, c, column);
    }
    PyObject *tags = PyTuple_GET_ITEM(columns, 0), *datas = PyTuple_GET_ITEM(columns, 1);
    PyObject *ids = PyTuple_GET_ITEM(columns, 2);
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject **words = PySequence_Fast_ITEMS(row_items[r]);
        Py_INCREF(words[2]);
        PyTuple_SET_ITEM(tags, r, words[2]);
        Py_INCREF(words[3]);
        PyTuple_SET_ITEM(datas, r, words[3]);
        Py_INCREF(words[5]);
        PyTuple_SET_ITEM(ids, r, words[5]);
    }
    return columns;
}

static PyMethodDef columns_methods[] = {
    {"msgid_columns", (PyCFunction)msgid_columns, METH_O,
     "msgid_columns(rows) -> (tags, datas, ids) of a run of TWRITE key tag entry MSGID id on one key, else None."},
    {"store_run", (PyCFunction)(void (*)(void))store_run, METH_FASTCALL,
     "store_run(buf, ends, tags, times, datas, tids, now_ns, run_times, start, room_entries, room_bytes)\n"
     "-> how many pairs of datas[start:] were stored in the node's columns (0: none fits; -1: ends\n"
     "must be widened first). All or nothing on any error."},
    {"run_columns", (PyCFunction)(void (*)(void))run_columns, METH_FASTCALL,
     "run_columns(rows, first) -> tuple(zip(*rows))[first:] for rows (lists or tuples) of one length."},
    {"block_bodies", (PyCFunction)(void (*)(void))block_bodies, METH_FASTCALL,
     "block_bodies(buf, ends, tags, times, count, per_block) -> the raw bodies of a node's blocks\n"
     "(little-endian hosts; engine/node.py ActiveNode.seal_begin)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columns_module = {
    PyModuleDef_HEAD_INIT,
    "tstream.engine._columns",
    "A run's store into the active node's columns in C (optional: engine/stream.py falls back to Python).",
    0,
    columns_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    if (array_frombytes == NULL) {  /* (kept for the process's life, as the module's code is) */
        PyObject *array_module = PyImport_ImportModule("array");
        if (array_module == NULL)
            return NULL;
        PyObject *array_type = PyObject_GetAttrString(array_module, "array");
        Py_DECREF(array_module);
        if (array_type == NULL)
            return NULL;
        array_frombytes = PyObject_GetAttrString(array_type, "frombytes");
        Py_DECREF(array_type);
        if (array_frombytes == NULL)
            return NULL;
    }
    return PyModuleDef_Init(&columns_module);
}
