/* voids_admin.c — the routes that void and restore a user, and the admin's view of a user. A void or a
 * restore is one WRITE_VOID command per shard, each decided by its shard's writer in its transaction
 * (engine/writer.h); once one is durable this node's set of voided users of that shard changes on the
 * writer thread, before the answer leaves, so the reads of this node follow at once (the others within
 * a second: engine/voids.h).
 *
 * With several shards the flag is on every shard, and each shard's void makes its own items' rows
 * stop counting in the same transaction as its flag: each shard keeps invariant 3 by itself, and a
 * voided viewer's reads go by each item's shard's flag, so the user sees nothing change while the
 * void goes from shard to shard. Shard 0 goes first: it holds the feature version (checked in its
 * transaction) and the flag that GET /v1/admin/users/{user} reports and an export carries; then the
 * others, one after the other. Each shard's part is idempotent (a shard already as asked changes
 * nothing and says 0), so after a failure part-way (503) the same request again finishes what is
 * left; the answer's N is the rows changed over every shard. */
#include "http/voids_admin.h"
#include "http/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

typedef struct {
    write_cmd_t cmd; /* first: a write_cmd_t * is a void_req_t * */
    app_t *app;
    http_pending_t *pending;
    answer_t answer;
    char who[ID_MAX_LEN + 1];
    size_t shard; /* the shard whose writer has cmd */
    size_t rows;  /* changed over the shards done */
    bool changed; /* some shard's flag changed */
} void_req_t;

static void req_free(void *arg)
{
    void_req_t *r = arg;
    answer_free(&r->answer);
    free(r);
}

static void void_respond(void_req_t *r)
{
    const write_void_t *v = &r->cmd.void_user;
    span_t user = {v->user, v->user_len};
    if (r->changed)
        log_line("level=info event=void action=%s user=\"%.*s\" rows=%zu who=\"%s\"", v->restore ? "restore" : "void",
                 (int)user.len, user.ptr, r->rows, r->who);
    http_pending_respond(r->pending, &r->answer, req_free, r);
}

/* Writer thread (shard r->shard's): its part is durable (or failed); a change made is in force here
 * before the answer leaves (the writer's voids_changed). The next shard's part goes next. */
static void void_done(write_cmd_t *cmd)
{
    void_req_t *r = (void_req_t *)cmd;
    write_void_t *v = &cmd->void_user;
    app_t *app = r->app;
    if (cmd->answer.status != 200) {
        if (r->shard > 0 && cmd->answer.status == 503) /* the shards before keep theirs */
            answer_problem(&cmd->answer, 503, "unavailable",
                           "a shard could not be written; what was done stays done: the same request again "
                           "finishes what is left");
        if (cmd->answer.status == 503)
            cmd->answer.retry_after_s = 1;
        r->answer = cmd->answer; /* taken over */
        cmd->answer = (answer_t){0};
        void_respond(r);
        return;
    }
    r->rows += v->rows;
    r->changed |= v->version != 0;
    if (++r->shard == app->nshards) {
        char body[64];
        int n = snprintf(body, sizeof body, "{\"%s\":%zu}", v->restore ? "restored" : "voided", r->rows);
        char *copy = strndup(body, (size_t)n);
        answer_free(&cmd->answer);
        if (copy)
            answer_set_body(&r->answer, 200, ANSWER_JSON, copy, (size_t)n);
        else
            answer_problem(&r->answer, 503, "unavailable", "out of memory, the change made on every shard");
        r->answer.retry_after_s = r->answer.status == 503 ? 1 : 0;
        void_respond(r);
        return;
    }
    answer_free(&cmd->answer);
    cmd->answer = (answer_t){0};
    v->rows = 0;
    v->version = 0;
    v->feature_checked = true;                                  /* shard 0 found it in force, and it never falls */
    if (writer_submit(app->shard[r->shard].writer, cmd) != 0) { /* begun: shutting down waits for it */
        answer_problem(&r->answer, 503, "unavailable",
                       "shutting down or too many writes queued on a shard; what was done stays done: the same "
                       "request again finishes what is left");
        r->answer.retry_after_s = 1;
        void_respond(r);
    }
}

static bool user_or_reply(http_request_t *req, span_t user)
{
    if (id_valid(user))
        return true;
    reply_problem(req, 400, "invalid-user-id", "ids are 1-128 bytes of A-Z a-z 0-9 . _ : ~ - (and not . or ..)");
    return false;
}

static bool admin_or_reply(app_t *app, http_request_t *req, auth_t *who)
{
    if (!auth_user_or_reply(app, req, true, who))
        return false;
    if (who->admin)
        return true;
    reply_problem(req, 403, "forbidden", "this needs admin rights");
    return false;
}

