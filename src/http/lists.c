/* lists.c — the two list pages: who reacted to an item, and what a user reacted to. Newest change
 * first in commit order (log positions, never a clock), keyset cursors, the access flags
 * (--who-reacted, --user-reactions). The lists are kept by the fold (store.h § the lists). */
#include "http/lists.h"
#include "http/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsontext.h"
#include "core/kindsjson.h"
#include "core/listcursor.h"
#include "core/parse.h"

#define LISTS_LIMIT_DEFAULT 20
#define LISTS_LIMIT_MAX 100

/* One page's read, copied out of its request so that it can run on a reader thread too. */
typedef struct {
    read_job_t job; /* first: a read_job_t * is a list_read_t * */
    app_t *app;
    http_pending_t *pending;
    char key[ID_MAX_LEN], name[ID_MAX_LEN];
    store_list_query_t q;
    answer_t answer;
} list_read_t;

typedef struct {
    const list_read_t *rd;
    json_t *entries;
    size_t n;
    uint64_t last_seq; /* of the limit-th entry: the next page starts below it */
    char last_name[ID_MAX_LEN];
    size_t last_name_len;
    bool more;
    size_t skipped; /* entries of voided users left out of a list of who reacted */
    int rc;
} page_t;

static int page_add(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    page_t *p = arg;
    const list_read_t *rd = p->rd;
    if (p->n == rd->q.limit - 1) { /* the one asked past the page: there may be more */
        p->more = true;
        return 1;
    }
    /* their reactions do not count (the item's shard's flag): not listed */
    if (!rd->q.by_user && voids_has(app_item_shard(rd->app, rd->q.key)->voids, name)) {
        p->skipped++;
        p->last_seq = seq; /* the next page goes on after it */
        memcpy(p->last_name, name.ptr, name.len);
        p->last_name_len = name.len;
        return 0;
    }
    char at[32];
    app_iso_time(at_ms, at);
    const kinds_t *kinds = rd->app->kinds;
    /* A many-mode page of one kind shows that kind's `at`, and the pair's whole set. */
    json_t *e = json_pack("{s:s%,s:o?,s:s}", rd->q.by_user ? "item" : "user", name.ptr, name.len, kindset_member(kinds),
                          kindset_json(kinds, set), "at", at);
    if (!e || json_array_append_new(p->entries, e) != 0) {
        p->rc = STORE_ERROR;
        return 1;
    }
    p->n++;
    p->last_seq = seq;
    memcpy(p->last_name, name.ptr, name.len);
    p->last_name_len = name.len;
    return 0;
}

/* Reads the page into rd->answer (any thread). */
static void list_page(list_read_t *rd)
{
    store_read_t *snap;
    app_shard_t *shard = rd->q.by_user ? app_user_shard(rd->app, rd->q.key) : app_item_shard(rd->app, rd->q.key);
    if (store_read_begin_single(shard->store, &snap) != STORE_OK) {
        answer_problem(&rd->answer, 503, "unavailable", "the store cannot be read");
        return;
    }
    page_t p = {.rd = rd, .entries = json_array(), .rc = STORE_OK};
    int rc = p.entries ? store_read_list(snap, &rd->q, page_add, &p) : STORE_ERROR;
    store_read_end(snap);
    if (rc == STORE_OK)
        rc = p.rc;
    if (p.skipped && p.n + p.skipped == rd->q.limit)
        p.more = true; /* the store stopped at the limit, voided users' entries included */
    json_t *body = NULL;
    if (rc == STORE_OK)
        body = json_pack("{s:s%,s:o}", rd->q.by_user ? "user" : "item", rd->key, rd->q.key.len, "reactions", p.entries);
    else
        json_decref(p.entries);
    if (body && p.more) {
        char cursor[LIST_CURSOR_MAX];
        size_t n = list_cursor_format(cursor, p.last_seq, (span_t){p.last_name, p.last_name_len});
        if (json_object_set_new(body, "next", json_stringn(cursor, n)) != 0) {
            json_decref(body);
            body = NULL;
        }
    }
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(body);
    if (!text) {
        answer_problem(&rd->answer, rc == STORE_UNAVAILABLE ? 503 : 500,
                       rc == STORE_UNAVAILABLE ? "unavailable" : "internal", "reading the list failed");
        return;
    }
    answer_set_body(&rd->answer, 200, ANSWER_JSON, text, strlen(text));
}

