/* export.c — exports, page after page from one held snapshot (export.h). The admin export walks the
 * rows in key order (store_export_page, keyset: each page starts after the last row of the one
 * before); a user's export walks the user's list, newest first (store_read_list with its cursor). With
 * several shards each is read in turn, shard 0 first. */
#include "engine/export.h"

#include <stdlib.h>
#include <string.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/kindsjson.h"

/* The admin export's parts, in order: every shard's rows (shard 0's voided users after its rows,
 * from the same snapshot, counted in the closing line's N like the rows), then the closing line. */
typedef enum { PART_ROWS, PART_CLOSING, PART_DONE } part_t;

struct export
{
    store_t *stores[SHARD_MAX];
    size_t n, k; /* the shards, and the one being read */
    uint32_t (*shard_of)(void *arg, span_t item);
    void *shard_arg;
    const kinds_t *kinds;
    store_read_t *snap; /* shard k's; NULL between two shards and once released */
    bool released;      /* export_release: no snapshot is taken again */
    export_kind_t kind;
    part_t part;
    uint64_t deadline_ms, lines;
    char user[ID_MAX_LEN];
    size_t user_len;
    /* where the next page starts: after this row (item, user), or this list entry (seq, item) */
    char after_item[ID_MAX_LEN], after_user[ID_MAX_LEN];
    size_t after_item_len, after_user_len;
    uint64_t after_seq;
    bool has_cursor;
};

int export_open(const export_stores_t *from, export_kind_t kind, span_t user, uint64_t deadline_ms, export_t **out)
{
    if (from->n == 0 || from->n > SHARD_MAX || (from->n > 1 && !from->shard_of))
        return STORE_ERROR;
    export_t *x = calloc(1, sizeof *x);
    if (!x)
        return STORE_ERROR;
    memcpy(x->stores, from->stores, from->n * sizeof *x->stores);
    x->n = from->n;
    x->shard_of = from->shard_of;
    x->shard_arg = from->arg;
    x->kinds = store_kinds(x->stores[0]);
    x->kind = kind;
    x->deadline_ms = deadline_ms;
    if (kind == EXPORT_USER) {
        if (user.len == 0 || user.len > ID_MAX_LEN) {
            free(x);
            return STORE_ERROR;
        }
        memcpy(x->user, user.ptr, user.len);
        x->user_len = user.len;
    }
    int rc = store_read_begin(x->stores[0], &x->snap);
    if (rc != STORE_OK) {
        free(x);
        return rc;
    }
    *out = x;
    return STORE_OK;
}

/* Shard k is read whole: its snapshot goes now, and the next shard's is taken at the next page. */
static void shard_done(export_t *x)
{
    store_read_end(x->snap);
    x->snap = NULL;
    x->k++;
    x->after_item_len = x->after_user_len = 0;
    x->after_seq = 0;
    x->has_cursor = false;
}

typedef struct {
    export_t *x;
    textbuf_t *out;
    size_t visited;
} page_t;

/* {"item":"…","user":"…","reaction":"like"} — the import's own line (reactions in many mode). */
static int row_line(void *arg, span_t item, span_t user, const reaction_row_t *row)
{
    page_t *p = arg;
    export_t *x = p->x;
    memcpy(x->after_item, item.ptr, item.len);
    x->after_item_len = item.len;
    memcpy(x->after_user, user.ptr, user.len);
    x->after_user_len = user.len;
    if (row->set == KINDSET_EMPTY)
        return 0;
    textbuf_lit(p->out, "{\"item\":");
    textbuf_safe(p->out, item);
    textbuf_lit(p->out, ",\"user\":");
    textbuf_safe(p->out, user);
    textbuf_append(p->out, ",\"", 2);
    const char *member = kindset_member(x->kinds);
    textbuf_append(p->out, member, strlen(member));
    textbuf_append(p->out, "\":", 2);
    kindset_append(p->out, x->kinds, row->set);
    textbuf_lit(p->out, "}\n");
    x->lines++;
    return p->out->failed ? 1 : 0;
}

