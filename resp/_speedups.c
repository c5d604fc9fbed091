/* tstream.resp._speedups: the request parser's hot path in C (optional), and,
   each further down and separate code, the writer of DGET pages
   (encode_table_page), the replies of a pipelined XADD run
   (encode_stream_id_run), a fast batch run's batch-seq check (decimal_run)
   and its columns (fast_run_columns), a TWRITE run's replies
   (encode_integer_run), integer replies and TACK's offsets
   (integer_reply, plain_positive_ints) and TREAD's replies (encode_entries).

   parse_many(data, max_bulk) -> list of commands (each a list of bytes), or None
   parse_one(data, max_bulk)  -> one command (a list of bytes), or None
   (and parse_read / run_end, near the end: one call for a read of either shape,
   and where a run of like commands ends)

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

/* The bulk string element at *pos ("$<length>\r\n<bytes>\r\n"), *pos advanced past
   it: its word, a new reference, or NULL with *status UNHANDLED (not a whole element
   within max_bulk) or FAILED (an error set).  The word is ``previous``'s word ``i``
   itself (*shared 1) when ``previous`` has one with the same bytes, else a new bytes
   object (*shared 0); see parse_command.  (parse_command and parse_like share it.) */
static inline PyObject *
read_word(const char **pos, const char *end, long long max_bulk, PyObject *previous, Py_ssize_t i,
          int *shared, int *status)
{
    const char *p = *pos;
    long long length;
    *shared = 0;
    *status = UNHANDLED;
    if (p >= end || *p != '$')
        return NULL;
    p++;
    if (!read_header_int(&p, end, &length) || length > max_bulk || length + 2 > end - p)
        return NULL;
    if (p[length] != '\r' || p[length + 1] != '\n')
        return NULL;
    *pos = p + length + 2;
    if (previous != NULL && i < PyList_GET_SIZE(previous)) {
        PyObject *same = PyList_GET_ITEM(previous, i);
        if (PyBytes_GET_SIZE(same) == (Py_ssize_t)length
                && memcmp(PyBytes_AS_STRING(same), p, (size_t)length) == 0) {
            Py_INCREF(same);
            *shared = 1;
            return same;
        }
    }
    *status = FAILED;  /* (if the copy fails) */
    return PyBytes_FromStringAndSize(p, (Py_ssize_t)length);
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
    long long count;
    if (p >= end || *p != '*')
        return UNHANDLED;
    p++;
    if (!read_header_int(&p, end, &count) || count < 1 || count > (end - p) / MIN_ELEMENT)
        return UNHANDLED;  /* "*0", or more elements than the bytes left could hold */
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return FAILED;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int shared, status;
        PyObject *word = read_word(&p, end, max_bulk, previous, i, &shared, &status);
        if (word == NULL) {
            Py_DECREF(list);  /* (the slots not filled yet are NULL: list_dealloc skips them) */
            return status;
        }
        PyList_SET_ITEM(list, i, word);
    }
    *pos = p;
    *command = list;
    return PARSED;
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

/* ---- parse_like: a command parsed against the one before it (helper fast15) ----

   A pipelined run repeats most of its words at the same places (BATCH's name,
   key, id, subject, payload, FAST, flow and gap; TWRITE's name, key and tag),
   and the element bytes of a repeated word are the same bytes ("$5\r\nBATCH\r\n"),
   next to one another.  ``Shape`` keeps where each element of a parsed command
   starts and which of its words were the command before's; the next command
   with as many words compares each stretch of such words with one memcmp of
   the bytes they had in the command before (still in the read's buffer: the
   run's commands are consecutive) and, when they match, takes those words'
   objects without reading their headers.  A stretch that differs is parsed
   word by word, as parse_command does.  Byte-equal complete elements parse to
   equal words: the result is parse_command's (the same objects shared). */

#define SHAPE_WORDS 16  /* longer commands: no shape, parse_command's path */

typedef struct {
    Py_ssize_t count;                    /* the command's words; 0: no shape to use */
    const char *start[SHAPE_WORDS + 1];  /* each element's '$' (see parse_like: where needed), then the end */
    unsigned char shared[SHAPE_WORDS];   /* word i was the command before's object */
} Shape;

/* parse_command with ``previous`` described by ``before`` (count 0: no shape)
   and the parsed command's shape written to ``shape`` (a different Shape). */
static int
parse_like(const char **pos, const char *end, long long max_bulk, PyObject *previous, const Shape *before,
           Shape *shape, PyObject **command)
{
    const char *p = *pos;
    long long count;
    shape->count = 0;
    if (p >= end || *p != '*')
        return UNHANDLED;
    p++;
    if (!read_header_int(&p, end, &count) || count < 1 || count > (end - p) / MIN_ELEMENT)
        return UNHANDLED;
    if (count > SHAPE_WORDS || previous == NULL)
        return parse_command(pos, end, max_bulk, previous, command);
    int like = before->count == (Py_ssize_t)count && PyList_GET_SIZE(previous) == (Py_ssize_t)count;
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return FAILED;
    Py_ssize_t plain_until = 0;  /* words before this index are parsed one by one (a stretch differed) */
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count;) {
        if (like && i >= plain_until && before->shared[i]) {
            Py_ssize_t j = i + 1;
            while (j < (Py_ssize_t)count && before->shared[j])
                j++;
            const char *from = before->start[i];
            size_t size = (size_t)(before->start[j] - from);
            if ((size_t)(end - p) >= size && memcmp(p, from, size) == 0) {
                /* Only the stretch's start is kept: the next command's stretches
                   start at a word whose start was kept (this one, or a word parsed
                   on its own) and end at one parsed on its own, or at the end. */
                shape->start[i] = p;
                for (Py_ssize_t k = i; k < j; k++) {
                    PyObject *same = PyList_GET_ITEM(previous, k);
                    Py_INCREF(same);
                    PyList_SET_ITEM(list, k, same);
                    shape->shared[k] = 1;
                }
                p += size;
                i = j;
                continue;
            }
            plain_until = j;
        }
        shape->start[i] = p;
        int shared, status;
        PyObject *word = read_word(&p, end, max_bulk, previous, i, &shared, &status);
        if (word == NULL) {
            Py_DECREF(list);  /* (the slots not filled yet are NULL: list_dealloc skips them) */
            return status;
        }
        shape->shared[i] = (unsigned char)shared;
        PyList_SET_ITEM(list, i, word);
        i++;
    }
    shape->start[count] = p;
    shape->count = (Py_ssize_t)count;
    *pos = p;
    *command = list;
    return PARSED;
}

/* The commands from *pos to ``end`` appended to the list ``commands``, whose last
   item ``previous`` (or NULL) may share its words with the next one: PARSED
   (then *pos is ``end``), UNHANDLED or FAILED (an error set); what was appended
   stays in ``commands`` either way, for the caller to release.  Each command
   after the first is parsed against the one before it (parse_like). */
