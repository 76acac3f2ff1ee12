/* policies_admin.c — the item policy admin routes. A change is one WRITE_AUX command decided by the
 * writer in its transaction (engine/policies.h: the limit, a delete's 404, the version); once it is
 * durable this node loads the new table on the writer thread, before the answer leaves and before the
 * writer decides anything else, so the change applies at once here. Reads answer from the table in
 * force on this node. Nothing here waits. */
#include "http/policies_admin.h"
#include "http/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "core/clock.h"
#include "core/log.h"

#define MEDIA_JSON "application/json"

typedef struct {
    policy_write_t write; /* first: a write_cmd_t * is a policy_req_t * */
    app_t *app;
    http_pending_t *pending;
    answer_t answer;
    char who[ID_MAX_LEN + 1];
} policy_req_t;

static void req_free(void *arg)
{
    policy_req_t *r = arg;
    answer_free(&r->answer);
    policy_write_free(&r->write);
    free(r);
}

/* Writer thread: durable (or refused, or failed); a change made loads the new table first. */
static void write_done(write_cmd_t *cmd)
{
    policy_req_t *r = (policy_req_t *)cmd;
    if (cmd->answer.status >= 200 && cmd->answer.status < 300) {
        policies_changed(r->app->policies, &r->write);
        log_line("level=info event=policy action=%s target=\"%.*s\" who=\"%s\"", r->write.put ? "put" : "delete",
                 (int)r->write.target_len, r->write.target, r->who);
    }
    r->answer = cmd->answer; /* taken over */
    cmd->answer = (answer_t){0};
    http_pending_respond(r->pending, &r->answer, req_free, r);
}

/* The target of the path: `*` may come percent-encoded (%2A) at its end. false having replied. */
static bool target_or_reply(http_request_t *req, span_t raw, char out[POLICY_TARGET_MAX + 1], span_t *target)
{
    size_t len = raw.len;
    bool star = len >= 3 && strncasecmp(raw.ptr + len - 3, "%2A", 3) == 0;
    if (star)
        len -= 3;
    policy_target_t type;
    if (len + star <= POLICY_TARGET_MAX) {
        memcpy(out, raw.ptr, len);
        if (star)
            out[len++] = '*';
        *target = (span_t){out, len};
        if (policy_target_parse(*target, &type) == 0)
            return true;
    }
    reply_problem(req, 400, "invalid-parameter",
                  "a target is an item id, a prefix of one ending in * (comment-*), or * for every item");
    return false;
}

/* The body as a policy ({} when empty); false having replied. */
static bool policy_or_reply(app_t *app, http_request_t *req, policy_t *p)
{
    span_t body = http_req_body(req), type;
    if (body.len > BODY_MAX_BYTES) {
        reply_problem(req, 413, "body-too-large", "request bodies are at most 4096 bytes");
        return false;
    }
    if (body.len && http_req_header(req, "content-type", &type) > 0) {
        size_t n = 0;
        while (n < type.len && type.ptr[n] != ';' && type.ptr[n] != ' ' && type.ptr[n] != '\t')
            n++;
        if (n != strlen(MEDIA_JSON) || strncasecmp(type.ptr, MEDIA_JSON, n) != 0) {
            reply_problem(req, 415, "unsupported-media-type", "request bodies are application/json");
            return false;
        }
    }
    json_error_t jerr;
    json_t *doc = body.len ? json_loadb(body.ptr, body.len, JSON_REJECT_DUPLICATES, &jerr) : json_object();
    if (!json_is_object(doc)) {
        reply_problem(req, 400, "invalid-json", doc ? "the body must be a JSON object" : jerr.text);
        json_decref(doc);
        return false;
    }
    char err[160];
    int rc = policy_from_json(app->kinds, doc, p, err, sizeof err);
    json_decref(doc);
    if (rc != 0)
        reply_problem(req, 400, "invalid-parameter", err);
    return rc == 0;
}

/* Admin rights, and who the admin is (for the log). false having replied. */
static bool admin_or_reply(app_t *app, http_request_t *req, auth_t *who)
{
    if (!auth_user_or_reply(app, req, true, who))
        return false;
    if (who->admin)
        return true;
    reply_problem(req, 403, "forbidden", "this needs admin rights");
    return false;
}

void policies_admin_list(app_t *app, http_request_t *req)
{
    auth_t who;
    if (!admin_or_reply(app, req, &who))
        return;
    json_t *list = policies_list_json(app->policies);
    if (!list) {
        reply_problem(req, 500, "internal", "out of memory");
        return;
    }
    reply_json(req, 200, list);
}

void policies_admin_one(app_t *app, http_request_t *req, span_t raw)
{
    auth_t who;
    char buf[POLICY_TARGET_MAX + 1];
    span_t target;
    span_t method = http_req_method(req);
    if (!admin_or_reply(app, req, &who) || !target_or_reply(req, raw, buf, &target))
        return;
    if (span_eq_str(method, "GET") || span_eq_str(method, "HEAD")) {
        json_t *one = policies_one_json(app->policies, target);
        if (one)
            reply_json(req, 200, one);
        else
            reply_problem(req, 404, "not-found", "no policy for that target");
        return;
    }
    bool put = span_eq_str(method, "PUT");
    policy_t p = {0};
    if (put && !policy_or_reply(app, req, &p))
        return;
    policy_req_t *r = calloc(1, sizeof *r);
    if (!r) {
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    policy_write_init(&r->write, app->policies, target, &p, put);
    if (put && !r->write.value) {
        req_free(r);
        reply_problem(req, 503, "overloaded", "out of memory");
        return;
    }
    r->app = app;
    snprintf(r->who, sizeof r->who, "%.*s", (int)who.user.len, who.user.ptr);
    r->write.cmd.done = write_done;
    r->pending = http_defer(req);
    if (!r->pending || atomic_load(&app->draining) || writer_submit(app->writer, &r->write.cmd) != 0) {
        if (r->pending)
            http_pending_cancel(r->pending);
        req_free(r);
        reply_problem(req, 503, "unavailable", "shutting down or too many writes queued; retry");
    }
}
