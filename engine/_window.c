/* tstream.engine._window: the MSGID duplicate window in C (optional; engine/ingest.py
   ``Ingest.window``, with ``PyWindow`` of engine/ingest.py as its fallback).

   A ``Window`` holds the message ids stored within a stream's duplicate window, each
   with the offset it was stored at, and the expiry records (one per write or
   pipelined run: its time and its ids, oldest first).  Its methods are those of
   ``PyWindow`` (a dict id -> offset and a deque of record tuples), which it replaces
   because a million ids in a dict, their bytes objects, int offsets and record
   tuples spread over the heap: every claim and every expiry missed the CPU caches
   several times per id (bench/RESULTS-fast-ingest.md, round 11).

   Layout (no Python object is kept):

   - ``chunks``: the ids in the order entered, each an ``Entry`` header of 16 bytes
     (offset, 32-bit hash, length with a live bit) followed by its bytes (padded to
     8), in blocks of 64 KiB (the first from PyMem_Malloc, the others mappings
     of their own: chunk_alloc).
     An entry is named by its position (``pos``, which only grows): block
     ``pos >> 16`` (counted from ``first_chunk``), byte ``pos & 0xffff``.  An entry
     never straddles two blocks: one that does not fit in the rest of a block
     starts the next one (a ``PAD_LENGTH`` header marks the rest, when there is
     room for a header), and an entry longer than a block has a block of its own,
     as long as it, at the next block's position.  Expiry frees the blocks before
     the oldest record: the memory is the ids' own plus at most a block, and
     nothing is ever moved.
   - ``slots``: an open-addressing table (linear probing, power-of-two size, load
     at most 0.7, deletion by backward shift: no tombstones) of (hash, ref), 8 bytes
     a slot: a million ids fill a table of 16 MiB, not 32 (16-byte slots before
     round 15: its probe, one cache miss a new id, missed the last-level cache
     more often).  The hash is a wyhash-style mix of the id's bytes keyed per
     window (from the interpreter's hash secret and a counter: PYTHONHASHSEED
     fixes it), folded to 32 bits, so colliding ids cannot be made without the
     key; its low bits are the slot's home.  A probe reads an entry's bytes only
     when the 32-bit hashes are equal (another id's: rare, and only a read more,
     never a wrong answer).  ``ref`` is the entry's position / 8 modulo 2^32:
     the entries the table points at lie in [head, tail), at most MAX_SPAN
     (32 GiB) apart, so head's position gives the rest.
   - A table that grows is not rehashed at once (a million ids took 35 ms of the loop
     in the server: bench/RESULTS-fast-ingest.md, round 18) but migrated: the bigger
     table takes every new id, and each call that enters ids first moves
     MOVES_PER_ID old slots an id into it (``migrate``), a cluster (a run of full
     slots) at a time, in order from just after a slot that was empty; so the part
     not yet moved holds whole clusters, a probe of the old table starts there (an
     id whose home was moved is not in it) and stays there, and so do its deletes.
     The old table is gone before the new one can need to grow (it takes at most
     1/64 of the old size in ids meanwhile, and while it runs a probe may read both
     tables, so it is kept short: a claim of 64 ids moves ~4,096 slots, ~40 us); if
     it must grow sooner (one call of very many ids), the migration finishes at
     once.  A window that stops taking ids ends its migration as it is checked or
     expired (``expire_to``: 4,096 slots a call).  A mapped table's pages are made
     before it is used (``prepare_next``: from 0.68 full on, at least a huge page a
     call, in step with the ids entered), or the first run of ids after the growth,
     landing all over it, would fault in (and zero) the whole of it at once: 4 ms
     for 32 MiB.  So a table between 0.68 and 0.7 full (and until it falls back
     under 0.64) has its successor, twice its size, beside it.
   - ``records``: a ring of (time_ns, start, end): the entries of one write or run
     are contiguous.  Expiry pops the records at or before the horizon and deletes
     each of their entries still live (an id entered again later has its slot on
     the newer entry and the older one marked not live), finding its slot by hash
     and position: no bytes compared.

   Every method that enters ids makes room first (entries, slots, records), so a
   MemoryError leaves the window as it was; after that nothing allocates.

   A table of 2 MiB or more (2^18 slots: from ~92,000 ids, the table growing past 0.7 full) is its own anonymous
   mapping, aligned to 2 MiB and marked MADV_HUGEPAGE (table_alloc): each claim
   probes the table at a random place, and on 4 KiB pages that probe was also a TLB
   miss and a page walk (4,096 pages for a million ids' 16 MiB); on 2 MiB pages the
   whole table is 8 TLB entries.  Transparent huge pages are often in ``madvise``
   mode, where memory from malloc gets none.  When the mapping fails the table comes
   from PyMem_Calloc as below that size (bench/RESULTS-fast-ingest.md, round 16). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

typedef struct {
    int64_t offset;
    uint32_t hash;     /* the id's hash (never 0) */
    uint32_t length;   /* | LIVE while the table's slot for this id points here */
} Entry;               /* followed by ``length`` bytes, padded to 8 */

typedef struct {
    uint32_t hash;     /* 0: empty */
    uint32_t ref;      /* the entry's pos / 8, modulo 2^32 (see REF_POS) */
} Slot;

typedef struct {
    unsigned char *data;
    size_t size;          /* CHUNK, or more: one entry longer than CHUNK */
    size_t mapped;        /* the length of its mapping (0: from PyMem_Malloc; see chunk_alloc) */
} Chunk;

typedef struct {
    int64_t time_ns;
    uint64_t start, end;  /* entries [start, end) */
} Record;

typedef struct {
    PyObject_HEAD
    uint64_t key;
    Slot *slots;
    size_t slots_mapped;  /* the table's mapping's length (0: from PyMem_Calloc) */
    size_t mask;          /* slots - 1 (0: no table yet) */
    size_t count;         /* ids in the table (and in the old one, during a migration) */
    Slot *old;            /* during a migration: the table being moved into ``slots`` (else NULL) */
    size_t old_mapped, old_mask;
    size_t old_start;     /* the slot after one that was empty when the migration began */
    size_t moved;         /* old slots done, from old_start on, cyclically */
    Slot *next;           /* the next, bigger table, made ready ahead (prepare_next; else NULL) */
    size_t next_mapped, next_size, next_ready;  /* its mapping, slots, bytes populated */
    size_t next_taken;    /* growths that took a prepared table (for the tests) */
    Chunk *chunks;        /* blocks first_chunk, first_chunk + 1, ... */
    size_t chunks_count, chunks_capacity;
    uint64_t first_chunk;
    uint64_t head, tail;  /* the positions of the records' entries: [head, tail) */
    Record *records;
    size_t records_mask;  /* ring size - 1 (0: none yet) */
    size_t first, records_count;
} Window;

#define ENTRY_SIZE(length) (sizeof(Entry) + (((size_t)(length) + 7) & ~(size_t)7))
#define CHUNK_SHIFT 16
#define CHUNK ((uint64_t)1 << CHUNK_SHIFT)
#define CHUNK_MASK (CHUNK - 1)
#define NEXT_CHUNK(pos) (((pos) + CHUNK_MASK) & ~CHUNK_MASK)
#define LIVE ((uint32_t)1 << 31)  /* in Entry.length: the table points at this entry */
#define PAD_LENGTH (LIVE - 1)     /* the header of a block's unused rest; ids are shorter */
#define LENGTH(e) ((e)->length & ~LIVE)
/* A slot names its entry by ``pos / 8`` in 32 bits (entries start at multiples of 8):
   every entry the table points at lies in [head, tail), and that span is kept under
   MAX_SPAN bytes (reserve_entries), so the position is head's plus the difference. */