static int
append_commands(const char **pos, const char *end, long long max_bulk, PyObject *commands,
                PyObject *previous)
{
    const char *p = *pos;
    PyObject *command = previous;
    Shape shapes[2];
    shapes[0].count = 0;  /* (``previous``'s shape is not known) */
    int at = 0;
    while (p < end) {
        /* (the previous command stays alive in ``commands``: a borrowed reference) */
        int status = parse_like(&p, end, max_bulk, command, &shapes[at], &shapes[at ^ 1], &command);
        if (status != PARSED)
            return status;
        at ^= 1;
        status = PyList_Append(commands, command);
        Py_DECREF(command);
        if (status < 0)
            return FAILED;
    }
    *pos = p;
    return PARSED;
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
    PyObject *commands = NULL;
    if (p >= end)
        goto unhandled;
    commands = PyList_New(0);
    if (commands == NULL)
        goto failed;
    int status = append_commands(&p, end, max_bulk, commands, NULL);
    if (status == UNHANDLED)
        goto unhandled;
    if (status == FAILED)
        goto failed;
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

/* ------------------------------------------------------------------------
   encode_table_page: a DGET page from the log's tables, in one buffer
   (pages10; separate from the parser above: it shares nothing with it).

   encode_table_page(protocol, stream, tables, subjects, pending, last_seq, budget)
       -> (bytes, n)

   ``tables``: a list of (buf, ends, tags, times, i, j, first_seq), each the
   decoded tables of a block (or of the active node) as engine Stream.read_tables
   gives them: entry k (i <= k < j) has the payload buf[ends[k]:ends[k + 1]],
   the subject subjects[tags[k]] (a list or tuple of bytes), the time times[k] (ns since the epoch) and
   the seq first_seq + k - i.  ``buf`` is any byte buffer, ``ends`` an array of
   'I' or 'Q', ``tags`` of 'I', ``times`` of 'q'.  The bytes are
   ``b"*%d\r\n" % (n + 1)`` then the first n messages as
   resp.encode_batched_message(protocol, stream, subject, seq, time as RFC 3339
   with 9 fraction digits, data, pending - k - 1, the previous message's seq
   (``last_seq`` for the first)) formats them: what resp.encode_message_page
   writes before the end-of-batch map.  n: the entries taken, in order, while
   the subjects' and payloads' bytes taken so far are under ``budget``
   (MAX_BYTES: the entry that reaches it is the last).

   Two passes: the first checks every index and sums the size, the second
   writes into one bytes object of exactly that size.  The times' second
   prefixes ("YYYY-MM-DDTHH:MM:SS", a civil date from the days since the
   epoch) are kept from message to message while the second stays the same.
   Nothing is kept between calls; the GIL is held throughout.  On a bad
   argument TypeError/ValueError, on a MemoryError NULL, nothing leaked.
   ------------------------------------------------------------------------ */

typedef struct {
    PyObject *buf_obj, *ends_obj, *tags_obj, *times_obj;
    Py_buffer buf, ends, tags, times;
    int held;  /* how many of the four views are held */
    Py_ssize_t i, j;
    long long first_seq;
    int ends_wide;  /* ends of 8 bytes ('Q'), else 4 ('I') */
} TableView;

static void
table_release(TableView *t)
{
    if (t->held > 3) PyBuffer_Release(&t->times);
    if (t->held > 2) PyBuffer_Release(&t->tags);
    if (t->held > 1) PyBuffer_Release(&t->ends);
    if (t->held > 0) PyBuffer_Release(&t->buf);
    t->held = 0;
}

static int
array_format_is(const Py_buffer *view, char code, Py_ssize_t itemsize)
{
    const char *f = view->format;
    if (f == NULL || view->itemsize != itemsize || view->ndim != 1)
        return 0;
    if (*f == '@' || *f == '=')
        f++;
    return f[0] == code && f[1] == '\0';
}

/* The table ``item`` into ``t`` (its four views held), its indexes checked
   against its arrays: 0 with an error set. */
static int
table_acquire(PyObject *item, TableView *t)
{
    t->held = 0;
    /* Exact ints only: converting anything else could run Python code (__index__)
       that changes the list of tables while it is read through borrowed references. */
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 7 || !PyLong_CheckExact(PyTuple_GET_ITEM(item, 4))
            || !PyLong_CheckExact(PyTuple_GET_ITEM(item, 5)) || !PyLong_CheckExact(PyTuple_GET_ITEM(item, 6))) {
        PyErr_SetString(PyExc_TypeError, "a table is a tuple (buf, ends, tags, times, i, j, first_seq)");
        return 0;
    }
    t->i = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 4));
    if (t->i == -1 && PyErr_Occurred())
        return 0;
    t->j = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 5));
    if (t->j == -1 && PyErr_Occurred())
        return 0;
    t->first_seq = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 6));
    if (t->first_seq == -1 && PyErr_Occurred())
        return 0;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &t->buf, PyBUF_SIMPLE) < 0)
        return 0;
    t->held = 1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &t->ends, PyBUF_FORMAT | PyBUF_ND) < 0)
        goto failed;
    t->held = 2;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 2), &t->tags, PyBUF_FORMAT | PyBUF_ND) < 0)
        goto failed;
    t->held = 3;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 3), &t->times, PyBUF_FORMAT | PyBUF_ND) < 0)
        goto failed;
    t->held = 4;
    if (array_format_is(&t->ends, 'I', 4))
        t->ends_wide = 0;
    else if (array_format_is(&t->ends, 'Q', 8) || array_format_is(&t->ends, 'L', 8))
        t->ends_wide = 1;
    else {
        PyErr_SetString(PyExc_TypeError, "ends must be an array of 'I' or 'Q'");
        goto failed;
    }
    if (!array_format_is(&t->tags, 'I', 4) || !(array_format_is(&t->times, 'q', 8)
                                                || array_format_is(&t->times, 'l', 8))) {
        PyErr_SetString(PyExc_TypeError, "tags must be an array of 'I', times of 'q'");
        goto failed;
    }
    if (t->i < 0 || t->j < t->i || t->first_seq < 0 || t->first_seq > LLONG_MAX - (t->j - t->i)
            || t->j >= t->ends.len / t->ends.itemsize
            || t->j > t->tags.len / 4 || t->j > t->times.len / 8) {
        PyErr_SetString(PyExc_ValueError, "a table's range is outside its arrays");
        goto failed;
    }
    return 1;
failed:
    table_release(t);
    return 0;
}

static inline unsigned long long
table_end(const TableView *t, Py_ssize_t k)
{
    return t->ends_wide ? ((const unsigned long long *)t->ends.buf)[k]
                        : ((const unsigned int *)t->ends.buf)[k];
}

static inline int
decimal_length(long long v)
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int n = v < 0 ? 2 : 1;
    while (u >= 10) {
        u /= 10;
        n++;
    }
    return n;
}

static inline char *
write_decimal(char *p, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0)
        *p++ = '-';
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *p++ = digits[--n];
    return p;
}

static inline char *
write_bytes(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define WRITE_LITERAL(p, s) write_bytes((p), (s), sizeof(s) - 1)

/* v (0-99) as two digits, then ``after`` unless it is 0. */
static inline void
put_two_digits(char *out, int v, char after)
{
    out[0] = (char)('0' + v / 10);
    out[1] = (char)('0' + v % 10);
    if (after)
        out[2] = after;
}

/* "YYYY-MM-DDTHH:MM:SS" of ``sec`` seconds since the epoch (UTC, proleptic
   Gregorian: what time.strftime of time.gmtime writes for years 1000-9999;
   int64 ns reach years 1677-2262 only).  H. Hinnant's days-to-civil. */
static void
format_second(long long sec, char out[19])
{
    long long days = sec / 86400, sod = sec % 86400;
    if (sod < 0) {
        sod += 86400;
        days--;
    }
    long long z = days + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    long long doe = z - era * 146097;
    long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long y = yoe + era * 400;
    long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long long mp = (5 * doy + 2) / 153;
    long long d = doy - (153 * mp + 2) / 5 + 1;
    long long m = mp < 10 ? mp + 3 : mp - 9;
    if (m <= 2)
        y++;
    int hh = (int)(sod / 3600), mm = (int)(sod / 60 % 60), ss = (int)(sod % 60);
    out[0] = (char)('0' + y / 1000 % 10);
    out[1] = (char)('0' + y / 100 % 10);
    put_two_digits(out + 2, (int)(y % 100), '-');
    put_two_digits(out + 5, (int)m, '-');
    put_two_digits(out + 8, (int)d, 'T');
    put_two_digits(out + 11, hh, ':');
    put_two_digits(out + 14, mm, ':');
    put_two_digits(out + 17, ss, 0);
}

/* A message's bytes but for the head, the subject, the payload and its four
   integers: "$" "\r\n" (subject) "\r\n$3\r\nseq\r\n:" (seq)
   "\r\n$4\r\ntime\r\n$30\r\n" (30: the time) "\r\n$4\r\ndata\r\n$" (length)
   "\r\n" (payload) "\r\n$11\r\nnum_pending\r\n:" (n) "\r\n$8\r\nlast_seq\r\n:" (seq) "\r\n". */
#define LITERAL_LENGTH(s) ((Py_ssize_t)sizeof(s) - 1)
#define MESSAGE_FIXED (LITERAL_LENGTH("$\r\n") + LITERAL_LENGTH("\r\n$3\r\nseq\r\n:") \
                       + LITERAL_LENGTH("\r\n$4\r\ntime\r\n$30\r\n") + 30 \
                       + LITERAL_LENGTH("\r\n$4\r\ndata\r\n$") + LITERAL_LENGTH("\r\n") \
                       + LITERAL_LENGTH("\r\n$11\r\nnum_pending\r\n:") \
                       + LITERAL_LENGTH("\r\n$8\r\nlast_seq\r\n:") + LITERAL_LENGTH("\r\n"))

