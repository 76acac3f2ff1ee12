/* store.c — the seam's dispatcher: opens the implementation a location names (a directory: the
 * embedded LMDB store; a postgresql:// URI: the PostgreSQL store) and routes every call of store.h
 * to the table of operations of the handle it is given. No decision is made here. */
#include "store/store_impl.h"

#include <string.h>

#include "store/lmdb/lmdb.h"
#include "store/pg/pg.h"

bool store_location_is_url(const char *location)
{
    return strncmp(location, "postgresql://", 13) == 0 || strncmp(location, "postgres://", 11) == 0;
}

int store_open(const char *location, const kinds_t *kinds, const store_options_t *opt, store_t **out, char *err,
               size_t errlen)
{
    if (store_location_is_url(location))
        return pg_open(location, kinds, opt, out, err, errlen);
    return lmdb_open(location, kinds, opt, out, err, errlen);
}

void store_close(store_t *store)
{
    if (store)
        store->ops->close(store);
}

const kinds_t *store_kinds(const store_t *store)
{
    return store->ops->kinds(store);
}

bool store_shared(const store_t *store)
{
    return store->ops->shared && store->ops->shared(store);
}

bool store_ready(store_t *store)
{
    return !store->ops->ready || store->ops->ready(store);
}

bool store_writes_refused(store_t *store, char *why, size_t len)
{
    return store->ops->writes_refused && store->ops->writes_refused(store, why, len);
}

int store_read_many(store_read_t *r, const span_t *items, size_t n, span_t user, int64_t (*counts)[KINDS_MAX + 1],
                    reaction_row_t *rows)
{
    if (r->ops->read_many)
        return r->ops->read_many(r, items, n, user, counts, rows);
    int rc = STORE_OK;
    for (size_t i = 0; rc == STORE_OK && i < n; i++) {
        rc = r->ops->read_counts(r, items[i], counts[i]);
        if (rc == STORE_OK && user.len)
            rc = r->ops->read_row(r, items[i], user, &rows[i]);
    }
    return rc;
}

int store_write_prepare(store_write_t *w, const store_pair_t *rows, size_t nrows, const store_pair_t *keys,
                        size_t nkeys, size_t fold_scan)
{
    return w->ops->write_prepare ? w->ops->write_prepare(w, rows, nrows, keys, nkeys, fold_scan) : STORE_OK;
}

bool store_write_may_fold(store_write_t *w)
{
    return !w->ops->write_may_fold || w->ops->write_may_fold(w);
}

int store_read_begin(store_t *store, store_read_t **out)
{
    return store->ops->read_begin(store, out);
}

int store_read_begin_single(store_t *store, store_read_t **out)
{
    return store->ops->read_begin_single ? store->ops->read_begin_single(store, out)
                                         : store->ops->read_begin(store, out);
}

void store_read_end(store_read_t *r)
{
    if (r)
        r->ops->read_end(r);
}

int store_read_counts(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1])
{
    return r->ops->read_counts(r, item, counts);
}

int store_read_row(store_read_t *r, span_t item, span_t user, reaction_row_t *row)
{
    return r->ops->read_row(r, item, user, row);
}

int store_write_begin(store_t *store, store_write_t **out)
{
    return store->ops->write_begin(store, out);
}

bool store_folds_apart(const store_t *store)
{
    return store->ops->fold_begin != NULL;
}

int store_fold_begin(store_t *store, store_write_t **out)
{
    return store->ops->fold_begin ? store->ops->fold_begin(store, out) : STORE_ERROR;
}

int store_write_commit(store_write_t *w)
{
    return w->ops->write_commit(w);
}

int store_write_commit_at(store_write_t *w, uint64_t *log_base)
{
    *log_base = 0;
    return w->ops->write_commit_at ? w->ops->write_commit_at(w, log_base) : w->ops->write_commit(w);
}

void store_write_abort(store_write_t *w)
{
    w->ops->write_abort(w);
}

void store_write_defer(store_write_t *w, bool (*more)(void *arg), void *arg)
{
    if (w->ops->write_defer)
        w->ops->write_defer(w, more, arg);
}

bool store_pending(const store_t *store)
{
    return store->ops->pending && store->ops->pending(store);
}

int store_flush(store_t *store)
{
    return store->ops->flush ? store->ops->flush(store) : STORE_OK;
}

int store_row_get(store_write_t *w, span_t item, span_t user, reaction_row_t *row)
{
    return w->ops->row_get(w, item, user, row);
}

int store_row_put(store_write_t *w, span_t item, span_t user, const reaction_row_t *row)
{
    return w->ops->row_put(w, item, user, row);
}

int store_log_append(store_write_t *w, const transition_t *t, uint64_t *seq)
{
    return w->ops->log_append(w, t, seq);
}

int store_log_put(store_write_t *w, uint64_t seq, const transition_t *t)
{
    return w->ops->log_put(w, seq, t);
}

int store_read_idem(store_read_t *r, store_idem_fn fn, void *arg)
{
    return r->ops->read_idem(r, fn, arg);
}

int store_log_scan(store_write_t *w, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    return w->ops->log_scan(w, after, limit, fn, arg);
}

int store_counts_add(store_write_t *w, span_t item, const int64_t deltas[KINDS_MAX + 1])
{
    return w->ops->counts_add(w, item, deltas);
}

