/* server_core.h — what the files of the h2o adapter share: server.c (event loops, listening sockets,
 * connections, the request view), server_answers.c (answers that come from other threads: deferred,
 * held and bundled, streamed; calls posted to an HTTP thread) and server_core.c (the state they
 * share, an answer on the HTTP thread). Only these files include h2o; nothing outside
 * src/http/server*.c includes this header. */
#ifndef TALLY_HTTP_SERVER_CORE_H
#define TALLY_HTTP_SERVER_CORE_H

#include <assert.h>
#include <h2o.h>
#include <h2o/multithread.h>
#include <stdatomic.h>

#include "http/server.h"

#define MAX_THREADS 64

typedef struct http_thread http_thread_t;

struct http_pending {
    h2o_multithread_message_t message; /* first: the queue hands back this link */
    h2o_req_t *req;                    /* NULL once h2o disposed of the request (client gone) */
    struct pending_guard *guard;
    http_thread_t *thread;
    const answer_t *answer;
    void (*release)(void *);
    void *release_arg;
    http_pending_t *bundled; /* the next answer for the same thread sent with this one's message */
};

/* Lives in the request's memory pool; h2o calls its dispose when the request goes away. */
struct pending_guard {
    http_pending_t *pending;
};

typedef enum { CONTROL_STOP_ACCEPTING, CONTROL_EXIT } control_t;

/* http_thread_post's message. */
typedef struct {
    h2o_multithread_message_t message;
    void (*fn)(void *arg);
    void *arg;
} call_msg_t;

typedef struct {
    h2o_multithread_message_t message;
    control_t what;
} control_msg_t;

/* One listening socket on one thread. */
typedef struct {
    http_thread_t *thread;
    http_listener_t kind;
    h2o_socket_t *sock;
    h2o_timeout_entry_t resume; /* linked while accepting is paused (out of file descriptors) */
} thread_listener_t;

/* Ours, for each accepted connection (the socket's on_close data). */
typedef struct {
    http_thread_t *thread;
    h2o_socket_t *sock;
    http_listener_t listener;
    bool reserve_slot;       /* holds one of the public listener's health slots */
    bool close_after_answer; /* the connection ends with its next answer */
    bool large;              /* in the large-body context */
    size_t reserved_bytes;   /* of the large-body budget */
    h2o_timeout_entry_t peek_timeout;
    struct http_stream *stream; /* the streaming answer the connection carries, if any */
} conn_slot_t;

struct http_thread {
    pthread_t tid;
    int index;
    h2o_evloop_t *loop;
    h2o_context_t ctx_small, ctx_large;
    h2o_accept_ctx_t accept_small, accept_large;
    thread_listener_t listeners[HTTP_LISTENERS];
    h2o_timeout_t peek_timeout, reserve_timeout, pause_timeout;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t answers, control, calls;
    bool accepting;
    bool exit;
};

typedef struct {
    http_server_config_t cfg;
    h2o_globalconf_t config_small, config_large;
    http_thread_t threads[MAX_THREADS];
    int nthreads;
    atomic_size_t pending;
    atomic_size_t connections[HTTP_LISTENERS];
    atomic_size_t reserve_used;
    atomic_size_t large_bytes;
    atomic_uint_fast64_t refused, accept_errors, large_refused;
    atomic_bool accept_error_logged;
    h2o_barrier_t started;
} http_server_state_t;

/* A request is used on its own HTTP thread only (request.h): asserted where an answer starts or goes
 * out. Cheap, so kept in release builds. */
#define HTTP_ON_REQUEST_THREAD(req)                                                                                    \
    assert(http_current &&                                                                                             \
           ((req)->conn->ctx == &http_current->ctx_small || (req)->conn->ctx == &http_current->ctx_large))

/* The server's state (server_core.c). */
extern http_server_state_t http_srv;

/* The HTTP thread the caller runs on (NULL on any other thread). */
extern _Thread_local http_thread_t *http_current;

/* The request behind the adapter's opaque handle. */
h2o_req_t *http_h2o_req(const http_request_t *req);
/* Adds a response header (name and value copied into the request's pool). */
void http_add_header_str(h2o_req_t *req, const char *name, const char *value);
/* Our record of the connection a request came on (NULL when h2o gives no socket). */
conn_slot_t *http_slot_of(const h2o_req_t *req);
/* The connection goes: its stream (if any) is told so (server_answers.c). */
void http_stream_unslot(conn_slot_t *slot);
/* The receivers of each HTTP thread's answers and posted calls (server_answers.c). */
void http_on_answers(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages);
void http_on_calls(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages);

#endif