static PyObject *
encode_table_page(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "encode_table_page() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    long protocol = PyLong_AsLong(args[0]);
    if (protocol == -1 && PyErr_Occurred())
        return NULL;
    if (protocol != 2 && protocol != 3) {
        PyErr_SetString(PyExc_ValueError, "protocol must be 2 or 3");
        return NULL;
    }
    PyObject *stream = args[1], *tables = args[2], *subjects = args[3];
    if (!PyBytes_Check(stream) || !PyList_Check(tables) || !(PyList_Check(subjects) || PyTuple_Check(subjects))) {
        PyErr_SetString(PyExc_TypeError, "stream must be bytes, tables a list, subjects a list or tuple");
        return NULL;
    }
    long long pending = PyLong_AsLongLong(args[4]);
    if (pending == -1 && PyErr_Occurred())
        return NULL;
    long long last_seq = PyLong_AsLongLong(args[5]);
    if (last_seq == -1 && PyErr_Occurred())
        return NULL;
    long long budget = PyLong_AsLongLong(args[6]);
    if (budget == -1 && PyErr_Occurred())
        return NULL;

    /* The head of every message: the map's header, the stream, the subject's key. */
    const char *map_header = protocol == 2 ? "*14\r\n" : "%7\r\n";
    Py_ssize_t stream_len = PyBytes_GET_SIZE(stream);
    Py_ssize_t head_len = (Py_ssize_t)strlen(map_header) + LITERAL_LENGTH("$6\r\nstream\r\n$")
                          + decimal_length(stream_len) + LITERAL_LENGTH("\r\n") + stream_len
                          + LITERAL_LENGTH("\r\n$7\r\nsubject\r\n");

    /* Pass 1: the entries taken and the size. */
    Py_ssize_t ntables = PyList_GET_SIZE(tables), nsubjects = PySequence_Fast_GET_SIZE(subjects);
    Py_ssize_t n = 0;
    long long used = 0, size = 0, seq = last_seq, left = pending;
    TableView t;
    int stop = 0;
    for (Py_ssize_t x = 0; x < ntables && !stop; x++) {
        if (!table_acquire(PyList_GET_ITEM(tables, x), &t))
            return NULL;
        const unsigned int *tags = (const unsigned int *)t.tags.buf;
        for (Py_ssize_t k = t.i; k < t.j; k++) {
            if (used >= budget) {
                stop = 1;
                break;
            }
            unsigned long long a = table_end(&t, k), b = table_end(&t, k + 1);
            if (a > b || b > (unsigned long long)t.buf.len) {
                PyErr_SetString(PyExc_ValueError, "a table's ends are outside its buffer");
                table_release(&t);
                return NULL;
            }
            unsigned int tag = tags[k];
            PyObject *subject = tag < (unsigned long long)nsubjects ? PySequence_Fast_GET_ITEM(subjects, tag) : NULL;
            if (subject == NULL || !PyBytes_Check(subject)) {
                PyErr_SetString(PyExc_ValueError, "a tag id with no subject (bytes) in subjects");
                table_release(&t);
                return NULL;
            }
            Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
            long long data_len = (long long)(b - a);
            long long this_seq = t.first_seq + (k - t.i);
            left--;
            size += head_len + MESSAGE_FIXED + decimal_length(subject_len) + subject_len
                    + decimal_length(this_seq) + decimal_length(data_len) + data_len
                    + decimal_length(left) + decimal_length(seq);
            seq = this_seq;
            used += subject_len + data_len;
            n++;
        }
        table_release(&t);
    }
    size += 1 + decimal_length(n + 1) + 2;
    if (size > PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return NULL;
    }

    /* Pass 2: the bytes. */
    PyObject *page = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (page == NULL)
        return NULL;
    char *p = PyBytes_AS_STRING(page), *end = p + size;
    *p++ = '*';
    p = write_decimal(p, n + 1);
    p = WRITE_LITERAL(p, "\r\n");
    Py_ssize_t written = 0;
    long long prefix_second = 0;
    int have_prefix = 0;
    char prefix[19];
    const char *first_head = NULL;
    seq = last_seq;
    left = pending;
    for (Py_ssize_t x = 0; x < ntables && written < n; x++) {
        if (!table_acquire(PyList_GET_ITEM(tables, x), &t))
            goto failed;
        const unsigned int *tags = (const unsigned int *)t.tags.buf;
        const long long *times = (const long long *)t.times.buf;
        const char *buf = (const char *)t.buf.buf;
        for (Py_ssize_t k = t.i; k < t.j && written < n; k++) {
            /* (checked again: the allocation could have run a finalizer) */
            unsigned long long a = table_end(&t, k), b = table_end(&t, k + 1);
            unsigned int tag = tags[k];
            PyObject *subject = tag < (unsigned long long)PySequence_Fast_GET_SIZE(subjects)
                                ? PySequence_Fast_GET_ITEM(subjects, tag) : NULL;
            if (a > b || b > (unsigned long long)t.buf.len || subject == NULL || !PyBytes_Check(subject))
                goto changed;
            Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
            long long data_len = (long long)(b - a);
            long long this_seq = t.first_seq + (k - t.i);
            left--;
            long long need = head_len + MESSAGE_FIXED + decimal_length(subject_len) + subject_len
                             + decimal_length(this_seq) + decimal_length(data_len) + data_len
                             + decimal_length(left) + decimal_length(seq);
            if (need > end - p)
                goto changed;
            if (first_head == NULL) {  /* the head of the first message, copied for the others */
                first_head = p;
                p = write_bytes(p, map_header, strlen(map_header));
                p = WRITE_LITERAL(p, "$6\r\nstream\r\n$");
                p = write_decimal(p, stream_len);
                p = WRITE_LITERAL(p, "\r\n");
                p = write_bytes(p, PyBytes_AS_STRING(stream), (size_t)stream_len);
                p = WRITE_LITERAL(p, "\r\n$7\r\nsubject\r\n");
            }
            else {
                p = write_bytes(p, first_head, (size_t)head_len);
            }
            *p++ = '$';
            p = write_decimal(p, subject_len);
            p = WRITE_LITERAL(p, "\r\n");
            p = write_bytes(p, PyBytes_AS_STRING(subject), (size_t)subject_len);
            p = WRITE_LITERAL(p, "\r\n$3\r\nseq\r\n:");
            p = write_decimal(p, this_seq);
            p = WRITE_LITERAL(p, "\r\n$4\r\ntime\r\n$30\r\n");
            long long ns = times[k];
            long long second = ns / 1000000000, fraction = ns % 1000000000;
            if (fraction < 0) {
                fraction += 1000000000;
                second--;
            }
            if (!have_prefix || second != prefix_second) {
                format_second(second, prefix);
                prefix_second = second;
                have_prefix = 1;
            }
            p = write_bytes(p, prefix, 19);
            *p++ = '.';
            for (int d = 8; d >= 0; d--) {
                p[d] = (char)('0' + fraction % 10);
                fraction /= 10;
            }
            p += 9;
            *p++ = 'Z';
            p = WRITE_LITERAL(p, "\r\n$4\r\ndata\r\n$");
            p = write_decimal(p, data_len);
            p = WRITE_LITERAL(p, "\r\n");
            p = write_bytes(p, buf + a, (size_t)data_len);
            p = WRITE_LITERAL(p, "\r\n$11\r\nnum_pending\r\n:");
            p = write_decimal(p, left);
            p = WRITE_LITERAL(p, "\r\n$8\r\nlast_seq\r\n:");
            p = write_decimal(p, seq);
            p = WRITE_LITERAL(p, "\r\n");
            seq = this_seq;
            written++;
        }
        table_release(&t);
    }
    if (written != n || p != end) {
        PyErr_SetString(PyExc_RuntimeError, "encode_table_page: the tables changed while encoding");
        goto failed;
    }
    PyObject *count = PyLong_FromSsize_t(n);
    if (count == NULL)
        goto failed;
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(count);
        goto failed;
    }
    PyTuple_SET_ITEM(result, 0, page);
    PyTuple_SET_ITEM(result, 1, count);
    return result;
changed:
    table_release(&t);
    PyErr_SetString(PyExc_RuntimeError, "encode_table_page: the tables changed while encoding");
failed:
    Py_DECREF(page);
    return NULL;
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
id_digit_width(unsigned long long v)
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
write_id_digits(char *out, unsigned long long v, int width)
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
    int ms_width = id_digit_width(ms);
    /* Every id's bulk string: "$" len "\r\n" ms "-" seq "\r\n"; the sizes by width of seq. */
    Py_ssize_t size = 0;
    {
        unsigned long long seq = first;
        int width = id_digit_width(seq);
        unsigned long long bound = 1;  /* 10**width, or 0 past 64 bits */
        for (int i = 0; i < width; i++)
            bound = (bound > ~0ULL / 10) ? 0 : bound * 10;
        for (;;) {
            unsigned long long stop = (bound == 0 || bound - 1 > last) ? last : bound - 1;
            unsigned long long n = stop - seq + 1;
            int id_len = ms_width + 1 + width;
            Py_ssize_t each = 1 + id_digit_width((unsigned long long)id_len) + 2 + id_len + 2;
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
        int width = id_digit_width(seq);
        if (width != head_width) {  /* the head changes with the id's length only */
            int id_len = ms_width + 1 + width;
            int len_width = id_digit_width((unsigned long long)id_len);
            head[0] = '$';
            write_id_digits(head + 1, (unsigned long long)id_len, len_width);
            head[1 + len_width] = '\r';
            head[2 + len_width] = '\n';
            write_id_digits(head + 3 + len_width, ms, ms_width);
            head[3 + len_width + ms_width] = '-';
            head_len = 4 + len_width + ms_width;
            head_width = width;
        }
        memcpy(p, head, (size_t)head_len);
        p += head_len;
        write_id_digits(p, seq, width);
        p += width;
        p[0] = '\r';
        p[1] = '\n';
        p += 2;
        if (seq == last)
            break;
    }
    return out;
}

/* ---- decimal_run: fast10's addition (commands/ingest.py's batch-seq check), separate from the parser ----

   decimal_run(seqs, lo) -> True when the tuple ``seqs`` of bytes is exactly
   b"%d" % lo, b"%d" % (lo + 1), ... (plain decimal: no sign, no leading zero,
   nothing else), False when it is not, None when this cannot decide (``lo``
   under 1 or past 10**17, an element that is not bytes): the caller's
   pure-Python check decides then.  The expected number is kept as decimal
   digits and incremented in place (amortised O(1) a seq), each seq compared
   with one memcmp: O(total length), no allocation (nothing here can raise a
   MemoryError), the GIL held throughout. */

#define DECIMAL_RUN_MAX_LO 100000000000000000LL  /* 10**17: lo + len(seqs) stays under 10**18 */

static char *entries_decimal(long long v, char *end);  /* (below: encode_entries' decimal writer) */

static PyObject *
decimal_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "decimal_run() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *seqs = args[0];
    if (!PyTuple_CheckExact(seqs)) {
        PyErr_SetString(PyExc_TypeError, "decimal_run() takes a tuple of bytes");
        return NULL;
    }
    int overflow = 0;
    long long lo = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (lo == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(seqs);
    if (overflow || lo < 1 || lo > DECIMAL_RUN_MAX_LO || count > DECIMAL_RUN_MAX_LO)
        Py_RETURN_NONE;
    /* The expected seq's digits, right-aligned in digits[]: digits + start .. end. */
    char digits[24];
    char *end = digits + sizeof(digits);
    char *start = entries_decimal(lo, end);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *seq = PyTuple_GET_ITEM(seqs, i);
        if (!PyBytes_CheckExact(seq))
            Py_RETURN_NONE;
        Py_ssize_t width = end - start;
        if (PyBytes_GET_SIZE(seq) != width || memcmp(PyBytes_AS_STRING(seq), start, (size_t)width) != 0)
            Py_RETURN_FALSE;
        char *digit = end - 1;  /* the next number: + 1 with its carry */
        while (digit >= start && *digit == '9')
            *digit-- = '0';
        if (digit >= start)
            (*digit)++;
        else
            *--start = '1';  /* (at most 18 digits: lo + count < 10**18) */
    }
    Py_RETURN_TRUE;
}