int store_checkpoint_get(store_write_t *w, uint64_t *seq)
{
    return w->ops->checkpoint_get(w, seq);
}

int store_checkpoint_put(store_write_t *w, uint64_t seq)
{
    return w->ops->checkpoint_put(w, seq);
}

int store_idem_get(store_write_t *w, span_t user, span_t key, store_idem_t *rec)
{
    return w->ops->idem_get(w, user, key, rec);
}

int store_idem_put(store_write_t *w, span_t user, span_t key, const store_idem_t *rec)
{
    return w->ops->idem_put(w, user, key, rec);
}

int store_idem_sweep(store_write_t *w, uint64_t now_ms, size_t limit, size_t *deleted)
{
    return w->ops->idem_sweep(w, now_ms, limit, deleted);
}

int store_read_checkpoint(store_read_t *r, uint64_t *seq)
{
    return r->ops->read_checkpoint(r, seq);
}

int store_read_log(store_read_t *r, uint64_t after, size_t limit, store_log_fn fn, void *arg)
{
    return r->ops->read_log(r, after, limit, fn, arg);
}

uint64_t store_read_acknowledged(store_read_t *r)
{
    return r->ops->read_acknowledged ? r->ops->read_acknowledged(r) : 0;
}

int store_read_log_bounds(store_read_t *r, uint64_t *first, uint64_t *last)
{
    return r->ops->read_log_bounds(r, first, last);
}

int store_read_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest)
{
    uint64_t first, last, checkpoint;
    int rc = store_read_log_bounds(r, &first, &last);
    if (rc == STORE_OK)
        rc = store_read_checkpoint(r, &checkpoint);
    if (rc != STORE_OK)
        return rc;
    *newest = last > checkpoint ? last : checkpoint;
    *oldest = first ? first : *newest + 1;
    uint64_t acked = store_read_acknowledged(r);
    if (acked > *newest)
        *newest = acked;
    return STORE_OK;
}

int store_read_tally_item(store_read_t *r, span_t item, int64_t counts[KINDS_MAX + 1])
{
    return r->ops->read_tally_item(r, item, counts);
}

int store_read_items(store_read_t *r, span_t after, size_t limit, store_item_fn fn, void *arg, size_t *visited)
{
    return r->ops->read_items(r, after, limit, fn, arg, visited);
}

int store_stats(store_t *store, store_stats_t *st)
{
    return store->ops->stats(store, st);
}

int store_backup(store_t *store, const char *dir)
{
    return store->ops->backup(store, dir);
}

int store_item_users(store_write_t *w, span_t item, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited)
{
    return w->ops->item_users(w, item, after, limit, fn, arg, visited);
}

int store_user_items(store_write_t *w, span_t user, span_t after, size_t limit, store_name_fn fn, void *arg,
                     size_t *visited, char last[ID_MAX_LEN], size_t *last_len)
{
    return w->ops->user_items(w, user, after, limit, fn, arg, visited, last, last_len);
}

int store_idem_delete_user(store_write_t *w, span_t user, size_t limit, size_t *deleted)
{
    return w->ops->idem_delete_user(w, user, limit, deleted);
}

int store_read_rows(store_read_t *r, store_row_fn fn, void *arg)
{
    return r->ops->read_rows(r, fn, arg);
}

int store_read_log_seek(store_read_t *r, uint64_t at_ms, uint64_t *seq)
{
    return r->ops->read_log_seek(r, at_ms, seq);
}

int store_aux_put(store_write_t *w, span_t key, span_t value)
{
    return w->ops->aux_put(w, key, value);
}

int store_aux_delete_range(store_write_t *w, span_t from, span_t to)
{
    return w->ops->aux_delete_range(w, from, to);
}

int store_read_aux(store_read_t *r, span_t prefix, store_aux_fn fn, void *arg)
{
    return r->ops->read_aux(r, prefix, fn, arg);
}

int store_aux_read_locked(store_write_t *w, span_t prefix, store_aux_fn fn, void *arg)
{
    return w->ops->aux_read_locked(w, prefix, fn, arg);
}

int store_log_prune(store_write_t *w, uint64_t upto_seq, uint64_t before_ms, size_t limit, size_t *deleted)
{
    return w->ops->log_prune(w, upto_seq, before_ms, limit, deleted);
}

int store_list_apply(store_write_t *w, span_t item, span_t user, const list_change_t *c)
{
    return w->ops->list_apply(w, item, user, c);
}

int store_lists_rebuild(store_write_t *w)
{
    return w->ops->lists_rebuild(w);
}

int store_read_list(store_read_t *r, const store_list_query_t *q, store_list_fn fn, void *arg)
{
    return r->ops->read_list(r, q, fn, arg);
}

int store_read_lists_check(store_read_t *r, span_t item, store_list_expect_fn expect, void *arg, uint64_t *mismatches)
{
    return r->ops->read_lists_check(r, item, expect, arg, mismatches);
}

int store_export_page(store_read_t *r, span_t after_item, span_t after_user, size_t limit, store_row_fn fn, void *arg,
                      size_t *visited)
{
    return r->ops->export_page(r, after_item, after_user, limit, fn, arg, visited);
}
