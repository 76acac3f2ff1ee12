/* feed.c — the long-poll waiter list and its thread. */
#include "engine/feed.h"

#include "core/clock.h"
#include "engine/thread.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define FEED_IDLE_MS 1000
#define FEED_SHARED_POLL_MS 100 /* a shared store: how often waiters look for other nodes' entries */

struct feed_waiter {
    uint64_t after, deadline_ms;
    feed_wake_fn wake;
    void *arg;
    feed_waiter_t *next;
};

struct feed {
    store_t *store;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    feed_waiter_t *waiters;
    bool dirty; /* a commit since the last check */
    bool stopping;
};

void feed_notify(void *arg)
{
    feed_t *f = arg;
    pthread_mutex_lock(&f->lock);
    f->dirty = true;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

int feed_wait(feed_t *f, uint64_t after, uint64_t wait_ms, feed_wake_fn wake, void *arg)
{
    feed_waiter_t *w = malloc(sizeof *w);
    if (!w)
        return -1;
    *w = (feed_waiter_t){after, mono_ms() + wait_ms, wake, arg, NULL};
    pthread_mutex_lock(&f->lock);
    if (f->stopping) {
        pthread_mutex_unlock(&f->lock);
        free(w);
        return -1;
    }
    w->next = f->waiters;
    f->waiters = w;
    f->dirty = true; /* check it at once: entries may have arrived since its page was read */
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return 0;
}

/* The newest seq in the log (or the checkpoint, when the log is pruned empty). */
static uint64_t feed_last_seq(store_t *store)
{
    store_read_t *snap;
    uint64_t first = 0, last = 0, checkpoint = 0;
    if (store_read_begin(store, &snap) != STORE_OK)
        return UINT64_MAX; /* wake everyone: they will report the error */
    store_read_log_bounds(snap, &first, &last);
    store_read_checkpoint(snap, &checkpoint);
    store_read_end(snap);
    return last > checkpoint ? last : checkpoint;
}

static void *feed_main(void *arg)
{
    feed_t *f = arg;
    thread_set_name("tally-feed");
    pthread_mutex_lock(&f->lock);
    for (;;) {
        uint64_t now = mono_ms(), next_deadline = now + FEED_IDLE_MS;
        uint64_t last = f->dirty || f->stopping ? feed_last_seq(f->store) : 0;
        bool checked = f->dirty;
        f->dirty = false;
        feed_waiter_t *ready = NULL, **pp = &f->waiters;
        while (*pp) {
            feed_waiter_t *w = *pp;
            if (f->stopping || w->deadline_ms <= now || (checked && last > w->after)) {
                *pp = w->next;
                w->next = ready;
                ready = w;
            } else {
                if (w->deadline_ms < next_deadline)
                    next_deadline = w->deadline_ms;
                pp = &w->next;
            }
        }
        bool stop = f->stopping && !f->waiters;
        pthread_mutex_unlock(&f->lock);
        for (feed_waiter_t *w = ready, *next; w; w = next) {
            next = w->next;
            w->wake(w->arg);
            free(w);
        }
        if (stop)
            return NULL;
        pthread_mutex_lock(&f->lock);
        if (!f->dirty && !f->stopping) {
            uint64_t wait = next_deadline > mono_ms() ? next_deadline - mono_ms() : 0;
            bool poll = f->waiters && store_shared(f->store); /* nobody tells this node of the others' commits */
            if (poll && wait > FEED_SHARED_POLL_MS)
                wait = FEED_SHARED_POLL_MS;
            struct timespec until = clock_deadline(CLOCK_MONOTONIC, wait);
            pthread_cond_timedwait(&f->cond, &f->lock, &until);
            if (poll)
                f->dirty = true;
        }
    }
}

int feed_start(store_t *store, feed_t **out)
{
    feed_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->store = store;
    pthread_mutex_init(&f->lock, NULL);
    clock_cond_init_monotonic(&f->cond);
    if (pthread_create(&f->thread, NULL, feed_main, f) != 0) {
        free(f);
        return -1;
    }
    *out = f;
    return 0;
}

void feed_stop(feed_t *f)
{
    if (!f)
        return;
    thread_stop_join(&f->lock, &f->cond, &f->stopping, f->thread);
}

void feed_free(feed_t *f)
{
    if (!f)
        return;
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    free(f);
}