#define REF(pos) ((uint32_t)((pos) >> 3))
#define REF_POS(w, ref) ((w)->head + ((uint64_t)(uint32_t)((ref) - REF((w)->head)) << 3))
#define MAX_SPAN ((uint64_t)1 << 35)
#define MAX_SLOTS ((size_t)1 << 32)  /* the index is the low bits of a 32-bit hash */
#define ENTRY_AT(w, pos) \
    ((Entry *)((w)->chunks[((pos) >> CHUNK_SHIFT) - (w)->first_chunk].data + ((pos) & CHUNK_MASK)))
#define RECORD(w, i) (&(w)->records[((w)->first + (i)) & (w)->records_mask])
#define MIN_SLOTS 64
#define CLAIM_AHEAD 16  /* ids hashed and their slots prefetched ahead of the probe (claim) */
#define DROP_AHEAD 16   /* entries whose slots are prefetched ahead of their deletion (drop_entries) */
#define MOVE_AHEAD 32   /* old slots whose new place is prefetched ahead of their move (migrate) */
#define MOVES_PER_ID 64 /* old slots moved for each id entered while a migration runs (migrate) */
#define SETTLE_MOVES 4096  /* old slots moved by a check or an expiry, which enter no id (settle) */
#define NO_SLOT SIZE_MAX
#if defined(__GNUC__) || defined(__clang__)
/* Into the L1 cache (prefetcht0): the probe reads the slot a few ids later.  Locality 1
   (prefetcht2: into L2 only) left each probe an L2 access more; with locality 3 a claim
   that also ages ids out costs ~7% less (bench/RESULTS-fast-ingest.md, round 17). */
#define PREFETCH(p) __builtin_prefetch((p), 1, 3)
#else
#define PREFETCH(p) ((void)0)
#endif

static uint64_t window_counter;
/* The process's keys for the windows' hashes, taken at import from the hashes of two
   constants: bytes hashes are keyed by the interpreter's secret (PYTHONHASHSEED), so
   these are as secret as str/bytes hashes are, through the public API only (the
   interpreter's own _Py_HashSecret is internal from Python 3.13). */
static uint64_t process_key0, process_key1;

/* --- the hash: wyhash's mix (64x64 -> 128 multiply, halves folded) ------------------ */