/* ---- integer_reply and plain_positive_ints: the unpipelined T* group loop's (helper grp13),
   separate from the rest ----

   integer_reply(value) -> b":%d\r\n" % value for an int (TWRITE's offset, TACK's
   count: the dispatcher's most frequent reply), without the format's parse.

   plain_positive_ints(words, start) -> [int(w) for w in words[start:]] when every
   one of those words (a list of bytes) is a plain decimal number >= 1 as
   commands.args.to_positive_list takes them without its checks (digits only, no
   leading zero, 1 to 18 of them); None when one is not (the caller's own parse
   then gives the error, or reads another form); [] when there are none.  Every
   word is checked before anything is allocated. */

static PyObject *
integer_reply(PyObject *module, PyObject *value)
{
    (void)module;
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "integer_reply() takes an int");
        return NULL;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) {  /* past 64 bits: the decimal text Python writes */
        PyObject *text = PyObject_Str(value);
        if (text == NULL)
            return NULL;
        Py_ssize_t size;
        const char *digits = PyUnicode_AsUTF8AndSize(text, &size);
        PyObject *reply = digits == NULL ? NULL : PyBytes_FromFormat(":%s\r\n", digits);
        Py_DECREF(text);
        return reply;
    }
    char buf[24];  /* ":" + a sign + 19 digits + CRLF */
    char *end = buf + sizeof(buf);
    char *start = end;
    *--start = '\n';
    *--start = '\r';
    unsigned long long magnitude = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--start = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (v < 0)
        *--start = '-';
    *--start = ':';
    return PyBytes_FromStringAndSize(start, end - start);
}

static PyObject *
plain_positive_ints(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "plain_positive_ints() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *words = args[0];
    if (!PyList_CheckExact(words)) {
        PyErr_SetString(PyExc_TypeError, "plain_positive_ints() takes a list of bytes");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "plain_positive_ints(): start must be >= 0");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(words);
    for (Py_ssize_t i = start; i < count; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyBytes_CheckExact(word))
            Py_RETURN_NONE;
        Py_ssize_t size = PyBytes_GET_SIZE(word);
        const char *text = PyBytes_AS_STRING(word);
        if (size < 1 || size > 18 || text[0] < '1' || text[0] > '9')
            Py_RETURN_NONE;
        for (Py_ssize_t k = 1; k < size; k++)
            if (text[k] < '0' || text[k] > '9')
                Py_RETURN_NONE;
    }
    PyObject *result = PyList_New(count > start ? count - start : 0);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = start; i < count; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        const char *text = PyBytes_AS_STRING(word);
        long long value = 0;
        for (Py_ssize_t k = 0; k < PyBytes_GET_SIZE(word); k++)
            value = value * 10 + (text[k] - '0');
        PyObject *number = PyLong_FromLongLong(value);
        if (number == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, i - start, number);
    }
    return result;
}

/* ---- encode_entries: TREAD's reply (helper grp13), separate from the rest ----

   encode_entries(entries, resp3) -> resp/encode.py's encode_entries_python's
   bytes: "*<n>\r\n", then each entry [offset, tag, data] (a list or tuple of an
   int and two bytes-like objects) as "*3\r\n:<offset>\r\n$<len>\r\n<tag>\r\n
   $<len>\r\n<data>\r\n", a None as "_\r\n" (RESP3) or "$-1\r\n".  Two passes:
   the size, then one allocation and the copies.  TypeError for anything else
   (an offset past 64 bits: OverflowError), as the format raises for what it
   cannot write. */

/* The decimal text of v into the end of buf[24]; returns where it starts. */
static char *
entries_decimal(long long v, char *end)
{
    unsigned long long magnitude = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    char *start = end;
    do {
        *--start = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (v < 0)
        *--start = '-';
    return start;
}

static Py_ssize_t
entries_decimal_width(long long v)
{
    char buf[24];
    return (buf + sizeof(buf)) - entries_decimal(v, buf + sizeof(buf));
}

/* An entry's fields, checked; 0, or -1 with an exception set. */
static int
entries_fields(PyObject *entry, long long *offset, PyObject **tag, PyObject **data)
{
    PyObject *offset_object;
    if (PyList_Check(entry) && PyList_GET_SIZE(entry) == 3) {
        offset_object = PyList_GET_ITEM(entry, 0);
        *tag = PyList_GET_ITEM(entry, 1);
        *data = PyList_GET_ITEM(entry, 2);
    } else if (PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 3) {
        offset_object = PyTuple_GET_ITEM(entry, 0);
        *tag = PyTuple_GET_ITEM(entry, 1);
        *data = PyTuple_GET_ITEM(entry, 2);
    } else {
        PyErr_SetString(PyExc_TypeError, "encode_entries(): an entry is [offset, tag, data] or None");
        return -1;
    }
    if (!PyLong_Check(offset_object)) {
        PyErr_SetString(PyExc_TypeError, "encode_entries(): an entry's offset is an int");
        return -1;
    }
    *offset = PyLong_AsLongLong(offset_object);
    if (*offset == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

/* The size of a bytes-like object (bytes without a buffer request). */
static Py_ssize_t
entries_size_of(PyObject *value)
{
    if (PyBytes_CheckExact(value))
        return PyBytes_GET_SIZE(value);
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t size = view.len;
    PyBuffer_Release(&view);
    return size;
}

/* Writes "$<len>\r\n<value>\r\n" at *at; -1 with an exception set on failure. */
static int
entries_write_bulk(char **at, PyObject *value)
{
    const char *bytes;
    Py_ssize_t size;
    Py_buffer view;
    int viewed = 0;
    if (PyBytes_CheckExact(value)) {
        bytes = PyBytes_AS_STRING(value);
        size = PyBytes_GET_SIZE(value);
    } else {
        if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) < 0)
            return -1;
        viewed = 1;
        bytes = view.buf;
        size = view.len;
    }
    char buf[24];
    char *digits = entries_decimal(size, buf + sizeof(buf));
    char *out = *at;
    *out++ = '$';
    memcpy(out, digits, (size_t)(buf + sizeof(buf) - digits));
    out += buf + sizeof(buf) - digits;
    *out++ = '\r';
    *out++ = '\n';
    memcpy(out, bytes, (size_t)size);
    out += size;
    *out++ = '\r';
    *out++ = '\n';
    *at = out;
    if (viewed)
        PyBuffer_Release(&view);
    return 0;
}

static PyObject *
encode_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "encode_entries() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *entries = args[0];
    if (!PyList_Check(entries) && !PyTuple_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "encode_entries() takes a list or tuple of entries");
        return NULL;
    }
    int resp3 = PyObject_IsTrue(args[1]);
    if (resp3 < 0)
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(entries);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(entries);
    const char *null = resp3 ? "_\r\n" : "$-1\r\n";
    Py_ssize_t null_size = resp3 ? 3 : 5;
    /* Pass 1: the size.  No Python code runs from here to the end (ints, bytes and
       C buffers only, the GIL held): the list and its entries cannot change between
       the passes (the end is checked all the same). */
    Py_ssize_t total = 1 + entries_decimal_width(count) + 2;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = items[i];
        if (entry == Py_None) {
            total += null_size;
            continue;
        }
        long long offset;
        PyObject *tag, *data;
        if (entries_fields(entry, &offset, &tag, &data) < 0)
            return NULL;
        Py_ssize_t tag_size = entries_size_of(tag), data_size = entries_size_of(data);
        if (tag_size < 0 || data_size < 0)
            return NULL;
        /* *3\r\n :<offset>\r\n $<n>\r\n<tag>\r\n $<n>\r\n<data>\r\n */
        total += 4 + 1 + entries_decimal_width(offset) + 2 + 1 + entries_decimal_width(tag_size) + 2 + tag_size + 2
                 + 1 + entries_decimal_width(data_size) + 2 + data_size + 2;
    }
    PyObject *reply = PyBytes_FromStringAndSize(NULL, total);
    if (reply == NULL)
        return NULL;
    char *start = PyBytes_AS_STRING(reply);
    char *at = start;
    char buf[24];
    char *digits = entries_decimal(count, buf + sizeof(buf));
    *at++ = '*';
    memcpy(at, digits, (size_t)(buf + sizeof(buf) - digits));
    at += buf + sizeof(buf) - digits;
    *at++ = '\r';
    *at++ = '\n';
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = items[i];
        if (entry == Py_None) {
            memcpy(at, null, (size_t)null_size);
            at += null_size;
            continue;
        }
        long long offset;
        PyObject *tag, *data;
        if (entries_fields(entry, &offset, &tag, &data) < 0)
            goto fail;
        memcpy(at, "*3\r\n:", 5);
        at += 5;
        digits = entries_decimal(offset, buf + sizeof(buf));
        memcpy(at, digits, (size_t)(buf + sizeof(buf) - digits));
        at += buf + sizeof(buf) - digits;
        *at++ = '\r';
        *at++ = '\n';
        if (entries_write_bulk(&at, tag) < 0 || entries_write_bulk(&at, data) < 0)
            goto fail;
    }
    if (at != start + total) {
        PyErr_SetString(PyExc_RuntimeError, "encode_entries(): an entry changed while encoded");
        goto fail;
    }
    return reply;
fail:
    Py_DECREF(reply);
    return NULL;
}