void voids_admin_change(app_t *app, http_request_t *req, span_t user, bool restore)
{
    auth_t who;
    if (!admin_or_reply(app, req, &who) || !user_or_reply(req, user))
        return;
    void_req_t *r = calloc(1, sizeof *r);
    if (!r) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    r->app = app;
    snprintf(r->who, sizeof r->who, "%.*s", (int)who.user.len, who.user.ptr);
    r->cmd.type = WRITE_VOID;
    r->cmd.done = void_done;
    memcpy(r->cmd.void_user.user, user.ptr, user.len);
    r->cmd.void_user.user_len = user.len;
    r->cmd.void_user.restore = restore;
    r->pending = http_defer(req);
    if (!r->pending || atomic_load(&app->draining) || writer_submit(app->shard[0].writer, &r->cmd) != 0) {
        if (r->pending)
            http_pending_cancel(r->pending);
        req_free(r);
        reply_problem(req, 503, "unavailable", "shutting down or too many writes queued; retry");
    }
}

/* --- GET /v1/admin/users/{user} --- */

#define USER_PAGE 1000

typedef struct {
    read_job_t job; /* first: a read_job_t * is a user_read_t * */
    app_t *app;
    http_pending_t *pending;
    char user[ID_MAX_LEN];
    size_t user_len;
    answer_t answer;
} user_read_t;

typedef struct {
    span_t key;
    bool found;
} flag_t;

static int flag_one(void *arg, span_t key, span_t value)
{
    (void)value;
    flag_t *f = arg;
    if (span_eq(key, f->key))
        f->found = true;
    return 0;
}

typedef struct {
    app_t *app;
    app_shard_t *shard; /* the shard read: its own items only (with several, a user's list may hold others') */
    size_t n, seen;
    uint64_t last_seq;
    char last[ID_MAX_LEN];
    size_t last_len;
} count_t;

static int count_one(void *arg, span_t name, uint64_t seq, uint64_t at_ms, kindset_t set)
{
    (void)at_ms;
    count_t *c = arg;
    c->seen++;
    c->n += set != KINDSET_EMPTY && (c->app->nshards == 1 || app_item_shard(c->app, name) == c->shard);
    c->last_seq = seq;
    memcpy(c->last, name.ptr, name.len);
    c->last_len = name.len;
    return 0;
}

/* The user's reactions on one shard's items, as its lists know them (they may lag the rows as much as
 * the counts do), from one snapshot; and, on shard 0, the flag (the cluster's: shard 0 is voided
 * first and restored first). */
static int shard_read(app_shard_t *shard, span_t user, bool *flagged, count_t *c)
{
    store_read_t *snap;
    if (store_read_begin(shard->store, &snap) != STORE_OK)
        return STORE_UNAVAILABLE;
    int rc = STORE_OK;
    if (flagged) {
        char key[sizeof STORE_VOID_PREFIX + ID_MAX_LEN];
        int klen = snprintf(key, sizeof key, "%s%.*s", STORE_VOID_PREFIX, (int)user.len, user.ptr);
        flag_t flag = {{key, (size_t)klen}, false};
        rc = store_read_aux(snap, flag.key, flag_one, &flag);
        *flagged = flag.found;
    }
    c->shard = shard;
    store_list_query_t q = {.by_user = true, .key = user, .kind = KIND_NONE, .limit = USER_PAGE};
    while (rc == STORE_OK) {
        c->seen = 0;
        if ((rc = store_read_list(snap, &q, count_one, c)) != STORE_OK || c->seen < USER_PAGE)
            break;
        q.seq = c->last_seq;
        q.name = (span_t){c->last, c->last_len};
        q.has_cursor = true;
    }
    store_read_end(snap);
    return rc;
}

static void user_read(user_read_t *rd)
{
    span_t user = {rd->user, rd->user_len};
    bool flagged = false;
    count_t c = {.app = rd->app};
    int rc = STORE_OK;
    for (size_t k = 0; k < rd->app->nshards && rc == STORE_OK; k++)
        rc = shard_read(&rd->app->shard[k], user, k == 0 ? &flagged : NULL, &c);
    if (rc != STORE_OK) {
        answer_problem(&rd->answer, 503, "unavailable", "the store cannot be read");
        return;
    }
    answer_json(
        &rd->answer, 200,
        json_pack("{s:s%,s:b,s:I}", "user", rd->user, rd->user_len, "voided", flagged, "reactions", (json_int_t)c.n));
}

static void read_free(void *arg)
{
    user_read_t *rd = arg;
    answer_free(&rd->answer);
    free(rd);
}

static void user_job(read_job_t *job)
{
    user_read_t *rd = (user_read_t *)job;
    user_read(rd);
    http_pending_respond(rd->pending, &rd->answer, read_free, rd);
}

void voids_admin_get(app_t *app, http_request_t *req, span_t user)
{
    auth_t who;
    if (!admin_or_reply(app, req, &who) || !user_or_reply(req, user))
        return;
    user_read_t *rd = calloc(1, sizeof *rd);
    if (!rd) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    rd->app = app;
    memcpy(rd->user, user.ptr, user.len);
    rd->user_len = user.len;
    if (app->readers) {
        app_read_submit(app, req, &rd->job, user_job, &rd->pending, rd);
        return;
    }
    user_read(rd);
    http_respond(req, &rd->answer);
    read_free(rd);
}