static inline uint64_t
mum(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t
read8(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t
read4(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

#define S0 0xa0761d6478bd642full
#define S1 0xe7037ed1a0b428dbull
#define S2 0x8ebc6af09c88c6e3ull

static inline uint32_t
hash_bytes(const unsigned char *p, size_t length, uint64_t seed)
{
    uint64_t a, b;
    if (length <= 16) {
        if (length >= 4) {
            size_t shift = (length >> 3) << 2;
            a = (read4(p) << 32) | read4(p + shift);
            b = (read4(p + length - 4) << 32) | read4(p + length - 4 - shift);
        }
        else if (length > 0) {
            a = ((uint64_t)p[0] << 16) | ((uint64_t)p[length >> 1] << 8) | p[length - 1];
            b = 0;
        }
        else {
            a = b = 0;
        }
    }
    else {
        size_t i = length;
        const unsigned char *q = p;
        while (i > 16) {
            seed = mum(read8(q) ^ S1, read8(q + 8) ^ seed);
            q += 16;
            i -= 16;
        }
        a = read8(q + i - 16);
        b = read8(q + i - 8);
    }
    uint64_t h = mum(S1 ^ length, mum(a ^ S1, b ^ seed));
    uint32_t folded = (uint32_t)h ^ (uint32_t)(h >> 32);
    return folded ? folded : 1;  /* (0 marks an empty slot) */
}

/* --- the table ------------------------------------------------------------------------ */

#define HUGE_PAGE ((size_t)2 << 20)
/* Tables of this many bytes or more are mapped (table_alloc); tests lower it, and
   make every mapping fail to try the fallback (the module's _set_mapping). */
static size_t mapped_min = HUGE_PAGE;
static int mappings_fail;

/* ``size`` bytes of zeros for a table; ``*mapped``: the length to unmap, or 0 when the
   memory is PyMem_Calloc's (a small table, or the mapping failed).  NULL: no memory
   (no exception set). */
static void *
table_alloc(size_t size, size_t *mapped)
{
    *mapped = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
    if (size >= mapped_min && !mappings_fail && size <= PY_SSIZE_T_MAX - 2 * HUGE_PAGE) {
        size_t length = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        /* (a huge page more, so that an aligned start lies within; the rest unmapped) */
        unsigned char *base = mmap(NULL, length + HUGE_PAGE, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base != MAP_FAILED) {
            uintptr_t start = ((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
            size_t before = (size_t)(start - (uintptr_t)base);
            if (before)
                munmap(base, before);
            if (HUGE_PAGE - before)
                munmap((unsigned char *)start + length, HUGE_PAGE - before);
            /* (a hint only: where huge pages are off or none are free, 4 KiB pages) */
            madvise((void *)start, length, MADV_HUGEPAGE);
            *mapped = length;
            return (void *)start;
        }
    }
#endif
    return PyMem_Calloc(size, 1);
}

static void
table_free(void *table, size_t mapped)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
    if (mapped) {
        munmap(table, mapped);
        return;
    }
#endif
    PyMem_Free(table);
}

/* ``size`` bytes for a block of entries.  A window's first block comes from
   PyMem_Malloc, as a small window's only block: its pages are made as ids are
   written.  Each later one (a window that grows past a block: ~2,000 ids) is its
   own anonymous mapping with its pages made at once (MADV_POPULATE_WRITE), and
   PyMem_Malloc's where that fails (``*mapped`` 0).  A growing window wrote each new
   block's pages one page fault at a time (16 a block: one every 128 ids), and its
   blocks between the stream's columns on the heap made their reallocs move to fresh
   pages, faulting again: a MSGID writer took 5.7x a TWRITE writer's page faults, now
   1.8x (bench/RESULTS-fast-ingest.md, round 18).  NULL: no memory (none set). */
static unsigned char *
chunk_alloc(size_t size, size_t *mapped, int first)
{
    *mapped = 0;
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (!first && !mappings_fail) {
        unsigned char *data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (data != MAP_FAILED) {
#if defined(MADV_POPULATE_WRITE)
            /* (a hint: where the kernel lacks it, the pages come at first write) */
            madvise(data, size, MADV_POPULATE_WRITE);
#endif
            *mapped = size;
            return data;
        }
    }
#endif
    return PyMem_Malloc(size);
}

static void
chunk_free(unsigned char *data, size_t mapped)
{
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (mapped) {
        munmap(data, mapped);
        return;
    }
#endif
    PyMem_Free(data);
}

static inline int
entry_is(Window *w, uint32_t ref, const char *bytes, size_t length)
{
    Entry *e = ENTRY_AT(w, REF_POS(w, ref));
    return LENGTH(e) == length && memcmp((char *)(e + 1), bytes, length) == 0;
}

/* The slot of the id in a table (``slots``, from slot i on), or of the empty slot where it would go.  A slot of another id
   with the same 32-bit hash costs a read of that entry's bytes: rare (its home and
   the rest of its hash equal), and never a wrong answer. */
static inline size_t
probe(Window *w, const Slot *slots, size_t mask, size_t i, uint32_t hash, const char *bytes, size_t length)
{
    while (slots[i].hash) {
        if (slots[i].hash == hash && entry_is(w, slots[i].ref, bytes, length))
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

/* The id's slot in the table, or the empty slot where it would go (``probe``). */
static inline size_t
find_slot(Window *w, uint32_t hash, const char *bytes, size_t length)
{
    return probe(w, w->slots, w->mask, hash & w->mask, hash, bytes, length);
}

/* Whether slot i of the old table was moved already (or was empty) by the migration. */
static inline int
moved_already(Window *w, size_t i)
{
    return ((i - w->old_start) & w->old_mask) < w->moved;
}

/* During a migration, the id's slot in the old table, if it is there: NO_SLOT
   otherwise.  (Its home moved already: so did its cluster, and the id with it.) */
static inline size_t
find_old(Window *w, uint32_t hash, const char *bytes, size_t length)
{
    if (w->old == NULL)
        return NO_SLOT;
    size_t i = hash & w->old_mask;
    if (moved_already(w, i))
        return NO_SLOT;
    i = probe(w, w->old, w->old_mask, i, hash, bytes, length);
    return w->old[i].hash ? i : NO_SLOT;
}

/* The home slot of a hash, fetched ahead of its probe (in both tables during a migration). */
static inline void
prefetch_home(Window *w, uint32_t hash)
{
    PREFETCH(&w->slots[hash & w->mask]);
    if (w->old != NULL && !moved_already(w, hash & w->old_mask))
        PREFETCH(&w->old[hash & w->old_mask]);
}

/* Empty slot i of a table, shifting back the slots after it whose probe passed it. */
static void
delete_at(Slot *slots, size_t mask, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!slots[j].hash)
            break;
        size_t home = slots[j].hash & mask;
        /* (slot j may move to i when i lies cyclically in [home, j)) */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            slots[i] = slots[j];
            i = j;
        }
    }
    slots[i].hash = 0;
}

/* Delete the slot pointing at the entry at ``pos`` (there is one: the entry is live),
   from whichever table holds it. */
static void
delete_entry_slot(Window *w, uint32_t hash, uint64_t pos)
{
    uint32_t ref = REF(pos);
    Slot *slots = w->slots;
    size_t mask = w->mask;
    for (int table = 0; table < 2; table++) {
        if (table) {  /* (not in the new table: in the old one, not moved yet) */
            if (w->old == NULL)  /* (cannot happen: a live entry has a slot) */
                return;
            slots = w->old;
            mask = w->old_mask;
        }
        for (size_t i = hash & mask; slots[i].hash; i = (i + 1) & mask) {
            if (slots[i].hash == hash && slots[i].ref == ref) {
                delete_at(slots, mask, i);
                w->count--;
                return;
            }
        }
    }
}

/* Move slots of the old table into the new one: at least ``budget`` of them, then on
   to the end of the cluster (an empty slot), so that what is left holds whole
   clusters; the old table is freed once all are moved.  The new table's slots are
   fetched MOVE_AHEAD slots ahead: each move lands at a random place of a table that
   is cold, and these misses then overlap. */
static void
migrate(Window *w, size_t budget)
{
    Slot *old = w->old, *slots = w->slots;
    size_t old_mask = w->old_mask, mask = w->mask, size = old_mask + 1, done = 0;
    while (w->moved < size) {
        size_t k = (w->old_start + w->moved) & old_mask;
        size_t ahead = (k + MOVE_AHEAD) & old_mask;
        if (w->moved + MOVE_AHEAD < size && old[ahead].hash)
            PREFETCH(&slots[old[ahead].hash & mask]);
        w->moved++;
        done++;
        if (old[k].hash) {
            size_t i = old[k].hash & mask;
            while (slots[i].hash)
                i = (i + 1) & mask;
            slots[i] = old[k];
            old[k].hash = 0;
        }
        else if (done >= budget)
            break;
    }
    if (w->moved == size) {
        table_free(old, w->old_mapped);
        w->old = NULL;
        w->old_mapped = w->old_mask = w->old_start = w->moved = 0;
    }
}

static void
free_next(Window *w)
{
    if (w->next != NULL)
        table_free(w->next, w->next_mapped);
    w->next = NULL;
    w->next_mapped = w->next_size = w->next_ready = 0;
}

#define PREPARE_FROM 68   /* percent full from which the next table is made ready (prepare_next) */
#define PREPARE_UNTIL 64  /* percent full under which a table made ready is let go */

/* The table that follows one of ``size`` slots, ``needed`` ids wanted (0.68 to 0.7
   full), made ready a piece a call: mapped, then populated (zeroed) in step with the
   ids from 0.68 to 0.7 full, at least a huge page a call, so that it is whole when
   the growth takes it and no call zeroes all of it (see the layout).  Only for
   tables that will be mappings; a failure leaves it for the growth to allocate
   (nothing raised). */
static void
prepare_next(Window *w, size_t size, size_t needed)
{
    size_t bytes = 2 * size * sizeof(Slot);
    if (bytes < mapped_min || mappings_fail || size >= MAX_SLOTS)
        return;
    if (w->next != NULL && w->next_size != 2 * size)  /* (another size's: cannot happen) */
        free_next(w);
    if (w->next == NULL) {
        size_t mapped;
        Slot *next = table_alloc(bytes, &mapped);
        if (next == NULL)
            return;
        w->next = next;
        w->next_mapped = mapped;
        w->next_size = 2 * size;
        w->next_ready = mapped ? 0 : bytes;  /* (PyMem_Calloc's: nothing to do) */
    }
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    if (w->next_ready < bytes) {
        /* (the share of the band from 0.68 to 0.7 full passed, of the table's bytes) */
        size_t from = size / 100 * PREPARE_FROM, band = size / 100 * 70 - from;
        size_t passed = needed > from ? needed - from : 0;
        size_t target = band && passed < band ? (size_t)((double)bytes * (double)passed / (double)band) : bytes;
        target = (target + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        if (target < w->next_ready + HUGE_PAGE)
            target = w->next_ready + HUGE_PAGE;
        if (target > bytes)
            target = bytes;
        madvise((unsigned char *)w->next + w->next_ready, target - w->next_ready, MADV_POPULATE_WRITE);
        w->next_ready = target;
    }
#endif
}

/* The slots a call entering ``ids`` ids moves while a migration runs. */
static inline size_t
moves_for(size_t ids)
{
    return ids > SIZE_MAX / MOVES_PER_ID ? SIZE_MAX : ids * MOVES_PER_ID;
}

/* Room in the tables for ``more`` ids: a bigger table, into which the ids already
   entered migrate, when the table would be more than 0.7 full (see the layout).
   -1: MemoryError (the window as it was). */
static int
reserve_slots(Window *w, size_t more)
{
    size_t needed = w->count + more;
    size_t size = w->mask ? w->mask + 1 : 0;
    if (size && needed * 10 <= size * 7) {
        if (needed * 100 > size * PREPARE_FROM)
            prepare_next(w, size, needed);
        else if (w->next != NULL && needed * 100 <= size * PREPARE_UNTIL)  /* (the window shrank back) */
            free_next(w);
        return 0;
    }
    size_t new_size = MIN_SLOTS;
    while (needed * 10 > new_size * 7) {
        if (new_size >= MAX_SLOTS || new_size > PY_SSIZE_T_MAX / (2 * sizeof(Slot))) {
            PyErr_NoMemory();
            return -1;
        }
        new_size <<= 1;
    }
    size_t mapped;
    Slot *slots;
    if (w->next != NULL && w->next_size == new_size) {  /* (made ready: prepare_next) */
        slots = w->next;
        mapped = w->next_mapped;
        w->next = NULL;
        w->next_mapped = w->next_size = w->next_ready = 0;
        w->next_taken++;
    }
    else {
        slots = table_alloc(new_size * sizeof(Slot), &mapped);
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        free_next(w);
    }
    if (w->old != NULL)  /* (the table must grow again before its migration is over: rare) */
        migrate(w, SIZE_MAX);
    if (!w->count) {  /* nothing to move */
        table_free(w->slots, w->slots_mapped);
    }
    else {
        size_t empty = 0;  /* (there is one: the table is at most 0.7 full) */
        while (w->slots[empty].hash)
            empty++;
        w->old = w->slots;
        w->old_mapped = w->slots_mapped;
        w->old_mask = w->mask;
        w->old_start = (empty + 1) & w->mask;
        w->moved = 0;
    }
    w->slots = slots;
    w->slots_mapped = mapped;
    w->mask = new_size - 1;
    return 0;
}

/* Where an entry of ``size`` bytes goes, the next position being ``pos``: there, or
   at the next block when it does not fit in the rest of this one (an entry longer
   than a block starts one, and the one after it starts the next). */
static inline uint64_t
place(uint64_t pos, size_t size)
{
    return size > CHUNK - (pos & CHUNK_MASK) ? NEXT_CHUNK(pos) : pos;
}

static inline uint64_t
after(uint64_t pos, size_t size)
{
    return size > CHUNK ? pos + CHUNK : pos + size;
}

/* The entry at or after ``pos`` (below a record's end: there is one). */
static inline uint64_t
entry_start(Window *w, uint64_t pos)
{
    if (CHUNK - (pos & CHUNK_MASK) < sizeof(Entry) || ENTRY_AT(w, pos)->length == PAD_LENGTH)
        return NEXT_CHUNK(pos);
    return pos;
}

/* Block ``number`` there, of at least ``size`` bytes. -1: MemoryError (the blocks
   made so far stay, empty, for the next entries: the window is the same). */
static int
reserve_chunk(Window *w, uint64_t number, size_t size)
{
    if (!w->chunks_count)
        w->first_chunk = number;
    size_t index = (size_t)(number - w->first_chunk);
    if (number < w->first_chunk || index > w->chunks_count) {  /* (cannot happen: placed in order) */
        PyErr_SetString(PyExc_SystemError, "window block out of order");
        return -1;
    }
    if (index < w->chunks_count) {
        Chunk *c = &w->chunks[index];
        if (c->size < size) {  /* (a block left by a refused run, now for a long entry: empty) */
            size_t mapped;
            unsigned char *data = chunk_alloc(size, &mapped, index == 0);
            if (data == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            chunk_free(c->data, c->mapped);
            c->data = data;
            c->size = size;
            c->mapped = mapped;
        }
        return 0;
    }
    if (w->chunks_count == w->chunks_capacity) {
        size_t capacity = w->chunks_capacity ? 2 * w->chunks_capacity : 8;
        if (capacity > PY_SSIZE_T_MAX / sizeof(Chunk)) {
            PyErr_NoMemory();
            return -1;
        }
        Chunk *chunks = PyMem_Realloc(w->chunks, capacity * sizeof(Chunk));
        if (chunks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->chunks = chunks;
        w->chunks_capacity = capacity;
    }
    size_t mapped;
    unsigned char *data = chunk_alloc(size, &mapped, w->chunks_count == 0);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->chunks[w->chunks_count].data = data;
    w->chunks[w->chunks_count].size = size;
    w->chunks[w->chunks_count].mapped = mapped;
    w->chunks_count++;
    return 0;
}

/* The blocks for the entries of ``items`` (``size_of`` each: 0, no entry; ``bytes``
   in all) from tail on, placed as ``enter`` will place them. -1: MemoryError. */
static int
reserve_entries(Window *w, PyObject *const *items, Py_ssize_t n, size_t (*size_of)(PyObject *), size_t bytes)
{
    uint64_t pos = w->tail;
    if (bytes <= CHUNK - (pos & CHUNK_MASK) && (pos >> CHUNK_SHIFT) - w->first_chunk < w->chunks_count
            && (pos >> CHUNK_SHIFT) >= w->first_chunk && pos + bytes - w->head < MAX_SPAN)
        return 0;  /* (the usual run: all in the rest of tail's block) */
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t size = size_of(items[i]);
        if (!size)
            continue;
        uint64_t at = place(pos, size);
        if (after(at, size) - w->head >= MAX_SPAN) {  /* (32 GiB of ids: more than a slot can name) */
            PyErr_NoMemory();
            return -1;
        }
        if (reserve_chunk(w, at >> CHUNK_SHIFT, size > CHUNK ? size : CHUNK) < 0)
            return -1;
        pos = after(at, size);
    }
    return 0;
}

static size_t
size_of_id(PyObject *mid)
{
    return mid == Py_None ? 0 : ENTRY_SIZE(PyBytes_GET_SIZE(mid));
}

static size_t
size_of_pair(PyObject *pair)
{
    return ENTRY_SIZE(PyBytes_GET_SIZE(PyTuple_GET_ITEM(pair, 0)));
}

/* Free the blocks before head's. */
static void
free_chunks(Window *w)
{
    size_t done = 0;
    while (done < w->chunks_count && w->first_chunk + done < (w->head >> CHUNK_SHIFT)) {
        chunk_free(w->chunks[done].data, w->chunks[done].mapped);
        done++;
    }
    if (done) {
        w->chunks_count -= done;
        memmove(w->chunks, w->chunks + done, w->chunks_count * sizeof(Chunk));
        w->first_chunk += done;
    }
}

/* Room for one more record. -1: MemoryError. */
static int
reserve_record(Window *w)
{
    size_t size = w->records_mask ? w->records_mask + 1 : 0;
    if (w->records_count < size)
        return 0;
    size_t new_size = size ? size * 2 : 16;
    if (new_size > PY_SSIZE_T_MAX / sizeof(Record)) {
        PyErr_NoMemory();
        return -1;
    }
    Record *records = PyMem_Malloc(new_size * sizeof(Record));
    if (records == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < w->records_count; i++)
        records[i] = *RECORD(w, i);
    PyMem_Free(w->records);
    w->records = records;
    w->records_mask = new_size - 1;
    w->first = 0;
    return 0;
}

/* Append an entry at tail and its slot at ``slot`` (empty, or the id's older entry). */
static inline void
enter(Window *w, size_t slot, uint32_t hash, const char *bytes, size_t length, int64_t offset)
{
    size_t size = ENTRY_SIZE(length);
    uint64_t at = place(w->tail, size);
    if (at != w->tail && CHUNK - (w->tail & CHUNK_MASK) >= sizeof(Entry))
        ENTRY_AT(w, w->tail)->length = PAD_LENGTH;
    Entry *e = ENTRY_AT(w, at);
    e->offset = offset;
    e->hash = hash;
    e->length = (uint32_t)length | LIVE;
    memcpy((char *)(e + 1), bytes, length);
    if (w->slots[slot].hash)  /* (entered again: the newer entry holds it) */
        ENTRY_AT(w, REF_POS(w, w->slots[slot].ref))->length &= ~LIVE;
    else
        w->count++;
    w->slots[slot].hash = hash;
    w->slots[slot].ref = REF(at);
    w->tail = after(at, size);
}

static inline void
push_record(Window *w, int64_t time_ns, uint64_t start)
{
    Record *r = RECORD(w, w->records_count);
    r->time_ns = time_ns;
    r->start = start;
    r->end = w->tail;
    w->records_count++;
}

/* The entry at or after ``*ahead`` (below a record's end): its slot prefetched if it is
   live; ``*ahead`` moved past it. */
static inline void
prefetch_entry_slot(Window *w, uint64_t *ahead)
{
    uint64_t pos = entry_start(w, *ahead);
    Entry *e = ENTRY_AT(w, pos);
    if (e->length & LIVE)
        prefetch_home(w, e->hash);
    *ahead = after(pos, ENTRY_SIZE(LENGTH(e)));
}

/* Delete the live entries in [start, end) from the table. */
static void
drop_entries(Window *w, uint64_t start, uint64_t end)
{
    /* A second cursor runs DROP_AHEAD entries ahead of the deletions and prefetches the
       home slot of each live entry it passes: in a table of a million ids each slot_of
       probe missed the caches, one after another, as the claim's probes did before
       they were prefetched (bench/RESULTS-fast-ingest.md, rounds 12 and 17). */
    uint64_t ahead = start;
    for (int k = 0; k < DROP_AHEAD && ahead < end; k++)
        prefetch_entry_slot(w, &ahead);
    for (uint64_t pos = start; pos < end;) {
        if (ahead < end)
            prefetch_entry_slot(w, &ahead);
        pos = entry_start(w, pos);
        Entry *e = ENTRY_AT(w, pos);
        if (e->length & LIVE) {
            e->length &= ~LIVE;
            delete_entry_slot(w, e->hash, pos);
        }
        pos = after(pos, ENTRY_SIZE(LENGTH(e)));
    }
}

static void
expire_to(Window *w, int64_t horizon)
{
    while (w->records_count && w->records[w->first].time_ns <= horizon) {
        Record *r = &w->records[w->first];
        drop_entries(w, r->start, r->end);
        w->first = (w->first + 1) & w->records_mask;
        w->records_count--;
        w->head = w->records_count ? w->records[w->first].start : w->tail;
    }
    free_chunks(w);
    if (w->old != NULL && !w->count)  /* (nothing left to move) */
        migrate(w, SIZE_MAX);
    if (!w->records_count && w->mask >= 4096) {  /* emptied: the table's memory back */
        free_next(w);
        table_free(w->slots, w->slots_mapped);
        w->slots = NULL;
        w->slots_mapped = 0;
        w->mask = 0;
    }
}

/* In a call that enters no id (``seen``, ``expire``): a step of a running migration,
   so that a window that stops taking ids still ends it and frees the old table, and
   the next table let go once the window is back under 0.64 full, as a call that
   enters ids would (``reserve_slots``). */
static void
settle(Window *w)
{
    if (w->old != NULL)
        migrate(w, SETTLE_MOVES);
    if (w->next != NULL && w->count * 100 <= (w->mask + 1) * PREPARE_UNTIL)
        free_next(w);
}

/* The bytes of an id (bytes only: what the server's parser and the files give). */
static inline int
id_bytes(PyObject *mid, const char **bytes, size_t *length)
{
    if (!PyBytes_Check(mid)) {
        PyErr_Format(PyExc_TypeError, "a message id must be bytes, not %.100s", Py_TYPE(mid)->tp_name);
        return -1;
    }
    *bytes = PyBytes_AS_STRING(mid);
    *length = (size_t)PyBytes_GET_SIZE(mid);
    if (*length >= PAD_LENGTH) {
        PyErr_SetString(PyExc_OverflowError, "message id too long");
        return -1;
    }
    return 0;
}

static int
as_int64(PyObject *value, int64_t *out)
{
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "an int is required, not %.100s", Py_TYPE(value)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* --- methods -------------------------------------------------------------------------- */

static PyObject *
window_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Window() takes no arguments");
        return NULL;
    }
    Window *w = (Window *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    window_counter++;
    w->key = mum(process_key0 ^ S0, (process_key1 + window_counter) ^ S2);
    return (PyObject *)w;
}

static void
window_clear_all(Window *w)
{
    table_free(w->slots, w->slots_mapped);
    if (w->old != NULL)
        table_free(w->old, w->old_mapped);
    w->old = NULL;
    w->old_mapped = w->old_mask = w->old_start = w->moved = 0;
    free_next(w);
    for (size_t i = 0; i < w->chunks_count; i++)
        chunk_free(w->chunks[i].data, w->chunks[i].mapped);
    PyMem_Free(w->chunks);
    PyMem_Free(w->records);
    w->slots = NULL;
    w->chunks = NULL;
    w->records = NULL;
    w->slots_mapped = w->mask = w->count = w->chunks_count = w->chunks_capacity = 0;
    w->records_mask = w->first = w->records_count = 0;
    w->first_chunk = w->head = w->tail = 0;
}

static void
window_dealloc(Window *w)
{
    window_clear_all(w);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static Py_ssize_t
window_length(Window *w)
{
    return (Py_ssize_t)w->count;
}

static int
check_args(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected, nargs);
        return -1;
    }
    return 0;
}

/* claim(ids, offset, horizon, stored_ns): see the method's doc. */
static PyObject *
window_claim(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_args("claim", nargs, 4) < 0)
        return NULL;
    PyObject *ids = args[0];
    int64_t offset, horizon, stored_ns;
    if (!PyTuple_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "claim() takes a tuple of ids");
        return NULL;
    }
    if (as_int64(args[1], &offset) < 0 || as_int64(args[2], &horizon) < 0 || as_int64(args[3], &stored_ns) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(ids);
    if (offset < 0 || offset > INT64_MAX - n) {
        PyErr_SetString(PyExc_OverflowError, "claim() offset out of range");
        return NULL;
    }
    size_t bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *data;
        size_t length;
        if (id_bytes(PyTuple_GET_ITEM(ids, i), &data, &length) < 0)
            return NULL;
        bytes += ENTRY_SIZE(length);
    }
    if (w->count)  /* (as the fallback: records left with no id wait for the next id) */
        expire_to(w, horizon);
    if (reserve_slots(w, (size_t)n) < 0 || reserve_entries(w, &PyTuple_GET_ITEM(ids, 0), n, size_of_id, bytes) < 0
            || reserve_record(w) < 0)
        return NULL;
    if (w->old != NULL)
        migrate(w, moves_for((size_t)n));
    uint64_t start = w->tail;
    /* The ids' hashes first, each slot fetched ahead (CLAIM_AHEAD ids on): in a table
       of a million ids every probe misses the caches, and these misses then overlap
       instead of waiting one after the other (bench/RESULTS-fast-ingest.md, round 12). */
    uint32_t hashes[CLAIM_AHEAD];
    for (Py_ssize_t i = 0; i < n && i < CLAIM_AHEAD; i++) {
        PyObject *mid = PyTuple_GET_ITEM(ids, i);
        hashes[i] = hash_bytes((const unsigned char *)PyBytes_AS_STRING(mid), (size_t)PyBytes_GET_SIZE(mid), w->key);
        prefetch_home(w, hashes[i]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *mid = PyTuple_GET_ITEM(ids, i);
        const char *data = PyBytes_AS_STRING(mid);
        size_t length = (size_t)PyBytes_GET_SIZE(mid);
        uint32_t hash = hashes[i % CLAIM_AHEAD];
        if (i + CLAIM_AHEAD < n) {  /* (the hash of the id CLAIM_AHEAD on, into the place just read) */
            PyObject *ahead = PyTuple_GET_ITEM(ids, i + CLAIM_AHEAD);
            uint32_t h = hash_bytes((const unsigned char *)PyBytes_AS_STRING(ahead), (size_t)PyBytes_GET_SIZE(ahead),
                                    w->key);
            hashes[i % CLAIM_AHEAD] = h;
            prefetch_home(w, h);
        }
        size_t slot = find_slot(w, hash, data, length);
        if (w->slots[slot].hash || find_old(w, hash, data, length) != NO_SLOT) {  /* stored, or repeated in the run */
            drop_entries(w, start, w->tail);
            w->tail = start;
            Py_RETURN_FALSE;
        }
        enter(w, slot, hash, data, length, offset + i);
    }
    push_record(w, stored_ns, start);
    Py_RETURN_TRUE;
}

/* add(ids, offset, time_ns) */
static PyObject *
window_add(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_args("add", nargs, 3) < 0)
        return NULL;
    int64_t offset, time_ns;
    if (as_int64(args[1], &offset) < 0 || as_int64(args[2], &time_ns) < 0)
        return NULL;
    PyObject *ids = PySequence_Fast(args[0], "add() takes a sequence of ids");
    if (ids == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ids);
    PyObject **items = PySequence_Fast_ITEMS(ids);
    size_t entered = 0, bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *data;
        size_t length;
        if (items[i] == Py_None)
            continue;
        if (id_bytes(items[i], &data, &length) < 0)
            goto error;
        entered++;
        bytes += ENTRY_SIZE(length);
    }
    if (offset < 0 || offset > INT64_MAX - n) {
        PyErr_SetString(PyExc_OverflowError, "add() offset out of range");
        goto error;
    }
    if (reserve_slots(w, entered) < 0 || reserve_entries(w, items, n, size_of_id, bytes) < 0 || reserve_record(w) < 0)
        goto error;
    if (w->old != NULL)
        migrate(w, moves_for(entered));
    uint64_t start = w->tail;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == Py_None)
            continue;
        const char *data = PyBytes_AS_STRING(items[i]);
        size_t length = (size_t)PyBytes_GET_SIZE(items[i]);
        uint32_t hash = hash_bytes((const unsigned char *)data, length, w->key);
        size_t slot = find_slot(w, hash, data, length);
        size_t old = w->slots[slot].hash ? NO_SLOT : find_old(w, hash, data, length);
        if (old != NO_SLOT) {  /* (entered again while its slot waits in the old table: it moves now) */
            ENTRY_AT(w, REF_POS(w, w->old[old].ref))->length &= ~LIVE;
            delete_at(w->old, w->old_mask, old);
            w->count--;
        }
        enter(w, slot, hash, data, length, offset + i);
    }
    push_record(w, time_ns, start);
    Py_DECREF(ids);
    Py_RETURN_NONE;
