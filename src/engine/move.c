/* move.c — copying a whole store into an empty one (the embedded store to PostgreSQL): rows with
 * their versions, idempotency records still live, the retained log at its own positions, the
 * counts and the checkpoint they were folded to, and trending's summaries; the lists are then built
 * in the destination from what was copied. Only the seam is used,
 * so any store moves to any other. */
#include "engine/move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

#define MOVE_BATCH 5000       /* records per transaction of the destination */
#define MOVE_ITEMS_CHUNK 1000 /* items whose counts are read at a time */

typedef struct {
    store_t *to;
    store_write_t *tx;
    size_t in_tx;
    int rc;
    uint64_t now_ms;
    move_result_t *res;
} mover_t;

/* After each record: commits every MOVE_BATCH of them, so the destination's transactions stay small. */
static int mover_step(mover_t *m)
{
    if (m->rc != STORE_OK)
        return 1;
    if (++m->in_tx < MOVE_BATCH)
        return 0;
    m->in_tx = 0;
    m->rc = store_write_commit(m->tx);
    m->tx = NULL;
    if (m->rc == STORE_OK)
        m->rc = store_write_begin(m->to, &m->tx);
    return m->rc != STORE_OK;
}

static int move_row(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    mover_t *m = arg;
    m->rc = store_row_put(m->tx, item, user, row);
    m->res->rows++;
    return mover_step(m);
}

static int move_key(void *arg, span_t user, span_t key, const store_idem_t *rec)
{
    mover_t *m = arg;
    if (rec->expires_ms <= m->now_ms)
        return 0; /* past its TTL: unknown already */
    m->rc = store_idem_put(m->tx, user, key, rec);
    m->res->keys++;
    return mover_step(m);
}

static int move_entry(void *arg, uint64_t seq, const transition_t *t)
{
    mover_t *m = arg;
    m->rc = store_log_put(m->tx, seq, t);
    m->res->log_entries++;
    return mover_step(m);
}

static int move_aux(void *arg, span_t key, span_t value)
{
    mover_t *m = arg;
    if (span_eq_str(key, STORE_LOG_PRUNED_KEY))
        return 0; /* the source's pruning, not the destination's: each store keeps its own */
    m->rc = store_aux_put(m->tx, key, value);
    return mover_step(m);
}

typedef struct {
    char names[MOVE_ITEMS_CHUNK][ID_MAX_LEN];
    size_t lens[MOVE_ITEMS_CHUNK];
    size_t n;
} item_chunk_t;

static int collect_item(void *arg, span_t item)
{
    item_chunk_t *c = arg;
    memcpy(c->names[c->n], item.ptr, item.len);
    c->lens[c->n++] = item.len;
    return 0;
}

static int move_counts(mover_t *m, store_read_t *snap)
{
    item_chunk_t *chunk = malloc(sizeof *chunk);
    if (!chunk)
        return STORE_ERROR;
    char after[ID_MAX_LEN];
    size_t after_len = 0, visited;
    do {
        chunk->n = 0;
        m->rc = store_read_items(snap, (span_t){after, after_len}, MOVE_ITEMS_CHUNK, collect_item, chunk, &visited);
        for (size_t i = 0; m->rc == STORE_OK && i < chunk->n; i++) {
            span_t item = {chunk->names[i], chunk->lens[i]};
            int64_t counts[KINDS_MAX + 1];
            if ((m->rc = store_read_counts(snap, item, counts)) == STORE_OK &&
                (m->rc = store_counts_add(m->tx, item, counts)) == STORE_OK) {
                m->res->items++;
                mover_step(m);
            }
        }
        if (chunk->n) {
            after_len = chunk->lens[chunk->n - 1];
            memcpy(after, chunk->names[chunk->n - 1], after_len);
        }
    } while (m->rc == STORE_OK && visited == MOVE_ITEMS_CHUNK);
    free(chunk);
    return m->rc;
}

/* True when to holds nothing yet: no log, no items, the checkpoint at 0. */
static int destination_empty(store_t *to, bool *empty)
{
    store_read_t *snap;
    int rc = store_read_begin(to, &snap);
    if (rc != STORE_OK)
        return rc;
    uint64_t first = 0, last = 0, checkpoint = 0;
    size_t visited = 0;
    item_chunk_t one = {0};
    if ((rc = store_read_log_bounds(snap, &first, &last)) == STORE_OK &&
        (rc = store_read_checkpoint(snap, &checkpoint)) == STORE_OK)
        rc = store_read_items(snap, (span_t){"", 0}, 1, collect_item, &one, &visited);
    store_read_end(snap);
    *empty = last == 0 && checkpoint == 0 && visited == 0;
    return rc;
}

int move_store(store_t *from, store_t *to, move_result_t *res, char *err, size_t errlen)
{
    *res = (move_result_t){0};
    bool empty = false;
    int rc = destination_empty(to, &empty);
    if (rc != STORE_OK || !empty) {
        snprintf(err, errlen, rc != STORE_OK ? "cannot read the destination" : "the destination is not empty");
        return rc != STORE_OK ? rc : STORE_ERROR;
    }
    store_read_t *snap; /* one snapshot of the source: the copy is of one instant */
    if ((rc = store_read_begin(from, &snap)) != STORE_OK) {
        snprintf(err, errlen, "cannot read the source");
        return rc;
    }
    mover_t m = {.to = to, .now_ms = clock_ms(CLOCK_REALTIME), .res = res};
    uint64_t checkpoint = 0;
    const char *step = "beginning";
    m.rc = store_write_begin(to, &m.tx);
    if (m.rc == STORE_OK && (rc = store_read_rows(snap, move_row, &m)) != STORE_OK)
        m.rc = rc;
    if (m.rc == STORE_OK && (step = "idempotency records", rc = store_read_idem(snap, move_key, &m)) != STORE_OK)
        m.rc = rc;
    if (m.rc == STORE_OK && (step = "the log", rc = store_read_log(snap, 0, SIZE_MAX, move_entry, &m)) != STORE_OK)
        m.rc = rc;
    if (m.rc == STORE_OK &&
        (step = "auxiliary records", rc = store_read_aux(snap, (span_t){"", 0}, move_aux, &m)) != STORE_OK)
        m.rc = rc;
    if (m.rc == STORE_OK && (step = "counts"))
        move_counts(&m, snap);
    if (m.rc == STORE_OK && (step = "the checkpoint", m.rc = store_read_checkpoint(snap, &checkpoint)) == STORE_OK)
        m.rc = store_checkpoint_put(m.tx, checkpoint); /* the counts are the fold up to here */
    if (m.rc == STORE_OK)
        step = "committing";
    store_read_end(snap);
    if (m.tx)
        m.rc = m.rc == STORE_OK ? store_write_commit(m.tx) : (store_write_abort(m.tx), m.rc);
    /* The lists are the destination's own (its positions are the source's, copied with the log):
     * built from what was copied, once it is all committed. */
    if (m.rc == STORE_OK && (step = "the lists", m.rc = store_write_begin(to, &m.tx)) == STORE_OK) {
        m.rc = store_lists_rebuild(m.tx);
        m.rc = m.rc == STORE_OK ? store_write_commit(m.tx) : (store_write_abort(m.tx), m.rc);
    }
    if (m.rc != STORE_OK)
        snprintf(err, errlen, "copying %s failed (after %llu rows, %llu keys, %llu log entries, %llu items)", step,
                 (unsigned long long)res->rows, (unsigned long long)res->keys, (unsigned long long)res->log_entries,
                 (unsigned long long)res->items);
    res->checkpoint = checkpoint;
    return m.rc;
}