/* ---- parse_read and run_end: the parser's, for pipelined reads (helper run10) ----

   parse_read(data, max_bulk): one call for a read whichever its shape, so that a
   pipelined read is not parsed twice (parse_one's attempt, then parse_many's).
   The command (a list of bytes, as parse_one) when ``data`` is exactly one
   multibulk of bulk strings; a 1-tuple holding the list of its commands (as
   parse_many, words shared the same way) when it is several; else None.
   (The tuple makes the two results tell apart by their type alone.) */
static PyObject *
parse_read(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    long long max_bulk;
    (void)module;
    if (!read_arguments(args, nargs, "parse_read", &view, &max_bulk))
        return NULL;
    const char *p = (const char *)view.buf, *end = p + view.len;
    PyObject *commands = NULL, *command = NULL, *result;
    int status = parse_command(&p, end, max_bulk, NULL, &command);
    if (status == UNHANDLED)
        goto unhandled;
    if (status == FAILED)
        goto failed;
    if (p == end) {  /* the unpipelined client's read */
        PyBuffer_Release(&view);
        return command;
    }
    commands = PyList_New(1);
    if (commands == NULL) {
        Py_DECREF(command);
        goto failed;
    }
    PyList_SET_ITEM(commands, 0, command);  /* (stolen: ``commands`` holds it) */
    status = append_commands(&p, end, max_bulk, commands, command);
    if (status == UNHANDLED)
        goto unhandled;
    if (status == FAILED)
        goto failed;
    PyBuffer_Release(&view);
    result = PyTuple_New(1);
    if (result == NULL) {
        Py_DECREF(commands);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, commands);
    return result;
unhandled:
    Py_XDECREF(commands);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(commands);
    PyBuffer_Release(&view);
    return NULL;
}

/* run_end(commands, at): the index after the run of commands that starts at
   ``at`` in the list ``commands``: those after it with as many words and the
   same first word (==; a run's name is usually one shared object, tested by
   identity first).  A pipelined run's detection (commands/dispatch.py), one
   C loop instead of one interpreted turn per command.  An element that is not
   a non-empty list ends the run. */
static PyObject *
run_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "run_end(commands: list, at: int)");
        return NULL;
    }
    PyObject *commands = args[0];
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(commands);
    if (at < 0 || at >= count) {
        PyErr_SetString(PyExc_IndexError, "run_end: at out of range");
        return NULL;
    }
    PyObject *first = PyList_GET_ITEM(commands, at);
    if (!PyList_Check(first) || PyList_GET_SIZE(first) < 1)
        return PyLong_FromSsize_t(at + 1);
    Py_ssize_t words = PyList_GET_SIZE(first);
    PyObject *name = PyList_GET_ITEM(first, 0);
    Py_INCREF(name);  /* (a comparison may run Python code that changes the lists) */
    Py_ssize_t end = at + 1;
    for (; end < PyList_GET_SIZE(commands); end++) {
        PyObject *other = PyList_GET_ITEM(commands, end);
        if (!PyList_Check(other) || PyList_GET_SIZE(other) != words)
            break;
        PyObject *word = PyList_GET_ITEM(other, 0);
        if (word == name)
            continue;
        Py_INCREF(word);
        int same = PyObject_RichCompareBool(word, name, Py_EQ);
        Py_DECREF(word);
        if (same < 0) {
            Py_DECREF(name);
            return NULL;
        }
        if (!same)
            break;
    }
    Py_DECREF(name);
    return PyLong_FromSsize_t(end);
}

/* ---- encode_stream_tables: XREADGROUP's new entries (helper xloop11), separate from the above ----

   encode_stream_tables(protocol, key, tables, subjects, last_ms, last_seq, packed)
       -> (reply, texts, ids), or None

   The reply of ``XREADGROUP ... STREAMS key >`` handing out the entries of
   ``tables`` (engine Stream.read_tables: consecutive entries, none deleted,
   none with a stored id), with their ids derived from their times as
   engine/xgroups._ids_from_times does: the entry after the id
   (last_ms, last_seq) written in millisecond ms = time // 10**6 has the id
   ms-(last_seq + 1) if ms == last_ms, else ms-0, and so on from entry to
   entry.  ``reply`` is the bytes of ``encode(KeyedReplies({key: entries}),
   protocol)`` (``key`` None: of the entries alone), each entry
   ``[id, [subject, *items]]``: with ``packed`` 0 an entry holds one pair (its
   subject subjects[tags[k]], its payload the value); with ``packed`` 1 its
   payload is engine/xids.pack_pairs' (one byte, the number c <= 126 of the
   items after the first field, then those items as RESP bulk strings, copied
   as they are).  ``texts`` are the ids as the reply spells them (b"ms-seq"),
   ``ids`` the (ms, seq) tuples.  None (nothing allocated) when an id cannot be
   derived so (a time before the last id's millisecond or before the epoch, a
   sequence past 64 bits) or a payload is not in the packed form (empty, or a
   first byte over 126: a msgpack list): the caller takes its Python path.
   resp/xentries.encode_stream_tables is the reference.

   Pass 1 checks every index and sums the size; pass 2 writes the reply into
   one bytes object of exactly that size and makes each id's text and tuple
   (checking the space left at each entry: an allocation could run a
   finalizer).  The GIL is held throughout; nothing is kept between calls.
   On a bad argument TypeError/ValueError/OverflowError, on a MemoryError
   NULL, nothing leaked. */

#define STREAM_ID_MAX_TEXT 41  /* 20 digits, "-", 20 digits */

/* The next entry's id from its time ``ns`` and the previous id (*ms, *seq):
   0 when it cannot be derived. */
static inline int
next_stream_id(long long ns, unsigned long long *ms, unsigned long long *seq)
{
    if (ns < 0)
        return 0;
    unsigned long long this_ms = (unsigned long long)ns / 1000000ULL;
    if (this_ms < *ms)
        return 0;
    if (this_ms == *ms) {
        if (*seq == ~0ULL)
            return 0;
        *seq += 1;
    }
    else {
        *ms = this_ms;
        *seq = 0;
    }
    return 1;
}

/* The bytes of one entry: "*2\r\n$" L "\r\n" id "\r\n*" items "\r\n$" L "\r\n" subject "\r\n",
   then "$" L "\r\n" value "\r\n" (one pair) or the payload after its count (packed). */
static inline long long
stream_entry_size(int id_len, Py_ssize_t subject_len, long long data_len, int packed, int items)
{
    long long size = LITERAL_LENGTH("*2\r\n$") + decimal_length(id_len) + 2 + id_len + LITERAL_LENGTH("\r\n*")
                     + decimal_length(items) + LITERAL_LENGTH("\r\n$") + decimal_length(subject_len) + 2
                     + subject_len + 2;
    if (packed)
        return size + data_len - 1;
    return size + 1 + decimal_length(data_len) + 2 + data_len + 2;
}