error:
    Py_DECREF(ids);
    return NULL;
}

static PyObject *
lookup(Window *w, PyObject *mid)
{
    const char *data;
    size_t length;
    if (id_bytes(mid, &data, &length) < 0)
        return NULL;
    if (!w->count)
        Py_RETURN_NONE;
    uint32_t hash = hash_bytes((const unsigned char *)data, length, w->key);
    size_t slot = find_slot(w, hash, data, length);
    Slot *found = &w->slots[slot];
    if (!found->hash) {
        size_t old = find_old(w, hash, data, length);
        if (old == NO_SLOT)
            Py_RETURN_NONE;
        found = &w->old[old];
    }
    return PyLong_FromLongLong(ENTRY_AT(w, REF_POS(w, found->ref))->offset);
}

/* seen(mid, horizon): expire, then get */
static PyObject *
window_seen(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t horizon;
    if (check_args("seen", nargs, 2) < 0 || as_int64(args[1], &horizon) < 0)
        return NULL;
    if (w->count)
        expire_to(w, horizon);
    settle(w);
    return lookup(w, args[0]);
}

static PyObject *
window_get(Window *w, PyObject *mid)
{
    return lookup(w, mid);
}

static PyObject *
window_expire(Window *w, PyObject *arg)
{
    int64_t horizon;
    if (as_int64(arg, &horizon) < 0)
        return NULL;
    expire_to(w, horizon);
    settle(w);
    Py_RETURN_NONE;
}

