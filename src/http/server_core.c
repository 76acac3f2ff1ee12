/* server_core.c — the floor of the h2o adapter, below its two halves (server.c: event loops,
 * listening sockets, connections, the request view; server_answers.c: answers that come from other
 * threads): the state they share, and an answer sent on the HTTP thread. */
#include "http/server_core.h"

#include <stdio.h>
#include <string.h>

http_server_state_t http_srv;

_Thread_local http_thread_t *http_current;

h2o_req_t *http_h2o_req(const http_request_t *req)
{
    return (h2o_req_t *)req;
}

conn_slot_t *http_slot_of(const h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    return sock ? sock->on_close.data : NULL;
}

static const char *content_type_of(answer_type_t type)
{
    switch (type) {
    case ANSWER_JSON:
        return "application/json";
    case ANSWER_PROBLEM:
        return "application/problem+json";
    case ANSWER_TEXT:
        return "text/plain; version=0.0.4; charset=utf-8";
    }
    return "application/octet-stream";
}

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : status >= 300 ? "Redirection" : "OK";
    }
}

void http_add_header_str(h2o_req_t *req, const char *name, const char *value)
{
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, value, strlen(value));
}

void http_add_header(http_request_t *request, const char *name, const char *value)
{
    h2o_req_t *req = http_h2o_req(request);
    h2o_iovec_t v = h2o_strdup(&req->pool, value, SIZE_MAX);
    h2o_iovec_t n = h2o_strdup(&req->pool, name, SIZE_MAX);
    h2o_add_header_by_str(&req->pool, &req->res.headers, n.base, n.len, 1, NULL, v.base, v.len);
}

void http_respond(http_request_t *request, const answer_t *a)
{
    h2o_req_t *req = http_h2o_req(request);
    HTTP_ON_REQUEST_THREAD(req);
    char buf[32];
    req->res.status = a->status;
    req->res.reason = reason_of(a->status);
    conn_slot_t *slot = http_slot_of(req);
    if (slot && (slot->close_after_answer || slot->large))
        req->http1_is_persistent = 0;
    http_add_header_str(req, "content-type", a->content_type ? a->content_type : content_type_of(a->type));
    if (a->has_etag) {
        snprintf(buf, sizeof buf, "\"%llu\"", (unsigned long long)a->etag_version);
        h2o_iovec_t v = h2o_strdup(&req->pool, buf, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ETAG, NULL, v.base, v.len);
    }
    if (a->weak_etag[0]) {
        h2o_iovec_t v = h2o_strdup(&req->pool, a->weak_etag, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ETAG, NULL, v.base, v.len);
    }
    if (a->cache == ANSWER_CACHE_PUBLIC && a->max_age_s) {
        snprintf(buf, sizeof buf, "public, max-age=%u", a->max_age_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, buf, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, v.base, v.len);
    } else if (a->cache == ANSWER_CACHE_PUBLIC) {
        http_add_header_str(req, "cache-control", "no-cache");
    } else if (a->cache == ANSWER_CACHE_PRIVATE) {
        http_add_header_str(req, "cache-control", "private, no-store");
    }
    if (a->replayed)
        http_add_header_str(req, "idempotent-replayed", "true");
    if (a->retry_after_s) {
        snprintf(buf, sizeof buf, "%u", a->retry_after_s);
        h2o_iovec_t v = h2o_strdup(&req->pool, buf, SIZE_MAX);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v.base, v.len);
    }
    if (a->allow)
        http_add_header_str(req, "allow", a->allow);
    if (a->www_authenticate)
        http_add_header_str(req, "www-authenticate", "Bearer");
    /* A 304 carries no Content-Length (RFC 9110 §8.6: it would have to be the 200's length). */
    req->res.content_length = a->status == 304 ? SIZE_MAX : a->body_len;
    if (http_srv.cfg.on_respond)
        http_srv.cfg.on_respond(http_srv.cfg.app, request, a->status, a->body_len);
    h2o_send_inline(req, a->body ? a->body : "", a->body_len);
}