static PyObject *
encode_stream_tables(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "encode_stream_tables() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    long protocol = PyLong_AsLong(args[0]);
    if (protocol == -1 && PyErr_Occurred())
        return NULL;
    if (protocol != 2 && protocol != 3) {
        PyErr_SetString(PyExc_ValueError, "protocol must be 2 or 3");
        return NULL;
    }
    PyObject *key = args[1], *tables = args[2], *subjects = args[3];
    if (!(key == Py_None || PyBytes_Check(key)) || !PyList_Check(tables)
            || !(PyList_Check(subjects) || PyTuple_Check(subjects))) {
        PyErr_SetString(PyExc_TypeError, "key must be bytes or None, tables a list, subjects a list or tuple");
        return NULL;
    }
    unsigned long long last_ms = PyLong_AsUnsignedLongLong(args[4]);
    if (last_ms == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    unsigned long long last_seq = PyLong_AsUnsignedLongLong(args[5]);
    if (last_seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    long packed = PyLong_AsLong(args[6]);
    if (packed == -1 && PyErr_Occurred())
        return NULL;
    if (packed != 0 && packed != 1) {
        PyErr_SetString(PyExc_ValueError, "packed must be 0 or 1");
        return NULL;
    }

    /* Pass 1: the entries' ids (is every one derivable?), their payloads' form, the size. */
    Py_ssize_t ntables = PyList_GET_SIZE(tables), nsubjects = PySequence_Fast_GET_SIZE(subjects);
    Py_ssize_t n = 0;
    long long size = 0;
    unsigned long long ms = last_ms, seq = last_seq;
    char text[STREAM_ID_MAX_TEXT + 1];
    TableView t;
    for (Py_ssize_t x = 0; x < ntables; x++) {
        if (!table_acquire(PyList_GET_ITEM(tables, x), &t))
            return NULL;
        const unsigned int *tags = (const unsigned int *)t.tags.buf;
        const long long *times = (const long long *)t.times.buf;
        const unsigned char *buf = (const unsigned char *)t.buf.buf;
        for (Py_ssize_t k = t.i; k < t.j; k++) {
            unsigned long long a = table_end(&t, k), b = table_end(&t, k + 1);
            if (a > b || b > (unsigned long long)t.buf.len) {
                PyErr_SetString(PyExc_ValueError, "a table's ends are outside its buffer");
                table_release(&t);
                return NULL;
            }
            unsigned int tag = tags[k];
            PyObject *subject = tag < (unsigned long long)nsubjects ? PySequence_Fast_GET_ITEM(subjects, tag) : NULL;
            if (subject == NULL || !PyBytes_Check(subject)) {
                PyErr_SetString(PyExc_ValueError, "a tag id with no subject (bytes) in subjects");
                table_release(&t);
                return NULL;
            }
            int items = 2;
            if (packed) {
                if (a == b || buf[a] > 126) {  /* not the packed form: the caller's path */
                    table_release(&t);
                    Py_RETURN_NONE;
                }
                items = buf[a] + 1;
            }
            if (!next_stream_id(times[k], &ms, &seq)) {
                table_release(&t);
                Py_RETURN_NONE;
            }
            int id_len = id_digit_width(ms) + 1 + id_digit_width(seq);
            size += stream_entry_size(id_len, PyBytes_GET_SIZE(subject), (long long)(b - a), (int)packed, items);
            n++;
        }
        table_release(&t);
    }
    Py_ssize_t key_len = key == Py_None ? 0 : PyBytes_GET_SIZE(key);
    if (key != Py_None)  /* RESP3 "%1\r\n$" L "\r\n" key "\r\n", RESP2 "*1\r\n*2\r\n$" L "\r\n" key "\r\n" */
        size += (protocol == 3 ? LITERAL_LENGTH("%1\r\n$") : LITERAL_LENGTH("*1\r\n*2\r\n$"))
                + decimal_length(key_len) + 2 + key_len + 2;
    size += 1 + decimal_length(n) + 2;
    if (size > PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return NULL;
    }

    /* Pass 2: the bytes, the texts and the ids. */
    PyObject *reply = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (reply == NULL)
        return NULL;
    PyObject *texts = PyList_New(n), *ids = NULL, *ms_obj = NULL, *result = NULL;
    if (texts == NULL)
        goto failed;
    ids = PyList_New(n);
    if (ids == NULL)
        goto failed;
    char *p = PyBytes_AS_STRING(reply), *end = p + size;
    if (key != Py_None) {
        if (protocol == 3)
            p = WRITE_LITERAL(p, "%1\r\n$");
        else
            p = WRITE_LITERAL(p, "*1\r\n*2\r\n$");
        p = write_decimal(p, key_len);
        p = WRITE_LITERAL(p, "\r\n");
        p = write_bytes(p, PyBytes_AS_STRING(key), (size_t)key_len);
        p = WRITE_LITERAL(p, "\r\n");
    }
    *p++ = '*';
    p = write_decimal(p, n);
    p = WRITE_LITERAL(p, "\r\n");
    Py_ssize_t written = 0;
    unsigned long long ms_of_obj = 0;
    ms = last_ms;
    seq = last_seq;
    for (Py_ssize_t x = 0; x < PyList_GET_SIZE(tables) && written < n; x++) {
        if (!table_acquire(PyList_GET_ITEM(tables, x), &t))
            goto failed;
        const unsigned int *tags = (const unsigned int *)t.tags.buf;
        const long long *times = (const long long *)t.times.buf;
        const unsigned char *buf = (const unsigned char *)t.buf.buf;
        for (Py_ssize_t k = t.i; k < t.j && written < n; k++) {
            /* (checked again: an allocation could have run a finalizer) */
            unsigned long long a = table_end(&t, k), b = table_end(&t, k + 1);
            unsigned int tag = tags[k];
            PyObject *subject = tag < (unsigned long long)PySequence_Fast_GET_SIZE(subjects)
                                ? PySequence_Fast_GET_ITEM(subjects, tag) : NULL;
            if (a > b || b > (unsigned long long)t.buf.len || subject == NULL || !PyBytes_Check(subject)
                    || (packed && (a == b || buf[a] > 126)) || !next_stream_id(times[k], &ms, &seq))
                goto changed;
            int items = packed ? buf[a] + 1 : 2;
            int ms_width = id_digit_width(ms), seq_width = id_digit_width(seq);
            int id_len = ms_width + 1 + seq_width;
            Py_ssize_t subject_len = PyBytes_GET_SIZE(subject);
            long long data_len = (long long)(b - a);
            if (stream_entry_size(id_len, subject_len, data_len, (int)packed, items) > end - p)
                goto changed;
            write_id_digits(text, ms, ms_width);
            text[ms_width] = '-';
            write_id_digits(text + ms_width + 1, seq, seq_width);
            p = WRITE_LITERAL(p, "*2\r\n$");
            p = write_decimal(p, id_len);
            p = WRITE_LITERAL(p, "\r\n");
            p = write_bytes(p, text, (size_t)id_len);
            p = WRITE_LITERAL(p, "\r\n*");
            p = write_decimal(p, items);
            p = WRITE_LITERAL(p, "\r\n$");
            p = write_decimal(p, subject_len);
            p = WRITE_LITERAL(p, "\r\n");
            p = write_bytes(p, PyBytes_AS_STRING(subject), (size_t)subject_len);
            p = WRITE_LITERAL(p, "\r\n");
            if (packed) {
                p = write_bytes(p, (const char *)buf + a + 1, (size_t)(data_len - 1));
            }
            else {
                *p++ = '$';
                p = write_decimal(p, data_len);
                p = WRITE_LITERAL(p, "\r\n");
                p = write_bytes(p, (const char *)buf + a, (size_t)data_len);
                p = WRITE_LITERAL(p, "\r\n");
            }
            /* The id's text and tuple (the millisecond's int shared by its ids). */
            PyObject *item = PyBytes_FromStringAndSize(text, id_len);
            if (item == NULL)
                goto failed_table;
            PyList_SET_ITEM(texts, written, item);
            if (ms_obj == NULL || ms_of_obj != ms) {
                Py_XDECREF(ms_obj);
                ms_obj = PyLong_FromUnsignedLongLong(ms);
                if (ms_obj == NULL)
                    goto failed_table;
                ms_of_obj = ms;
            }
            PyObject *seq_obj = PyLong_FromUnsignedLongLong(seq);
            if (seq_obj == NULL)
                goto failed_table;
            PyObject *pair = PyTuple_New(2);
            if (pair == NULL) {
                Py_DECREF(seq_obj);
                goto failed_table;
            }
            Py_INCREF(ms_obj);
            PyTuple_SET_ITEM(pair, 0, ms_obj);
            PyTuple_SET_ITEM(pair, 1, seq_obj);
            PyList_SET_ITEM(ids, written, pair);
            written++;
        }
        table_release(&t);
    }
    if (written != n || p != end) {
        PyErr_SetString(PyExc_RuntimeError, "encode_stream_tables: the tables changed while encoding");
        goto failed;
    }
    result = PyTuple_New(3);
    if (result == NULL)
        goto failed;
    Py_XDECREF(ms_obj);
    PyTuple_SET_ITEM(result, 0, reply);
    PyTuple_SET_ITEM(result, 1, texts);
    PyTuple_SET_ITEM(result, 2, ids);
    return result;
changed:
    PyErr_SetString(PyExc_RuntimeError, "encode_stream_tables: the tables changed while encoding");
failed_table:
    table_release(&t);
failed:
    Py_XDECREF(ms_obj);
    Py_XDECREF(ids);
    Py_XDECREF(texts);
    Py_DECREF(reply);
    return NULL;
}

/* ---- fast_run_columns: fast11's addition (commands/ingest.py batch_run), separate from the parser ----

   fast_run_columns(argvs, lo) -> (subjects, datas), False or None.

   ``argvs``: a pipelined run of 9-word commands ``BATCH key id seq subject data
   FAST flow gap`` (lists of bytes).  (subjects, datas), two tuples, when every
   command has the first one's key, id, FAST word, flow and gap (the same
   object, as the parser shares them, or equal bytes) and their batch-seqs are
   b"%d" % lo, b"%d" % (lo + 1), ... (decimal_run's counter); the subjects
   tuple holds the first subject object ``count`` times when every subject is
   equal to it (the engine then compares by identity).  False when one of
   those checks fails (the caller runs the commands one by one), None when it
   cannot decide (a command that is not a 9-word list of bytes, ``lo`` under 1
   or past 10**17): the caller's Python checks decide then.  One C loop in
   place of zip(*argvs), five tuple counts and the seq check (~24,000 fewer
   instructions a read of 16: zip's iterators and tuples were most of it).
   Allocates three tuples (the columns, then the pair), only once every check
   passed: on a MemoryError NULL is returned, nothing kept; the GIL held
   throughout. */

/* a equal to b: the same object, or bytes of the same value; -1: not both bytes */
static inline int
same_word(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (!PyBytes_CheckExact(a) || !PyBytes_CheckExact(b))
        return -1;
    Py_ssize_t n = PyBytes_GET_SIZE(a);
    return n == PyBytes_GET_SIZE(b) && memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)n) == 0;
}

#define FAST_RUN_WORDS 9

