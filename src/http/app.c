/* app.c — the handlers' toolkit, below them: problem and JSON answers, times, the rate limits, the
 * writes-failing judgement. The dispatcher that calls the handlers is dispatch.c, above them. */
#include "http/app.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/changejson.h"
#include "core/clock.h"
#include "core/jsontext.h"
#include "core/log.h"

void reply_problem_with(http_request_t *req, int status, const char *code, const char *detail, problem_headers_t h)
{
    answer_t a = {0};
    answer_problem(&a, status, code, detail);
    a.retry_after_s = h.retry_after_s;
    a.allow = h.allow;
    a.www_authenticate = h.www_authenticate;
    http_respond(req, &a);
    answer_free(&a);
}

void reply_problem(http_request_t *req, int status, const char *code, const char *detail)
{
    reply_problem_with(req, status, code, detail, (problem_headers_t){.retry_after_s = status == 503 ? 1 : 0});
}

void app_iso_time(uint64_t at_ms, char out[32])
{
    changejson_iso_time(at_ms, out);
}

bool app_shard_writes_failing(app_shard_t *shard)
{
    /* Any failure in the window: on a full disk a commit that happens to fit now and then does not
     * make the node healthy. */
    uint64_t failed = atomic_load(&shard->last_write_failed_ms);
    return failed && wall_ms() - failed < WRITES_FAILING_HOLD_MS;
}

bool app_writes_failing(app_t *app)
{
    for (size_t k = 0; k < app->nshards; k++)
        if (app_shard_writes_failing(&app->shard[k]))
            return true;
    return false;
}

void reply_body(http_request_t *req, int status, answer_type_t type, char *body, size_t len)
{
    answer_t a = {0};
    answer_set_body(&a, status, type, body, len);
    http_respond(req, &a);
    answer_free(&a);
}

void reply_json(http_request_t *req, int status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_REALS) : NULL;
    json_decref(body);
    if (!text)
        reply_problem(req, 500, "internal", "out of memory");
    else
        reply_body(req, status, ANSWER_JSON, text, strlen(text));
}

void app_read_submit(app_t *app, http_request_t *req, read_job_t *job, void (*run)(read_job_t *job),
                     http_pending_t **pending, void *owner)
{
    job->run = run;
    if ((*pending = http_defer(req)) && readers_submit(app->readers, job) == 0)
        return;
    if (*pending)
        http_pending_cancel(*pending);
    free(owner);
    reply_problem(req, 503, "overloaded", "too many reads are waiting; retry shortly");
}

bool rate_or_reply(app_t *app, ratelimit_t *limit, http_request_t *req, span_t key)
{
    unsigned wait_s = ratelimit_take(limit, key, mono_ms());
    if (wait_s == 0)
        return true;
    atomic_fetch_add_explicit(&app->rate_limited, 1, memory_order_relaxed);
    reply_problem_with(req, 429, "rate-limited", "too many requests; retry after the time in Retry-After",
                       (problem_headers_t){.retry_after_s = wait_s});
    return false;
}

app_shard_t *app_item_shard(app_t *app, span_t item)
{
    return &app->shard[shards_of_item(app->shards, item)];
}

app_shard_t *app_user_shard(app_t *app, span_t user)
{
    return &app->shard[shards_of_user(app->shards, user)];
}
