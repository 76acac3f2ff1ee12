/* readers.c — the reader pool: a bounded queue of reads and the threads that run them. */
#include "engine/readers.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "engine/thread.h"

struct readers {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    read_job_t *head, *tail;
    size_t queued, queue_max, nthreads;
    bool stopping;
    pthread_t threads[];
};

static void *reader_main(void *arg)
{
    readers_t *r = arg;
    thread_set_name("tally-reader");
    pthread_mutex_lock(&r->lock);
    for (;;) {
        while (!r->head && !r->stopping)
            pthread_cond_wait(&r->wake, &r->lock);
        read_job_t *job = r->head;
        if (!job) /* stopping, and nothing is left */
            break;
        r->head = job->next;
        if (!r->head)
            r->tail = NULL;
        r->queued--;
        pthread_mutex_unlock(&r->lock);
        job->run(job);
        pthread_mutex_lock(&r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int readers_start(size_t threads, size_t queue_max, readers_t **out)
{
    readers_t *r = calloc(1, sizeof *r + threads * sizeof r->threads[0]);
    if (!r)
        return -1;
    r->queue_max = queue_max;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    for (; r->nthreads < threads; r->nthreads++)
        if (pthread_create(&r->threads[r->nthreads], NULL, reader_main, r) != 0) {
            readers_free(r);
            return -1;
        }
    *out = r;
    return 0;
}

int readers_submit(readers_t *r, read_job_t *job)
{
    pthread_mutex_lock(&r->lock);
    if (r->stopping || r->queued >= r->queue_max) {
        pthread_mutex_unlock(&r->lock);
        return -1;
    }
    job->next = NULL;
    if (r->tail)
        r->tail->next = job;
    else
        r->head = job;
    r->tail = job;
    r->queued++;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

void readers_stop(readers_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < r->nthreads; i++)
        pthread_join(r->threads[i], NULL);
    r->nthreads = 0;
}

void readers_free(readers_t *r)
{
    if (!r)
        return;
    readers_stop(r);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
