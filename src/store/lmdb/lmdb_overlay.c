/* lmdb_overlay.c — the rows of an epoch's batches, for readers, until LMDB's commit of the epoch
 * shows them (lmdb_write.c, "epochs"). Each batch of an epoch is durable (its journal record) and
 * answered before the epoch's one LMDB commit: a reader's snapshot does not have it yet, so
 * store_read_row looks here first. Only rows: everything else a batch changes (counts, lists, the
 * change feed) may lag a moment, as the counts may; a row never does, so a client reads its own
 * write back.
 *
 * Two generations: the open epoch's rows, and the epoch committed before it, kept for the readers
 * whose snapshot began before that commit. An entry counts for a reader only when its epoch is
 * newer than the reader's snapshot; a snapshot older than a generation already dropped is told to
 * begin again (rare: a reader would have to outlive a whole epoch between two row reads). */
#include "store/lmdb/lmdb_internal.h"

#include "core/hash.h"
#include "core/journalrec.h"

#include <errno.h>
#include <stdlib.h>

#define SLOTS_MIN 1024

static uint64_t key_hash(const void *key, size_t len)
{
    return hash_mix(hash_bytes(HASH_SEED, key, len));
}

int lmdb_overlay_init(lmdb_overlay_t *o)
{
    /* the writer first: it holds the write transaction and every queued write while it waits */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&o->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0)
        return ENOMEM;
    o->made = true;
    return 0;
}

void lmdb_overlay_free(lmdb_overlay_t *o)
{
    for (int g = 0; g < 2; g++) {
        free(o->gen[g].entries);
        free(o->gen[g].slots);
    }
    if (o->made)
        pthread_rwlock_destroy(&o->lock);
}

static lmdb_overlay_entry_t *gen_find(const lmdb_overlay_gen_t *g, const uint8_t *key, size_t len, uint64_t h)
{
    if (!g->n)
        return NULL;
    for (size_t i = h & (g->nslots - 1);; i = (i + 1) & (g->nslots - 1)) {
        uint32_t e = g->slots[i];
        if (!e)
            return NULL;
        lmdb_overlay_entry_t *x = &g->entries[e - 1];
        if (x->hash == h && x->klen == len && memcmp(x->key, key, len) == 0)
            return x;
    }
}

/* Room for one more entry (and a table at most half full). Writer thread, lock held. */
static int gen_reserve(lmdb_overlay_gen_t *g)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 256;
        lmdb_overlay_entry_t *p = realloc(g->entries, cap * sizeof *p);
        if (!p)
            return ENOMEM;
        g->entries = p;
        g->cap = cap;
    }
    if (2 * (g->n + 1) > g->nslots) {
        size_t nslots = g->nslots ? 2 * g->nslots : SLOTS_MIN;
        uint32_t *slots = calloc(nslots, sizeof *slots);
        if (!slots)
            return ENOMEM;
        for (size_t e = 0; e < g->n; e++) {
            size_t i = g->entries[e].hash & (nslots - 1);
            while (slots[i])
                i = (i + 1) & (nslots - 1);
            slots[i] = (uint32_t)(e + 1);
        }
        free(g->slots);
        g->slots = slots;
        g->nslots = nslots;
    }
    return 0;
}

static void gen_clear(lmdb_overlay_gen_t *g)
{
    if (g->n)
        memset(g->slots, 0, g->nslots * sizeof *g->slots);
    g->n = 0;
    g->txnid = 0;
}

int lmdb_overlay_add(lmdb_store_t *s, uint64_t txnid, const uint8_t *ops, size_t len)
{
    lmdb_overlay_t *o = &s->overlay;
    int rows = lmdb_journal_db(s, s->rows);
    const uint8_t *p = ops, *end = ops + len;
    journalrec_op_t op;
    int more, rc = 0;
    pthread_rwlock_wrlock(&o->lock);
    lmdb_overlay_gen_t *g = &o->gen[o->cur];
    if (g->n && g->txnid != txnid) {
        rc = EINVAL; /* the open epoch's generation holds another epoch's rows: never */
        goto out;
    }
    g->txnid = txnid;
    while (rc == 0 && (more = journalrec_op_next(&p, end, &op)) == 1) {
        if (op.db != rows)
            continue;
        if (op.op == JOURNALREC_EMPTY || op.klen > KEY_BUF_LEN) {
            rc = EINVAL; /* not a row change the overlay can hold: the epoch must commit now */
            break;
        }
        size_t base = 0;
        if (op.op == JOURNALREC_PUT) {
            MDB_val v = {op.vlen, (void *)op.val};
            base = lmdb_row_base_len(&v);
            if (base == 0 || base > ROW_VALUE_SET_LEN) {
                rc = EINVAL;
                break;
            }
        }
        uint64_t h = key_hash(op.key, op.klen);
        lmdb_overlay_entry_t *x = gen_find(g, op.key, op.klen, h);
        if (!x) {
            if ((rc = gen_reserve(g)) != 0)
                break;
            x = &g->entries[g->n];
            x->hash = h;
            x->klen = (uint16_t)op.klen;
            memcpy(x->key, op.key, op.klen);
            size_t i = h & (g->nslots - 1);
            while (g->slots[i])
                i = (i + 1) & (g->nslots - 1);
            g->slots[i] = (uint32_t)++g->n;
        }
        x->gone = op.op == JOURNALREC_DEL;
        x->vlen = (uint8_t)base;
        if (base)
            memcpy(x->val, op.val, base);
    }
    if (rc == 0 && more < 0)
        rc = EINVAL;
out:
    pthread_rwlock_unlock(&o->lock);
    return rc;
}

void lmdb_overlay_committed(lmdb_overlay_t *o, uint64_t txnid)
{
    pthread_rwlock_wrlock(&o->lock);
    lmdb_overlay_gen_t *cur = &o->gen[o->cur], *prev = &o->gen[o->cur ^ 1];
    if (cur->n && cur->txnid == txnid) {
        if (prev->n)
            o->dropped = prev->txnid;
        gen_clear(prev);
        o->cur ^= 1; /* the epoch just committed is now the one before */
    }
    pthread_rwlock_unlock(&o->lock);
}

int lmdb_overlay_get(lmdb_overlay_t *o, uint64_t snap, const MDB_val *key, uint8_t val[ROW_VALUE_SET_LEN], size_t *vlen,
                     bool *gone)
{
    uint64_t h = key_hash(key->mv_data, key->mv_size);
    int found = 0;
    pthread_rwlock_rdlock(&o->lock);
    if (snap < o->dropped) {
        found = -1;
    } else {
        for (int k = 0; k < 2 && !found; k++) { /* the open epoch's first: it is the newer */
            const lmdb_overlay_gen_t *g = &o->gen[o->cur ^ k];
            if (!g->n || g->txnid <= snap)
                continue; /* empty, or in the snapshot already */
            const lmdb_overlay_entry_t *x = gen_find(g, key->mv_data, key->mv_size, h);
            if (x) {
                found = 1;
                *gone = x->gone;
                *vlen = x->vlen;
                memcpy(val, x->val, x->vlen);
            }
        }
    }
    pthread_rwlock_unlock(&o->lock);
    return found;
}