/* {"item":"…","reaction":"like","at":"…"} (reactions in many mode). */
static int list_line(void *arg, span_t item, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    page_t *p = arg;
    export_t *x = p->x;
    memcpy(x->after_item, item.ptr, item.len);
    x->after_item_len = item.len;
    x->after_seq = seq;
    p->visited++;
    if (set == KINDSET_EMPTY) /* the lists hold only pairs whose set is not empty */
        return 0;
    if (x->n > 1 && x->shard_of(x->shard_arg, item) != x->k)
        return 0; /* another shard's item (a user's list gathers them): that shard says it */
    x->lines++;
    char at[32];
    changejson_iso_time(at_ms, at);
    textbuf_lit(p->out, "{\"item\":");
    textbuf_safe(p->out, item);
    textbuf_append(p->out, ",\"", 2);
    const char *member = kindset_member(x->kinds);
    textbuf_append(p->out, member, strlen(member));
    textbuf_append(p->out, "\":", 2);
    kindset_append(p->out, x->kinds, set);
    textbuf_lit(p->out, ",\"at\":\"");
    textbuf_append(p->out, at, strlen(at));
    textbuf_lit(p->out, "\"}\n");
    return p->out->failed ? 1 : 0;
}

/* {"user":"…","voided":true}: one line per voided user, after the rows, from the same snapshot. */
static int voided_line(void *arg, span_t key, span_t value)
{
    (void)value;
    page_t *p = arg;
    size_t plen = sizeof STORE_VOID_PREFIX - 1;
    if (key.len <= plen)
        return 0;
    textbuf_lit(p->out, "{\"user\":");
    textbuf_safe(p->out, (span_t){key.ptr + plen, key.len - plen});
    textbuf_lit(p->out, ",\"voided\":true}\n");
    p->x->lines++;
    return p->out->failed ? 1 : 0;
}

static int rows_page(export_t *x, textbuf_t *out)
{
    page_t p = {.x = x, .out = out};
    size_t visited = 0;
    int rc = store_export_page(x->snap, (span_t){x->after_item, x->after_item_len},
                               (span_t){x->after_user, x->after_user_len}, EXPORT_PAGE_ROWS, row_line, &p, &visited);
    if (rc == STORE_OK && visited < EXPORT_PAGE_ROWS) {
        if (x->k == 0)
            rc = store_read_aux(x->snap, SPAN_LIT(STORE_VOID_PREFIX), voided_line, &p);
        if (x->k + 1 == x->n)
            x->part = PART_CLOSING;
        else if (rc == STORE_OK)
            shard_done(x);
    }
    if (rc == STORE_OK && out->failed)
        rc = STORE_ERROR;
    return rc;
}

static int user_page(export_t *x, textbuf_t *out)
{
    page_t p = {.x = x, .out = out};
    store_list_query_t q = {.by_user = true,
                            .key = {x->user, x->user_len},
                            .kind = KIND_NONE,
                            .seq = x->after_seq,
                            .name = {x->after_item, x->after_item_len},
                            .has_cursor = x->has_cursor,
                            .limit = EXPORT_PAGE_ROWS};
    int rc = store_read_list(x->snap, &q, list_line, &p);
    x->has_cursor = true;
    if (rc == STORE_OK && out->failed)
        rc = STORE_ERROR;
    if (rc == STORE_OK && p.visited < EXPORT_PAGE_ROWS) {
        if (x->k + 1 == x->n)
            x->part = PART_DONE;
        else
            shard_done(x);
    }
    return rc;
}

int export_next(export_t *x, textbuf_t *out)
{
    if (x->part == PART_DONE)
        return EXPORT_DONE;
    if (x->released || mono_ms() >= x->deadline_ms) {
        export_release(x);
        return EXPORT_CUT;
    }
    if (!x->snap) { /* the next shard */
        int rc = store_read_begin(x->stores[x->k], &x->snap);
        if (rc != STORE_OK) {
            x->snap = NULL;
            export_release(x);
            return rc < 0 ? rc : STORE_ERROR;
        }
    }
    int rc = x->kind == EXPORT_USER ? user_page(x, out) : rows_page(x, out);
    if (rc != STORE_OK) {
        export_release(x);
        return rc < 0 ? rc : STORE_ERROR;
    }
    if (x->part == PART_CLOSING) {
        textbuf_printf(out, "{\"export\":\"complete\",\"lines\":%llu}\n", (unsigned long long)x->lines);
        x->part = PART_DONE;
    }
    if (x->part == PART_DONE) {
        export_release(x); /* nothing more to read: the snapshot goes at once */
        return out->failed ? STORE_ERROR : EXPORT_DONE;
    }
    return EXPORT_MORE;
}

void export_release(export_t *x)
{
    x->released = true;
    if (x->snap) {
        store_read_end(x->snap);
        x->snap = NULL;
    }
}

uint64_t export_lines(const export_t *x)
{
    return x->lines;
}

void export_close(export_t *x)
{
    if (!x)
        return;
    export_release(x);
    free(x);
}