/* truncate(stored): the last record keeps its first ``stored`` entries. */
static PyObject *
window_truncate(Window *w, PyObject *arg)
{
    Py_ssize_t stored = PyLong_AsSsize_t(arg);
    if (stored == -1 && PyErr_Occurred())
        return NULL;
    if (!w->records_count) {
        PyErr_SetString(PyExc_IndexError, "truncate() of a window without records");
        return NULL;
    }
    Record *r = RECORD(w, w->records_count - 1);
    uint64_t pos = r->start;
    for (Py_ssize_t i = 0; i < stored && pos < r->end; i++) {
        pos = entry_start(w, pos);
        pos = after(pos, ENTRY_SIZE(LENGTH(ENTRY_AT(w, pos))));
    }
    drop_entries(w, pos, r->end);
    w->tail = r->end = pos;
    if (stored <= 0) {
        w->records_count--;
        w->head = w->records_count ? RECORD(w, 0)->start : w->tail;
    }
    if (w->old != NULL && !w->count)  /* (emptied: nothing left to move) */
        migrate(w, SIZE_MAX);
    Py_RETURN_NONE;
}

/* live() -> ([(id, offset), ...], [[time_ns, count], ...]) */
static PyObject *
window_live(Window *w, PyObject *Py_UNUSED(ignored))
{
    PyObject *pairs = PyList_New((Py_ssize_t)w->count);
    PyObject *counts = PyList_New(0);
    if (pairs == NULL || counts == NULL)
        goto error;
    Py_ssize_t at = 0;
    for (size_t i = 0; i < w->records_count; i++) {
        Record *r = RECORD(w, i);
        Py_ssize_t live = 0;
        for (uint64_t pos = r->start; pos < r->end;) {
            pos = entry_start(w, pos);
            Entry *e = ENTRY_AT(w, pos);
            if (e->length & LIVE) {
                if (at >= (Py_ssize_t)w->count) {
                    PyErr_SetString(PyExc_SystemError, "window entries out of step with its table");
                    goto error;
                }
                PyObject *pair = Py_BuildValue("(y#L)", (char *)(e + 1), (Py_ssize_t)LENGTH(e),
                                               (long long)e->offset);
                if (pair == NULL)
                    goto error;
                PyList_SET_ITEM(pairs, at++, pair);
                live++;
            }
            pos = after(pos, ENTRY_SIZE(LENGTH(e)));
        }
        if (live) {
            PyObject *count = Py_BuildValue("[Ln]", (long long)r->time_ns, live);
            if (count == NULL)
                goto error;
            int failed = PyList_Append(counts, count);
            Py_DECREF(count);
            if (failed < 0)
                goto error;
        }
    }
    if (at != (Py_ssize_t)w->count) {
        PyErr_SetString(PyExc_SystemError, "window entries out of step with its table");
        goto error;
    }
    PyObject *result = PyTuple_Pack(2, pairs, counts);
    Py_DECREF(pairs);
    Py_DECREF(counts);
    return result;
error:
    Py_XDECREF(pairs);
    Py_XDECREF(counts);
    return NULL;
}

