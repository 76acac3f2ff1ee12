/* readers.h — threads that run reads for the HTTP layer when a read waits on a database server
 * (the PostgreSQL store): an event loop must never block on a round trip, so the HTTP thread
 * hands the read over and answers when it is done. The embedded store's reads take microseconds
 * and stay on the HTTP threads. */
#ifndef TALLY_ENGINE_READERS_H
#define TALLY_ENGINE_READERS_H

#include <stddef.h>

typedef struct readers readers_t;

/* A read to run on a reader thread. Owned by the submitter until run is called; run owns it then
 * (it answers and frees). */
typedef struct read_job {
    void (*run)(struct read_job *job);
    struct read_job *next; /* the queue's */
} read_job_t;

#define READERS_THREADS_DEFAULT 8
#define READERS_QUEUE_MAX 4096

/* Starts threads reader threads. Returns 0, or -1. */
int readers_start(size_t threads, size_t queue_max, readers_t **out);

/* Queues job (any thread). Returns 0, or -1 when the queue is full or the pool is stopping: the
 * job is still the caller's (answer 503). */
int readers_submit(readers_t *r, read_job_t *job);

/* Runs every queued job and stops the threads; later submits are refused. */
void readers_stop(readers_t *r);
/* Frees the pool (stopping it first), once no thread can submit any more. */
void readers_free(readers_t *r);

#endif