static void read_free(void *arg)
{
    list_read_t *rd = arg;
    answer_free(&rd->answer);
    free(rd);
}

static void list_job(read_job_t *job)
{
    list_read_t *rd = (list_read_t *)job;
    list_page(rd);
    http_pending_respond(rd->pending, &rd->answer, read_free, rd);
}

/* Who may ask, by the flag of the list: true, or false having replied 401/403. */
static bool access_or_reply(app_t *app, http_request_t *req, span_t key, bool by_user)
{
    list_access_t access = by_user ? app->user_reactions : app->who_reacted;
    auth_t who;
    policy_t p;
    if (!by_user && policies_lookup(app->policies, key, &p) && p.hidden) { /* hidden counts: admins only */
        if (!auth_user_or_reply(app, req, false, &who))
            return false;
        if (who.admin)
            return true;
        reply_problem(req, 403, "forbidden", "the item's counts are hidden: who reacted is shown to admins");
        return false;
    }
    if (access == LIST_ACCESS_PUBLIC)
        return auth_user_or_reply(app, req, false, &who) && read_rate_or_reply(app, req, &who);
    if (!auth_user_or_reply(app, req, true, &who))
        return false;
    if (access == LIST_ACCESS_USERS || who.admin || (access == LIST_ACCESS_OWNER && span_eq(who.user, key)))
        return true;
    reply_problem(req, 403, "forbidden",
                  access == LIST_ACCESS_OWNER ? "a user's reactions are shown to that user and to admins"
                                              : "who reacted is shown to admins");
    return false;
}

static bool param_error(http_request_t *req, const char *detail)
{
    reply_problem(req, 400, "invalid-parameter", detail);
    return false;
}

/* reaction, limit and after into rd->q; false having replied 400. */
static bool params_or_reply(app_t *app, http_request_t *req, span_t query, list_read_t *rd)
{
    span_t text;
    uint64_t limit = LISTS_LIMIT_DEFAULT;
    rd->q.kind = KIND_NONE;
    if (parse_query_param(query, "reaction", &text) && (rd->q.kind = kinds_find(app->kinds, text, false)) <= 0)
        return param_error(req, "reaction must be one of the configured kinds");
    if (parse_query_param(query, "limit", &text) && (parse_uint(text, LISTS_LIMIT_MAX, &limit) != 0 || limit < 1))
        return param_error(req, "limit must be a whole number from 1 to 100");
    if (parse_query_param(query, "after", &text)) {
        span_t name;
        if (list_cursor_parse(text, &rd->q.seq, &name) != 0)
            return param_error(req, "after is not a cursor this list gave");
        memcpy(rd->name, name.ptr, name.len);
        rd->q.name = (span_t){rd->name, name.len};
        rd->q.has_cursor = true;
    }
    rd->q.limit = (size_t)limit + 1; /* one more, to know whether there may be more */
    return true;
}

void lists_get(app_t *app, http_request_t *req, span_t key, span_t query, bool by_user)
{
    if (!id_valid(key)) {
        reply_problem(req, 400, by_user ? "invalid-user-id" : "invalid-item-id",
                      "ids are 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)");
        return;
    }
    if (!access_or_reply(app, req, key, by_user))
        return;
    list_read_t *rd = calloc(1, sizeof *rd);
    if (!rd) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    rd->app = app;
    memcpy(rd->key, key.ptr, key.len);
    rd->q.key = (span_t){rd->key, key.len};
    rd->q.by_user = by_user;
    if (!params_or_reply(app, req, query, rd)) {
        free(rd);
        return;
    }
    if (app->readers) {
        app_read_submit(app, req, &rd->job, list_job, &rd->pending, rd);
        return;
    }
    list_page(rd);
    http_respond(req, &rd->answer);
    read_free(rd);
}