/* restore(pairs, counts): an empty window loaded from live()'s lists. */
static PyObject *
window_restore(Window *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_args("restore", nargs, 2) < 0)
        return NULL;
    PyObject *pairs = args[0], *counts = args[1];
    if (!PyList_Check(pairs) || !PyList_Check(counts)) {
        PyErr_SetString(PyExc_TypeError, "restore() takes two lists");
        return NULL;
    }
    if (w->count || w->records_count) {
        PyErr_SetString(PyExc_ValueError, "restore() into a window in use");
        return NULL;
    }
    if (w->old != NULL)  /* (defensive: an emptied window has freed its old table already) */
        migrate(w, SIZE_MAX);
    free_next(w);
    Py_ssize_t n = PyList_GET_SIZE(pairs), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        const char *data;
        size_t length;
        int64_t off;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "restore() takes (id, offset) pairs");
            return NULL;
        }
        if (id_bytes(PyTuple_GET_ITEM(pair, 0), &data, &length) < 0 || as_int64(PyTuple_GET_ITEM(pair, 1), &off) < 0)
            return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(counts); i++) {
        PyObject *record = PyList_GET_ITEM(counts, i);
        int64_t t, c;
        if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 2) {
            PyErr_SetString(PyExc_TypeError, "restore() takes (time_ns, count) records");
            return NULL;
        }
        if (as_int64(PyTuple_GET_ITEM(record, 0), &t) < 0 || as_int64(PyTuple_GET_ITEM(record, 1), &c) < 0)
            return NULL;
        if (c < 0 || c > n - total) {
            PyErr_SetString(PyExc_ValueError, "message id runs do not match the ids");
            return NULL;
        }
        total += (Py_ssize_t)c;
    }
    if (total != n) {
        PyErr_SetString(PyExc_ValueError, "message id runs do not match the ids");
        return NULL;
    }
    if (reserve_slots(w, (size_t)n) < 0 || reserve_entries(w, &PyList_GET_ITEM(pairs, 0), n, size_of_pair, SIZE_MAX) < 0) {
        window_clear_all(w);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(counts); i++) {
        if (reserve_record(w) < 0) {
            window_clear_all(w);
            return NULL;
        }
        w->records_count++;  /* (filled below) */
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(counts); i++) {
        PyObject *record = PyList_GET_ITEM(counts, i);
        Py_ssize_t c = PyLong_AsSsize_t(PyTuple_GET_ITEM(record, 1));
        Record *r = RECORD(w, i);
        r->time_ns = (int64_t)PyLong_AsLongLong(PyTuple_GET_ITEM(record, 0));
        r->start = w->tail;
        for (Py_ssize_t k = 0; k < c; k++, at++) {
            PyObject *pair = PyList_GET_ITEM(pairs, at);
            PyObject *mid = PyTuple_GET_ITEM(pair, 0);
            const char *data = PyBytes_AS_STRING(mid);
            size_t length = (size_t)PyBytes_GET_SIZE(mid);
            uint32_t hash = hash_bytes((const unsigned char *)data, length, w->key);
            size_t slot = find_slot(w, hash, data, length);
            if (w->slots[slot].hash) {
                window_clear_all(w);
                PyErr_SetString(PyExc_ValueError, "message id runs do not match the ids");
                return NULL;
            }
            enter(w, slot, hash, data, length, (int64_t)PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1)));
        }
        r->end = w->tail;
    }
    Py_RETURN_NONE;
}

