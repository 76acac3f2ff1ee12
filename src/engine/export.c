/* export.c — exports, page after page from one held snapshot (export.h). The admin export walks the
 * rows in key order (store_export_page, keyset: each page starts after the last row of the one
 * before); a user's export walks the user's list, newest first (store_read_list with its cursor). */
#include "engine/export.h"

#include <stdlib.h>
#include <string.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/kindsjson.h"

/* The admin export's parts, in order. Voided users (not in this build) would be a part of their own
 * between the rows and the closing line: one {"user":"…","voided":true} line each, from the same
 * snapshot, counted in the closing line's N like the rows. */
typedef enum { PART_ROWS, PART_CLOSING, PART_DONE } part_t;

struct export
{
    store_t *store;
    const kinds_t *kinds;
    store_read_t *snap; /* NULL once released */
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

int export_open(store_t *store, export_kind_t kind, span_t user, uint64_t deadline_ms, export_t **out)
{
    export_t *x = calloc(1, sizeof *x);
    if (!x)
        return STORE_ERROR;
    x->store = store;
    x->kinds = store_kinds(store);
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
    int rc = store_read_begin(store, &x->snap);
    if (rc != STORE_OK) {
        free(x);
        return rc;
    }
    *out = x;
    return STORE_OK;
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
        rc = store_read_aux(x->snap, SPAN_LIT(STORE_VOID_PREFIX), voided_line, &p);
        x->part = PART_CLOSING;
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
    if (rc == STORE_OK && p.visited < EXPORT_PAGE_ROWS)
        x->part = PART_DONE;
    return rc;
}

int export_next(export_t *x, textbuf_t *out)
{
    if (x->part == PART_DONE)
        return EXPORT_DONE;
    if (!x->snap || mono_ms() >= x->deadline_ms) {
        export_release(x);
        return EXPORT_CUT;
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
