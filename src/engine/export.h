/* export.h — exports: a store's rows (or one user's reactions) as JSON lines, page after page from
 * one snapshot, so that whoever sends them holds one page in memory at a time, never the whole body.
 * Used by GET /v1/admin/export, GET /v1/users/{user}/export (http/export.c) and `tally export`.
 *
 * The admin export's lines are import lines ({"item","user","reaction"}, "reactions" in many mode)
 * followed by the closing line {"export":"complete","lines":N}, N the lines before it; an export
 * that stops early (its time is up, the store failed) has no closing line, so a cut export is told
 * from a whole one. A user's export is one line {"item","reaction","at"} per item the user's
 * reaction is set on, newest first, from the user's list (which lags the rows as the counts do). */
#ifndef TALLY_ENGINE_EXPORT_H
#define TALLY_ENGINE_EXPORT_H

#include "core/shardmap.h"
#include "core/textbuf.h"
#include "store/store.h"

#define EXPORT_PAGE_ROWS 1000        /* rows read (and lines rendered) per page */
#define EXPORT_TIMEOUT_DEFAULT "10m" /* how long an export may hold its snapshot */
#define EXPORT_MAX_DEFAULT 8         /* exports at once (tallyd's --max-exports) */

typedef enum { EXPORT_ALL, EXPORT_USER } export_kind_t;

/* What export_next did. */
enum {
    EXPORT_MORE = 1, /* a page was appended: call again */
    EXPORT_DONE = 0, /* the last lines were appended (the closing line included): the export is whole */
    EXPORT_CUT = 2,  /* its time is up: nothing appended, no closing line; the snapshot is released */
    /* negative: a STORE_* error; nothing more comes (no closing line) */
};

typedef struct export export_t;

/* The stores an export reads, one per shard, shard 0's first (kept by the caller while the export
 * lives), and the shard of an item (NULL with one store). */
typedef struct {
    store_t *const *stores;
    size_t n;
    uint32_t (*shard_of)(void *arg, span_t item);
    void *arg;
} export_stores_t;

/* Opens an export of the whole store (kind EXPORT_ALL) or of user's reactions, each shard read from
 * one snapshot (store_read_begin), every shard's taken now and held until export_close,
 * export_release, the end of the export, or deadline_ms (on mono_ms's clock) at the latest. With
 * several shards their parts are merged: the admin export's rows into one key order, as one store
 * gives them, its voided-user lines after them shard 0's (the flag is on every shard, and shard 0's is
 * voided and restored first); a user's reactions, each shard's own items from its list of the user,
 * newest first by their time. Returns STORE_OK, or an error (nothing open). Any thread; the export is
 * then used by one thread at a time. */
int export_open(const export_stores_t *from, export_kind_t kind, span_t user, uint64_t deadline_ms, export_t **out);

/* Appends the next page's lines to out. */
int export_next(export_t *x, textbuf_t *out);

/* Ends the snapshot now (the deadline, a client gone); export_next then answers EXPORT_CUT. */
void export_release(export_t *x);

/* The lines appended so far (the closing line not counted). */
uint64_t export_lines(const export_t *x);

/* Releases the snapshot if still held, and frees x. */
void export_close(export_t *x);

#endif
