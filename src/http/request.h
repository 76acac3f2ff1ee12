/* request.h — what a handler sees of an HTTP request, and how it answers. The h2o adapter
 * (server.c) implements this; nothing else in tally includes h2o. All functions run on the
 * request's own HTTP thread unless said otherwise. */
#ifndef TALLY_HTTP_REQUEST_H
#define TALLY_HTTP_REQUEST_H

#include "core/answer.h"
#include <stdint.h>

#include "core/span.h"

typedef struct http_request http_request_t;

span_t http_req_method(const http_request_t *req);
/* The path with its query, as sent, in origin form: of an absolute-form target
 * (http://host/path?q, RFC 9112 §3.2.2) only the path and query. */
span_t http_req_target(const http_request_t *req);
span_t http_req_raw_target(const http_request_t *req); /* as sent, whatever its form */
span_t http_req_authority(const http_request_t *req);  /* the Host header ("" when none) */

/* Which listening socket the request came in on. */
typedef enum { HTTP_LISTENER_PUBLIC, HTTP_LISTENER_ADMIN, HTTP_LISTENERS } http_listener_t;
http_listener_t http_req_listener(const http_request_t *req);

/* False when the request's framing is ambiguous (request smuggling): Content-Length given twice
 * with different values, Transfer-Encoding given twice, or both given. */
bool http_req_framing_ok(const http_request_t *req);

/* The connection ends after this request's answer. */
void http_req_close_connection(http_request_t *req);
span_t http_req_body(const http_request_t *req);

/* The first value of header name (lowercase) and how many times it occurs. */
size_t http_req_header(const http_request_t *req, const char *name, span_t *first);

/* Every value of header name (lowercase) in the order received, up to max of them into values;
 * returns how many times it occurs (which may be more than max). */
size_t http_req_header_all(const http_request_t *req, const char *name, span_t *values, size_t max);

/* Bytes of all request header names and values together. */
size_t http_req_header_bytes(const http_request_t *req);

/* Microseconds since the request began to arrive. */
uint64_t http_req_age_us(const http_request_t *req);

/* The connection's peer address as text ("127.0.0.1", "::1"); the length, 0 when unknown. Behind a
 * proxy this is the proxy: the client's address is http/client.h's. */
size_t http_req_peer(const http_request_t *req, char *buf, size_t len);

/* The peer address in the IPv6 form of core/netallow.h (IPv4 as ::ffff:a.b.c.d); false when the
 * connection has none (not an IP socket). */
bool http_req_peer_addr(const http_request_t *req, uint8_t out[16]);

/* Adds a response header to the answer about to be sent (the server's on_respond hook). */
void http_add_header(http_request_t *req, const char *name, const char *value);

/* Sends a (the adapter copies what it needs; a stays the caller's). */
void http_respond(http_request_t *req, const answer_t *a);

/* A request answered later, from another thread (the writer). */
typedef struct http_pending http_pending_t;

/* Marks req as answered later. Returns NULL when out of memory. */
http_pending_t *http_defer(http_request_t *req);

/* Undoes http_defer when the request is answered at once after all (its own thread). */
void http_pending_cancel(http_pending_t *p);

/* On the request's own thread (http_thread_post to the index http_thread_index gave the handler):
 * ends the deferral and gives the request back to be answered there (a stream opened on it, say), or
 * NULL when the client left meanwhile. p is gone either way. */
http_request_t *http_pending_take(http_pending_t *p);

/* Any thread: answers the deferred request with a on its own HTTP thread (if the client is still
 * there), then calls release(arg) on that thread. a must stay valid until release is called. */
void http_pending_respond(http_pending_t *p, const answer_t *a, void (*release)(void *), void *arg);

/* Between these two, http_pending_respond on the calling thread holds its answers back, and the
 * flush hands them over with one message (one wake-up) per HTTP thread instead of one each: the
 * writer releases a whole batch's answers this way. Any thread but an HTTP thread. */
void http_answers_hold(void);
void http_answers_flush(void);

#endif
