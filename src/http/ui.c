/* ui.c — the static files of /ui/, served from the binary (no disk, no CDN: works offline), and the
 * OpenAPI document rendered at start-up. */
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "core/jsontext.h"
#include "http/ui.h"

/* Pages may load only this origin's scripts and styles, and call only this origin (the demo and the
 * operator's page talk to the tallyd that served them); no inline script, no plugins, no framing. */
#define UI_CSP                                                                                                         \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; "   \
    "form-action 'none'; frame-ancestors 'none'"
/* Not fingerprinted names: caches keep them but ask again (a cheap 304 with the ETag). */
#define UI_CACHE_CONTROL "no-cache"
#define OPENAPI_ETAG_BYTES 10 /* of the SHA-256, as hex: as the files' ETags */

const ui_file_t *ui_file_find(span_t path)
{
    for (size_t i = 0; i < ui_files_count; i++)
        if (span_eq_str(path, ui_files[i].path))
            return &ui_files[i];
    return NULL;
}

/* Whether an If-None-Match list ("a", W/"b", or *) names etag. Weak comparison (RFC 9110 §13.1.2). */
static bool etag_listed(span_t list, const char *etag)
{
    size_t n = strlen(etag);
    for (size_t i = 0; i < list.len; i++) {
        if (list.ptr[i] == '*')
            return true;
        if (list.ptr[i] == '"' && list.len - i >= n && memcmp(list.ptr + i, etag, n) == 0)
            return true;
    }
    return false;
}

/* 200 with bytes (or 304 when If-None-Match names etag), with the validators and, for HTML, the
 * CSP. */
static void reply_static(http_request_t *req, const void *bytes, size_t len, const char *content_type, const char *etag)
{
    span_t inm;
    bool fresh = http_req_header(req, "if-none-match", &inm) >= 1 && etag_listed(inm, etag);
    http_add_header(req, "etag", etag);
    http_add_header(req, "cache-control", UI_CACHE_CONTROL);
    http_add_header(req, "x-content-type-options", "nosniff");
    if (strncmp(content_type, "text/html", 9) == 0)
        http_add_header(req, "content-security-policy", UI_CSP);
    answer_t a = {.status = fresh ? 304 : 200, .type = ANSWER_TEXT, .content_type = content_type};
    if (!fresh) {
        a.body = malloc(len ? len : 1);
        if (!a.body) {
            reply_problem(req, 503, "overloaded", "out of memory");
            return;
        }
        memcpy(a.body, bytes, len);
        a.body_len = len;
    }
    http_respond(req, &a);
    answer_free(&a);
}

void ui_get(app_t *app, http_request_t *req, span_t path)
{
    (void)app;
    const ui_file_t *f = ui_file_find(path);
    if (!f) {
        reply_problem(req, 404, "not-found", "no such file under /ui/");
        return;
    }
    reply_static(req, f->bytes, f->len, f->content_type, f->etag);
}

int ui_openapi_render(app_t *app, const openapi_config_t *cfg)
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    json_t *doc = openapi_build(cfg);
    char *text = doc ? json_dumps(doc, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REALS) : NULL;
    json_decref(doc);
    if (!text)
        return -1;
    app->openapi_json = text;
    app->openapi_len = strlen(text);
    SHA256((const unsigned char *)text, app->openapi_len, digest);
    size_t n = (size_t)snprintf(app->openapi_etag, sizeof app->openapi_etag, "\"");
    for (size_t i = 0; i < OPENAPI_ETAG_BYTES; i++)
        n += (size_t)snprintf(app->openapi_etag + n, sizeof app->openapi_etag - n, "%02x", digest[i]);
    snprintf(app->openapi_etag + n, sizeof app->openapi_etag - n, "\"");
    return 0;
}

void ui_openapi_get(app_t *app, http_request_t *req)
{
    reply_static(req, app->openapi_json, app->openapi_len, "application/json", app->openapi_etag);
}