static PyObject *
window_records(Window *w, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSize_t(w->records_count);
}

static PyMethodDef window_methods[] = {
    {"claim", (PyCFunction)(void (*)(void))window_claim, METH_FASTCALL,
     "claim(ids, offset, horizon, stored_ns) -> bool: after dropping the records at or before horizon,\n"
     "enter ids[i] (a tuple of bytes) as offset + i with one record at stored_ns, when none of them is\n"
     "in the window nor repeated: True; else the window unchanged and False."},
    {"add", (PyCFunction)(void (*)(void))window_add, METH_FASTCALL,
     "add(ids, offset, time_ns): ids[i] (bytes, or None: no id) stored at offset + i, one record at\n"
     "time_ns; an id in the window already takes its newer offset."},
    {"seen", (PyCFunction)(void (*)(void))window_seen, METH_FASTCALL,
     "seen(id, horizon) -> offset or None, after dropping the records at or before horizon."},
    {"get", (PyCFunction)window_get, METH_O, "get(id) -> offset or None."},
    {"expire", (PyCFunction)window_expire, METH_O, "expire(horizon): drop the records at or before horizon."},
    {"truncate", (PyCFunction)window_truncate, METH_O,
     "truncate(stored): keep the first stored ids of the last record only."},
    {"live", (PyCFunction)window_live, METH_NOARGS,
     "live() -> ([(id, offset), ...], [[time_ns, count], ...]) of the ids in the window, by record."},
    {"restore", (PyCFunction)(void (*)(void))window_restore, METH_FASTCALL,
     "restore(pairs, counts): an empty window filled from live()'s lists (of tuples)."},
    {"records", (PyCFunction)window_records, METH_NOARGS, "records() -> the number of records kept."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods window_as_sequence = {
    .sq_length = (lenfunc)window_length,
};

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tstream.engine._window.Window",
    .tp_basicsize = sizeof(Window),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A stream's duplicate window of message ids (see engine/_window.c).",
    .tp_new = window_new,
    .tp_dealloc = (destructor)window_dealloc,
    .tp_methods = window_methods,
    .tp_as_sequence = &window_as_sequence,
};

/* pack_ids(ids): the ids field of an INGEST record for ``ids`` (a tuple or list of
   bytes, one an entry), as persistence/effects.py ``packed_ids`` builds it in Python
   (its fallback): one bytes object, a byte of length per id, then the ids' bytes
   one after another, so that msgpack packs one item for a pipelined MSGID run's ids
   instead of one an id.  ``ids`` itself (the record's older form, a list item an id)
   when an item is not exactly bytes (None: an entry without an id) or is 256 bytes
   or longer, and when memory runs out (the caller logs the list then: the entries
   are stored already).  Two passes over ``ids``, nothing else allocated. */
static PyObject *
pack_ids(PyObject *Py_UNUSED(module), PyObject *ids)
{
    if (!PyTuple_CheckExact(ids) && !PyList_CheckExact(ids)) {
        PyErr_SetString(PyExc_TypeError, "pack_ids: a tuple or list of bytes");
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(ids);
    PyObject **items = PySequence_Fast_ITEMS(ids);
    Py_ssize_t total = count;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *mid = items[i];
        if (!PyBytes_CheckExact(mid) || PyBytes_GET_SIZE(mid) > 255) {
            Py_INCREF(ids);
            return ids;
        }
        total += PyBytes_GET_SIZE(mid);
    }
    PyObject *packed = PyBytes_FromStringAndSize(NULL, total);
    if (packed == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_MemoryError))
            return NULL;
        PyErr_Clear();
        Py_INCREF(ids);
        return ids;
    }
    /* (a list cannot change here: nothing in between runs Python code) */
    unsigned char *lengths = (unsigned char *)PyBytes_AS_STRING(packed);
    unsigned char *out = lengths + count;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size = PyBytes_GET_SIZE(items[i]);
        lengths[i] = (unsigned char)size;
        memcpy(out, PyBytes_AS_STRING(items[i]), (size_t)size);
        out += size;
    }
    return packed;
}

/* _set_mapping(min_bytes, fail) -> (min_bytes, fail) before: tables of min_bytes or
   more are mapped (table_alloc), and with ``fail`` every mapping, of a table or a
   block of entries (chunk_alloc), is taken to fail (the fallback is used).  For the tests and bench/window_claims.py only. */
static PyObject *
set_mapping(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_args("_set_mapping", nargs, 2) < 0)
        return NULL;
    size_t min_bytes = PyLong_AsSize_t(args[0]);
    if (min_bytes == (size_t)-1 && PyErr_Occurred())
        return NULL;
    int fail = PyObject_IsTrue(args[1]);
    if (fail < 0)
        return NULL;
    PyObject *before = Py_BuildValue("(nO)", (Py_ssize_t)mapped_min, mappings_fail ? Py_True : Py_False);
    if (before == NULL)
        return NULL;
    mapped_min = min_bytes;
    mappings_fail = fail;
    return before;
}

/* ``window`` as a Window, for the module's test helpers (``name``): NULL with TypeError. */
static Window *
as_window(PyObject *window, const char *name)
{
    if (!PyObject_TypeCheck(window, &WindowType)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a Window", name);
        return NULL;
    }
    return (Window *)window;
}

/* The bytes of the next table's pages the kernel has made (mincore), for _layout. -1: MemoryError. */
static Py_ssize_t
next_resident(Window *w)
{
    size_t resident = 0;
#if defined(__linux__)
    if (w->next != NULL && w->next_mapped) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (w->next_mapped + page - 1) / page;
        unsigned char *vector = PyMem_Malloc(pages);
        if (vector == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (mincore(w->next, w->next_mapped, vector) == 0)
            for (size_t i = 0; i < pages; i++)
                resident += (vector[i] & 1) * page;
        PyMem_Free(vector);
    }
#endif
    return (Py_ssize_t)resident;
}