static PyObject *
fast_run_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "fast_run_columns(argvs: list, lo: int)");
        return NULL;
    }
    PyObject *argvs = args[0];
    int overflow = 0;
    long long lo = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (lo == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(argvs);
    if (overflow || lo < 1 || lo > DECIMAL_RUN_MAX_LO || count < 1 || count > DECIMAL_RUN_MAX_LO)
        Py_RETURN_NONE;
    PyObject *first = PyList_GET_ITEM(argvs, 0);
    if (!PyList_CheckExact(first) || PyList_GET_SIZE(first) != FAST_RUN_WORDS)
        Py_RETURN_NONE;
    PyObject *const *model = ((PyListObject *)first)->ob_item;
    for (int w = 0; w < FAST_RUN_WORDS; w++)
        if (!PyBytes_CheckExact(model[w]))
            Py_RETURN_NONE;
    PyObject *subject = model[4];
    int one_subject = 1;
    /* The expected seq's digits, right-aligned in digits[] (as decimal_run). */
    char digits[24];
    char *end = digits + sizeof(digits);
    char *start = entries_decimal(lo, end);
    /* First pass: the checks (no allocation, so no Python code runs and the lists
       cannot change under it: everything compared is exact bytes). */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *argv = PyList_GET_ITEM(argvs, i);
        if (!PyList_CheckExact(argv) || PyList_GET_SIZE(argv) != FAST_RUN_WORDS)
            Py_RETURN_NONE;
        PyObject *const *word = ((PyListObject *)argv)->ob_item;
        static const int shared[] = {1, 2, 6, 7, 8};  /* key, id, FAST, flow, gap */
        for (int k = 0; k < 5; k++) {
            int same = same_word(word[shared[k]], model[shared[k]]);
            if (same < 0)
                Py_RETURN_NONE;
            if (!same)
                Py_RETURN_FALSE;
        }
        PyObject *seq = word[3];
        if (!PyBytes_CheckExact(seq) || !PyBytes_CheckExact(word[5]))
            Py_RETURN_NONE;
        Py_ssize_t width = end - start;
        if (PyBytes_GET_SIZE(seq) != width || memcmp(PyBytes_AS_STRING(seq), start, (size_t)width) != 0)
            Py_RETURN_FALSE;
        char *digit = end - 1;  /* the next number: + 1 with its carry */
        while (digit >= start && *digit == '9')
            *digit-- = '0';
        if (digit >= start)
            (*digit)++;
        else
            *--start = '1';  /* (at most 18 digits: lo + count < 10**18) */
        if (one_subject) {
            int same = same_word(word[4], subject);
            if (same < 0)
                Py_RETURN_NONE;
            one_subject = same;
        }
        else if (!PyBytes_CheckExact(word[4])) {
            Py_RETURN_NONE;
        }
    }
    /* Second pass: the columns.  (An allocation may run the garbage collector, and
       a finalizer Python code: the lists are looked at again, never trusted.) */
    Py_INCREF(subject);  /* (the first command's: kept alive whatever happens to it) */
    PyObject *subjects = PyTuple_New(count);
    PyObject *datas = subjects != NULL ? PyTuple_New(count) : NULL;
    if (datas == NULL) {
        Py_XDECREF(subjects);
        Py_DECREF(subject);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *argv = PyList_GET_SIZE(argvs) == count ? PyList_GET_ITEM(argvs, i) : NULL;
        if (argv == NULL || !PyList_CheckExact(argv) || PyList_GET_SIZE(argv) != FAST_RUN_WORDS
                || !PyBytes_CheckExact(((PyListObject *)argv)->ob_item[4])
                || !PyBytes_CheckExact(((PyListObject *)argv)->ob_item[5])) {
            Py_DECREF(subjects);  /* (the slots not filled yet are NULL: tupledealloc skips them) */
            Py_DECREF(datas);
            Py_DECREF(subject);
            Py_RETURN_NONE;
        }
        PyObject *const *word = ((PyListObject *)argv)->ob_item;
        PyObject *s = one_subject ? subject : word[4];
        Py_INCREF(s);
        PyTuple_SET_ITEM(subjects, i, s);
        Py_INCREF(word[5]);
        PyTuple_SET_ITEM(datas, i, word[5]);
    }
    Py_DECREF(subject);
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(subjects);
        Py_DECREF(datas);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, subjects);
    PyTuple_SET_ITEM(result, 1, datas);
    return result;
}

/* ---- encode_integer_run: seal13's addition (a pipelined TWRITE run's replies), separate from the parser ----

   encode_integer_run(first, count) -> b":first\r\n:first+1\r\n..." (``count``
   integer replies, concatenated): resp/encode.py's encode_integer_run_python,
   in one buffer sized first, the number kept as decimal digits and
   incremented in place.  Outside 0 <= first, 0 <= count <= 10**18 / 32,
   first + count <= 10**18 (no offset gets there) it calls encode_integer_run_python itself
   (imported at that first use), so that every int gives its reply. */

#define INTEGER_RUN_LIMIT 1000000000000000000LL  /* 10**18: at most 18 digits */

static PyObject *integer_run_python;  /* tstream.resp.encode.encode_integer_run_python, once needed */

static PyObject *
integer_run_fallback(PyObject *const *args)
{
    if (integer_run_python == NULL) {  /* (kept for the process's life, as the module's code is) */
        PyObject *encode_module = PyImport_ImportModule("tstream.resp.encode");
        if (encode_module == NULL)
            return NULL;
        integer_run_python = PyObject_GetAttrString(encode_module, "encode_integer_run_python");
        Py_DECREF(encode_module);
        if (integer_run_python == NULL)
            return NULL;
    }
    return PyObject_Vectorcall(integer_run_python, args, 2, NULL);
}

/* The digits of the integers 1 .. n written in decimal, all together (n < 10**18). */
static long long
digits_upto(long long n)
{
    long long total = 0, width = 1;
    for (long long low = 1; low <= n; low *= 10, width++) {
        long long high = low * 10 - 1;  /* (low <= n < 10**18: no overflow) */
        total += ((n < high ? n : high) - low + 1) * width;
    }
    return total;
}

static PyObject *
encode_integer_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "encode_integer_run() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int first_overflow = 0, count_overflow = 0;
    long long first = PyLong_AsLongLongAndOverflow(args[0], &first_overflow);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    long long count = PyLong_AsLongLongAndOverflow(args[1], &count_overflow);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (first_overflow || count_overflow || first < 0 || count < 0 || first > INTEGER_RUN_LIMIT
            || count > INTEGER_RUN_LIMIT - first || count > INTEGER_RUN_LIMIT / 32)  /* (size: no overflow) */
        return integer_run_fallback(args);
    if (count == 0)
        return PyBytes_FromStringAndSize(NULL, 0);
    /* The length: ":" and CRLF each, and the digits of each (0 has one). */
    long long last = first + count - 1;
    Py_ssize_t size = (Py_ssize_t)(count * 3 + digits_upto(last) - (first ? digits_upto(first - 1) : -1));
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    char digits[24];
    char *end = digits + sizeof(digits), *start = end;
    long long v = first;
    do {
        *--start = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (long long i = 0; i < count; i++) {
        *w++ = ':';
        memcpy(w, start, (size_t)(end - start));
        w += end - start;
        *w++ = '\r';
        *w++ = '\n';
        char *d = end;  /* the next integer: the digits incremented in place */
        while (d > start && *(d - 1) == '9')
            *--d = '0';
        if (d > start)
            (*(d - 1))++;
        else
            *--start = '1';
    }
    assert(w == PyBytes_AS_STRING(out) + size);
    return out;
}

/* ---- scan_fast_run: fscan17's addition (server/connection.py's fast-ingest read), separate from the parser ----

   scan_fast_run(data, template, lo, max_count, max_bulk) -> (count, datas, consumed) or None.

   The longest prefix of the bytes ``data`` made of whole RESP commands (at most
   ``max_count``, and at most SCAN_MAX_COUNT) that are, byte for byte, the 9-word
   command ``template`` (a list of bytes: ``BATCH key id seq subject data FAST
   flow gap``) in its canonical RESP spelling (``*9\r\n`` then ``$len\r\nword\r\n``
   each), except the batch-seq, which must be b"%d" % lo, b"%d" % (lo + 1), ...
   (no sign, no leading zero), and the data, any bulk of at most ``max_bulk``
   bytes (its length canonical: no sign, no leading zero, at most 18 digits).
   ``count`` commands matched, ``datas`` their data (a tuple of bytes),
   ``consumed`` the bytes they take.  None when not even the first command
   matches, or when it cannot tell (``lo`` under 1 or past 10**17,
   ``max_count`` under 1, a template that is not a 9-word list of bytes, or
   whose fixed words take more than SCAN_TEMPLATE_MAX bytes in RESP).
   resp/scan.py's scan_fast_run_python is the same in Python.

   No per-command list or batch-seq object: the template's fixed words are
   spelled once into three pieces (``*9`` and the name, key and id; the
   subject; FAST, flow and gap), then one pass of compares over the read (no
   allocation, so no Python code runs and the template cannot change under
   it) notes where each data is, and the datas tuple and its bytes are made
   from those places: on a MemoryError NULL is returned, nothing kept; the GIL
   held throughout. */

#define SCAN_MAX_COUNT 1024     /* commands one call takes at most (a stack array of their data) */
#define SCAN_TEMPLATE_MAX 1024  /* the fixed words' RESP, at most */

/* "$<n>\r\n<text>\r\n" at out; past it. */
static inline char *
write_bulk(char *out, const char *text, Py_ssize_t n)
{
    *out++ = '$';
    out = write_decimal(out, (long long)n);
    *out++ = '\r';
    *out++ = '\n';
    memcpy(out, text, (size_t)n);
    out += n;
    *out++ = '\r';
    *out++ = '\n';
    return out;
}

/* A canonical bulk header "$<len>\r\n" at p (len: 1-18 digits, no leading
   zero but "0"), len <= max_bulk and the bulk and its CRLF inside the read:
   past the header with *length set, else NULL. */
static inline const char *
scan_data_header(const char *p, const char *end, long long max_bulk, Py_ssize_t *length)
{
    if (p >= end || *p != '$')
        return NULL;
    p++;
    const char *digits = p;
    long long value = 0;
    while (p < end && (unsigned)(*p - '0') <= 9 && p - digits < 18) {  /* (18 digits: no overflow) */
        value = value * 10 + (*p - '0');
        p++;
    }
    Py_ssize_t n = p - digits;
    if (n == 0 || (p < end && (unsigned)(*p - '0') <= 9) || (n > 1 && *digits == '0'))
        return NULL;  /* (none, a 19th digit, or a leading zero) */
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
        return NULL;
    p += 2;
    if (value > max_bulk || value + 2 > end - p || p[value] != '\r' || p[value + 1] != '\n')
        return NULL;
    *length = (Py_ssize_t)value;
    return p;
}

