/* voids_admin.c — the routes that void and restore a user, and the admin's view of a user. A void or a
 * restore is one WRITE_VOID command decided by the writer in its transaction (engine/writer.h); once it
 * is durable this node's set of voided users changes on the writer thread, before the answer leaves,
 * so the reads of this node follow at once (the others within a second: engine/voids.h). */
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
} void_req_t;

static void req_free(void *arg)
{
    void_req_t *r = arg;
    answer_free(&r->answer);
    free(r);
}

/* Writer thread: durable (or failed); a change made is in force here before the answer leaves (the
 * writer's voids_changed). */
static void void_done(write_cmd_t *cmd)
{
    void_req_t *r = (void_req_t *)cmd;
    const write_void_t *v = &cmd->void_user;
    span_t user = {v->user, v->user_len};
    if (cmd->answer.status == 200 && v->version) { /* the writer put it in force here before this */
        log_line("level=info event=void action=%s user=\"%.*s\" rows=%zu who=\"%s\"", v->restore ? "restore" : "void",
                 (int)user.len, user.ptr, v->rows, r->who);
    }
    r->answer = cmd->answer; /* taken over */
    cmd->answer = (answer_t){0};
    http_pending_respond(r->pending, &r->answer, req_free, r);
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
    if (!r->pending || atomic_load(&app->draining) || writer_submit(app->writer, &r->cmd) != 0) {
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
    c->n += set != KINDSET_EMPTY;
    c->last_seq = seq;
    memcpy(c->last, name.ptr, name.len);
    c->last_len = name.len;
    return 0;
}

/* The flag and the user's list (as the lists know it: it may lag the rows as much as the counts do),
 * from one snapshot. */
static void user_read(user_read_t *rd)
{
    store_read_t *snap;
    span_t user = {rd->user, rd->user_len};
    if (store_read_begin(rd->app->store, &snap) != STORE_OK) {
        answer_problem(&rd->answer, 503, "unavailable", "the store cannot be read");
        return;
    }
    char key[sizeof STORE_VOID_PREFIX + ID_MAX_LEN];
    int klen = snprintf(key, sizeof key, "%s%.*s", STORE_VOID_PREFIX, (int)user.len, user.ptr);
    flag_t flag = {{key, (size_t)klen}, false};
    int rc = store_read_aux(snap, flag.key, flag_one, &flag);
    count_t c = {0};
    store_list_query_t q = {.by_user = true, .key = user, .kind = KIND_NONE, .limit = USER_PAGE};
    while (rc == STORE_OK) {
        c.seen = 0;
        if ((rc = store_read_list(snap, &q, count_one, &c)) != STORE_OK || c.seen < USER_PAGE)
            break;
        q.seq = c.last_seq;
        q.name = (span_t){c.last, c.last_len};
        q.has_cursor = true;
    }
    store_read_end(snap);
    if (rc != STORE_OK) {
        answer_problem(&rd->answer, 503, "unavailable", "the store cannot be read");
        return;
    }
    answer_json(&rd->answer, 200,
                json_pack("{s:s%,s:b,s:I}", "user", rd->user, rd->user_len, "voided", flag.found, "reactions",
                          (json_int_t)c.n));
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
