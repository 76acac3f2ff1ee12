/* trends.c — GET /v1/trending (public) and GET /v1/admin/hot. */
#include <stdio.h>

#include "core/parse.h"
#include "http/auth.h"
#include "http/trends.h"

#define TRENDING_LIMIT_DEFAULT 10
#define HOT_LIST_MAX 100

static const char *const window_names[WINDOW_COUNT] = {"1m", "1h", "24h"};

/* reaction=<kind> (default like, else the first kind), window=1m|1h|24h (default 1h), limit=1..100. */
static bool trending_params_or_reply(const app_t *app, http_request_t *req, span_t query, int *kind,
                                     trend_window_t *window, size_t *limit)
{
    span_t v;
    *kind = kinds_find(app->kinds, SPAN_LIT("like"), false);
    if (*kind < 0)
        *kind = 1;
    *window = WINDOW_1H;
    *limit = TRENDING_LIMIT_DEFAULT;
    if (parse_query_param(query, "reaction", &v) && (*kind = kinds_find(app->kinds, v, false)) < 0) {
        reply_problem(req, 400, "invalid-parameter", "reaction must be one of the configured kinds");
        return false;
    }
    if (parse_query_param(query, "window", &v)) {
        int w = -1;
        for (int i = 0; i < WINDOW_COUNT; i++)
            if (span_eq_str(v, window_names[i]))
                w = i;
        if (w < 0) {
            reply_problem(req, 400, "invalid-parameter", "window is 1m, 1h or 24h");
            return false;
        }
        *window = (trend_window_t)w;
    }
    uint64_t n;
    if (parse_query_param(query, "limit", &v) &&
        (parse_uint(v, TRENDING_LIMIT_MAX, &n) != 0 || n < 1 || (*limit = (size_t)n, false))) {
        reply_problem(req, 400, "invalid-parameter", "limit is a whole number from 1 to 100");
        return false;
    }
    return true;
}

void trending_get(app_t *app, http_request_t *req, span_t query)
{
    auth_t who;
    int kind;
    trend_window_t window;
    size_t limit;
    if (!auth_user_or_reply(app, req, false, &who) || !read_rate_or_reply(app, req, &who) ||
        !trending_params_or_reply(app, req, query, &kind, &window, &limit))
        return;
    trend_entry_t top[TRENDING_LIMIT_MAX];
    /* items whose counts are hidden are left out (but for admins): asked for in full, then cut */
    size_t n = trending_top(app->trending, kind, window, who.admin ? limit : TRENDING_LIMIT_MAX, top), shown = 0;
    json_t *items = json_array();
    for (size_t i = 0; items && i < n && shown < limit; i++) {
        policy_t p;
        if (!who.admin && policies_lookup(app->policies, span_of(top[i].item), &p) && p.hidden)
            continue;
        shown++;
        json_array_append_new(items, json_pack("{s:s,s:I}", "item", top[i].item, "gain", (json_int_t)top[i].gain));
    }
    reply_json(req, 200,
               json_pack("{s:s,s:s,s:o,s:f}", "window", window_names[window], "reaction", kinds_name(app->kinds, kind),
                         "items", items, "error_bound", trending_error_bound(app->trending, kind, window)));
}

void hot_get(app_t *app, http_request_t *req)
{
    if (!auth_admin_or_reply(app, req))
        return;
    trend_entry_t hot[HOT_LIST_MAX];
    size_t n = trending_hot(app->trending, HOT_LIST_MAX, hot);
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++)
        json_array_append_new(items, json_pack("{s:s,s:f}", "item", hot[i].item, "rate", hot[i].rate));
    reply_json(req, 200, json_pack("{s:o}", "items", items));
}