static PyObject *
scan_fast_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_fast_run(data: bytes, template: list, lo: int, max_count: int, max_bulk: int)");
        return NULL;
    }
    PyObject *data = args[0], *template = args[1];
    int overflow = 0;
    long long lo = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (lo == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || lo < 1 || lo > DECIMAL_RUN_MAX_LO)
        Py_RETURN_NONE;
    Py_ssize_t max_count = PyLong_AsSsize_t(args[3]);
    if (max_count == -1 && PyErr_Occurred())
        return NULL;
    long long max_bulk = PyLong_AsLongLongAndOverflow(args[4], &overflow);
    if (max_bulk == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        max_bulk = overflow > 0 ? LLONG_MAX : -1;
    if (max_count < 1 || PyList_GET_SIZE(template) != 9)
        Py_RETURN_NONE;
    if (max_count > SCAN_MAX_COUNT)
        max_count = SCAN_MAX_COUNT;
    PyObject *const *word = ((PyListObject *)template)->ob_item;
    Py_ssize_t fixed = 0;
    for (int w = 0; w < 9; w++) {
        if (!PyBytes_CheckExact(word[w]))
            Py_RETURN_NONE;
        if (w != 3 && w != 5)
            fixed += PyBytes_GET_SIZE(word[w]) + 24;  /* (a header and CRLF: at most 24 bytes) */
    }
    if (fixed > SCAN_TEMPLATE_MAX)
        Py_RETURN_NONE;
    /* The fixed words in RESP: ``before`` (*9, name, key, id, the batch-seq, the
       subject: one compare a command) and ``tail`` (FAST, flow, gap).  The
       batch-seq's digits are right-aligned in digits[] (as decimal_run) and
       copied into ``before`` as it counts up; ``before`` is spelled again from
       the seq on when their width grows. */
    char before[SCAN_TEMPLATE_MAX + 40], tail[SCAN_TEMPLATE_MAX];
    char *w = WRITE_LITERAL(before, "*9\r\n");
    for (int i = 0; i < 3; i++)
        w = write_bulk(w, PyBytes_AS_STRING(word[i]), PyBytes_GET_SIZE(word[i]));
    char *seq_at = w;
    char digits[24];
    char *digits_end = digits + sizeof(digits);
    char *start = entries_decimal(lo, digits_end);
    const char *subject = PyBytes_AS_STRING(word[4]);
    Py_ssize_t subject_size = PyBytes_GET_SIZE(word[4]);
    w = write_bulk(seq_at, start, digits_end - start);
    char *seq_digits_end = w - 2;
    Py_ssize_t before_size = write_bulk(w, subject, subject_size) - before;
    w = tail;
    for (int i = 6; i < 9; i++)
        w = write_bulk(w, PyBytes_AS_STRING(word[i]), PyBytes_GET_SIZE(word[i]));
    Py_ssize_t tail_size = w - tail;
    Py_ssize_t data_at[SCAN_MAX_COUNT], data_size[SCAN_MAX_COUNT];
    const char *begin = PyBytes_AS_STRING(data);
    const char *end = begin + PyBytes_GET_SIZE(data);
    const char *p = begin;
    Py_ssize_t count = 0;
    while (count < max_count) {
        const char *q = p;
        if (end - q < before_size || memcmp(q, before, (size_t)before_size) != 0)
            break;
        Py_ssize_t length;
        q = scan_data_header(q + before_size, end, max_bulk, &length);
        if (q == NULL)
            break;
        data_at[count] = q - begin;
        data_size[count] = length;
        q += length + 2;
        if (end - q < tail_size || memcmp(q, tail, (size_t)tail_size) != 0)
            break;
        p = q + tail_size;
        count++;
        char *digit = digits_end - 1;  /* the next batch-seq: + 1 with its carry */
        while (digit >= start && *digit == '9')
            *digit-- = '0';
        if (digit >= start) {
            (*digit)++;
            memcpy(seq_digits_end - (digits_end - start), start, (size_t)(digits_end - start));
        }
        else {
            *--start = '1';  /* (at most 18 digits: lo + count < 10**18) */
            w = write_bulk(seq_at, start, digits_end - start);
            seq_digits_end = w - 2;
            before_size = write_bulk(w, subject, subject_size) - before;
        }
    }
    if (count == 0)
        Py_RETURN_NONE;
    PyObject *datas = PyTuple_New(count);
    if (datas == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyBytes_FromStringAndSize(begin + data_at[i], data_size[i]);
        if (item == NULL) {
            Py_DECREF(datas);  /* (the slots not filled yet are NULL: tupledealloc skips them) */
            return NULL;
        }
        PyTuple_SET_ITEM(datas, i, item);
    }
    PyObject *result = PyTuple_New(3);
    PyObject *count_object = result != NULL ? PyLong_FromSsize_t(count) : NULL;
    PyObject *consumed_object = count_object != NULL ? PyLong_FromSsize_t(p - begin) : NULL;
    if (consumed_object == NULL) {
        Py_XDECREF(count_object);
        Py_XDECREF(result);
        Py_DECREF(datas);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, count_object);
    PyTuple_SET_ITEM(result, 1, datas);
    PyTuple_SET_ITEM(result, 2, consumed_object);
    return result;
}

static PyMethodDef speedups_methods[] = {
    {"parse_many", (PyCFunction)(void (*)(void))parse_many, METH_FASTCALL,
     "parse_many(data, max_bulk) -> list of commands (lists of bytes) when data is whole\n"
     "RESP multibulks of bulk strings, else None."},
    {"parse_one", (PyCFunction)(void (*)(void))parse_one, METH_FASTCALL,
     "parse_one(data, max_bulk) -> the command (a list of bytes) when data is exactly one\n"
     "RESP multibulk of bulk strings, else None."},
    {"encode_table_page", (PyCFunction)(void (*)(void))encode_table_page, METH_FASTCALL,
     "encode_table_page(protocol, stream, tables, subjects, pending, last_seq, budget) -> (bytes, n):\n"
     "a DGET page's messages from the log's tables (engine Stream.read_tables), in one buffer."},
    {"encode_stream_id_run", (PyCFunction)(void (*)(void))encode_stream_id_run, METH_FASTCALL,
     "encode_stream_id_run(ms, first_seq, count) -> the ids ms-first_seq, ms-(first_seq+1), ...\n"
     "(count of them) as RESP bulk strings, concatenated (resp/xentries.py's, in C)."},
    {"decimal_run", (PyCFunction)(void (*)(void))decimal_run, METH_FASTCALL,
     "decimal_run(seqs, lo) -> True if the tuple of bytes seqs is b'%d' % lo, b'%d' % (lo + 1), ...,\n"
     "False if not, None when it cannot tell (lo < 1 or > 10**17, an element not bytes)."},
    {"parse_read", (PyCFunction)(void (*)(void))parse_read, METH_FASTCALL,
     "parse_read(data, max_bulk) -> the command when data is exactly one RESP multibulk of\n"
     "bulk strings, (list of commands,) when it is several, else None."},
    {"run_end", (PyCFunction)(void (*)(void))run_end, METH_FASTCALL,
     "run_end(commands, at) -> the index after the run of commands starting at ``at``\n"
     "(as many words, the same first word)."},
    {"encode_stream_tables", (PyCFunction)(void (*)(void))encode_stream_tables, METH_FASTCALL,
     "encode_stream_tables(protocol, key, tables, subjects, last_ms, last_seq, packed) -> (reply, texts, ids)\n"
     "or None: XREADGROUP's new entries from the log's tables, their ids derived from their times\n"
     "(resp/xentries.py's, in C)."},
    {"fast_run_columns", (PyCFunction)(void (*)(void))fast_run_columns, METH_FASTCALL,
     "fast_run_columns(argvs, lo) -> (subjects, datas) of a run of 'BATCH key id seq subject data\n"
     "FAST flow gap' commands alike with batch-seqs lo, lo + 1, ...; False if not; None: cannot tell."},
    {"encode_integer_run", (PyCFunction)(void (*)(void))encode_integer_run, METH_FASTCALL,
     "encode_integer_run(first, count) -> the integers first, first + 1, ... (count of them) as RESP\n"
     "integer replies, concatenated (resp/encode.py's encode_integer_run_python, in C)."},
    {"integer_reply", (PyCFunction)integer_reply, METH_O,
     "integer_reply(value) -> b':%d\\r\\n' % value (an int)."},
    {"plain_positive_ints", (PyCFunction)(void (*)(void))plain_positive_ints, METH_FASTCALL,
     "plain_positive_ints(words, start) -> the ints of words[start:] when each is a plain decimal\n"
     "number >= 1 of at most 18 digits (no sign, no leading zero), else None."},
    {"encode_entries", (PyCFunction)(void (*)(void))encode_entries, METH_FASTCALL,
     "encode_entries(entries, resp3) -> TREAD's reply: the entries [offset, tag, data] (or None)\n"
     "as RESP (resp/encode.py's encode_entries_python, in C)."},
    {"scan_fast_run", (PyCFunction)(void (*)(void))scan_fast_run, METH_FASTCALL,
     "scan_fast_run(data, template, lo, max_count, max_bulk) -> (count, datas, consumed): the read's\n"
     "leading commands that are the 9-word BATCH ... FAST template with batch-seqs lo, lo + 1, ...\n"
     "and any data; None if not even one (resp/scan.py's scan_fast_run_python, in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "tstream.resp._speedups",
    "The request parser's hot path, DGET pages' writer, XADD runs' id replies and FAST runs'\n"
    "batch-seq check in C (optional: each caller falls back to Python).",
    0,
    speedups_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