/* _layout(window) -> a dict of where its memory is and what it is doing (for the tests
   and benchmarks): table_mapped (its table's mapping's length, 0: from PyMem), blocks and
   blocks_mapped (blocks of entries, how many are mappings of their own), old_slots and
   moved (a migration's old table and the slots moved so far; 0 and 0 with none),
   next_slots, next_ready, next_resident (the next table made ready ahead: its slots, the
   bytes populated, the bytes the kernel counts resident; 0 with none), next_taken
   (growths that took a next table). */
static PyObject *
layout(PyObject *Py_UNUSED(module), PyObject *window)
{
    Window *w = as_window(window, "_layout");
    if (w == NULL)
        return NULL;
    size_t blocks_mapped = 0;
    for (size_t i = 0; i < w->chunks_count; i++)
        blocks_mapped += w->chunks[i].mapped != 0;
    Py_ssize_t resident = next_resident(w);
    if (resident < 0)
        return NULL;
    return Py_BuildValue("{snsnsnsnsnsnsnsnsn}",
                         "table_mapped", (Py_ssize_t)w->slots_mapped,
                         "blocks", (Py_ssize_t)w->chunks_count, "blocks_mapped", (Py_ssize_t)blocks_mapped,
                         "old_slots", (Py_ssize_t)(w->old != NULL ? w->old_mask + 1 : 0), "moved", (Py_ssize_t)w->moved,
                         "next_slots", (Py_ssize_t)w->next_size, "next_ready", (Py_ssize_t)w->next_ready,
                         "next_resident", resident, "next_taken", (Py_ssize_t)w->next_taken);
}

/* One table's slots checked: each points at a live entry of its hash, in [head,
   tail), reachable from its home through full slots (and, in the old table, none
   of them moved).  The full slots counted into *full.  0, or -1 with AssertionError. */
static int
check_table(Window *w, Slot *slots, size_t mask, int old, size_t *full)
{
    for (size_t i = 0; i <= mask; i++) {
        if (old && moved_already(w, i)) {
            if (slots[i].hash) {
                PyErr_Format(PyExc_AssertionError, "old slot %zu moved but not empty", i);
                return -1;
            }
            continue;
        }
        if (!slots[i].hash)
            continue;
        (*full)++;
        uint64_t pos = REF_POS(w, slots[i].ref);
        if (pos < w->head || pos >= w->tail) {
            PyErr_Format(PyExc_AssertionError, "slot %zu points outside the entries", i);
            return -1;
        }
        Entry *e = ENTRY_AT(w, pos);
        if (!(e->length & LIVE) || e->hash != slots[i].hash) {
            PyErr_Format(PyExc_AssertionError, "slot %zu points at a dead entry or another hash", i);
            return -1;
        }
        for (size_t k = slots[i].hash & mask; k != i; k = (k + 1) & mask) {
            if (!slots[k].hash || (old && moved_already(w, k))) {
                PyErr_Format(PyExc_AssertionError, "slot %zu cannot be reached from its home", i);
                return -1;
            }
        }
    }
    return 0;
}

/* _check(window): the invariants of the tables and entries (AssertionError if one fails). */
static PyObject *
check_window(PyObject *Py_UNUSED(module), PyObject *window)
{
    Window *w = as_window(window, "_check");
    if (w == NULL)
        return NULL;
    size_t full = 0;
    if (w->slots != NULL && check_table(w, w->slots, w->mask, 0, &full) < 0)
        return NULL;
    if (w->old != NULL) {
        if (w->moved >= w->old_mask + 1 || w->old[(w->old_start - 1) & w->old_mask].hash) {
            PyErr_SetString(PyExc_AssertionError, "a migration over, or its last slot not empty");
            return NULL;
        }
        if (check_table(w, w->old, w->old_mask, 1, &full) < 0)
            return NULL;
    }
    if (full != w->count) {
        PyErr_Format(PyExc_AssertionError, "%zu slots full, %zu ids counted", full, w->count);
        return NULL;
    }
    if (w->next != NULL && (w->next_size != 2 * (w->mask + 1) || w->next_ready > w->next_size * sizeof(Slot)
                            || mappings_fail)) {
        PyErr_SetString(PyExc_AssertionError, "a next table of another size, over-populated, or not to be");
        return NULL;
    }
    size_t live = 0;
    for (size_t r = 0; r < w->records_count; r++) {
        Record *rec = RECORD(w, r);
        for (uint64_t pos = rec->start; pos < rec->end;) {
            pos = entry_start(w, pos);
            Entry *e = ENTRY_AT(w, pos);
            if (e->length & LIVE) {
                live++;
                const char *bytes = (const char *)(e + 1);
                size_t slot = w->slots != NULL ? find_slot(w, e->hash, bytes, LENGTH(e)) : 0;
                Slot *found = w->slots != NULL && w->slots[slot].hash ? &w->slots[slot] : NULL;
                if (found == NULL) {
                    size_t old = find_old(w, e->hash, bytes, LENGTH(e));
                    found = old != NO_SLOT ? &w->old[old] : NULL;
                }
                if (found == NULL || found->ref != REF(pos)) {
                    PyErr_SetString(PyExc_AssertionError, "a live entry not found at its slot");
                    return NULL;
                }
            }
            pos = after(pos, ENTRY_SIZE(LENGTH(e)));
        }
    }
    if (live != w->count) {
        PyErr_Format(PyExc_AssertionError, "%zu live entries, %zu ids counted", live, w->count);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_functions[] = {
    {"_set_mapping", (PyCFunction)(void (*)(void))set_mapping, METH_FASTCALL,
     "_set_mapping(min_bytes, fail) -> the settings before: tables of min_bytes or more are mapped on\n"
     "huge pages; fail: every mapping (tables, blocks of entries) fails (the fallback is used).\n"
     "For tests and benchmarks."},
    {"_layout", (PyCFunction)layout, METH_O,
     "_layout(window) -> {table_mapped, blocks, blocks_mapped, old_slots, moved, next_slots, next_ready,\n"
     "next_resident, next_taken}: where its memory is, a running migration, the next table. For tests."},
    {"_check", (PyCFunction)check_window, METH_O,
     "_check(window): the tables' and entries' invariants; AssertionError when one fails. For tests."},
    {"pack_ids", (PyCFunction)pack_ids, METH_O,
     "pack_ids(ids) -> an INGEST record's ids as one bytes object (lengths, then bytes), or ids itself."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef window_module = {
    PyModuleDef_HEAD_INIT,
    "tstream.engine._window",
    "The MSGID duplicate window in C (optional: engine/ingest.py falls back to Python).",
    0,
    module_functions,
    NULL, NULL, NULL, NULL,
};

static int
process_key(const char *constant, uint64_t *out)
{
    PyObject *word = PyBytes_FromString(constant);
    if (word == NULL)
        return -1;
    Py_hash_t hash = PyObject_Hash(word);
    Py_DECREF(word);
    if (hash == -1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)hash;
    return 0;
}

PyMODINIT_FUNC
PyInit__window(void)
{
    if (PyType_Ready(&WindowType) < 0)
        return NULL;
    if (process_key("tstream.window.k0", &process_key0) < 0 || process_key("tstream.window.k1", &process_key1) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&window_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&WindowType);
    if (PyModule_AddObject(module, "Window", (PyObject *)&WindowType) < 0) {
        Py_DECREF(&WindowType);
        Py_DECREF(module);
        return NULL;
    }
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    int populates = 1;
#else
    int populates = 0;
#endif
    /* (whether this build makes a table's pages ahead: prepare_next; for the tests) */
    if (PyModule_AddIntConstant(module, "_POPULATES", populates) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
