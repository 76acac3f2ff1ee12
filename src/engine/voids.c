/* voids.c — the voided users known on this node, and following the store's version. */
#include "engine/voids.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/strmap.h"
#include "engine/thread.h"

struct voids {
    store_t *store;
    pthread_rwlock_t lock;     /* guards set */
    strmap_t set;              /* user → 1 */
    atomic_bool empty;         /* nobody voided: a read skips the lock */
    pthread_mutex_t load_lock; /* one load at a time; guards version and loaded */
    uint64_t version;
    bool loaded; /* once: until then a refresh loads whatever the version says */
    voids_stats_t stats;
    bool follow;
    pthread_t thread;
    pthread_mutex_t wait_lock;
    pthread_cond_t wake;
    bool stopping;
};

const voids_stats_t *voids_stats(const voids_t *v)
{
    return &v->stats;
}

bool voids_has(voids_t *v, span_t user)
{
    if (!v || atomic_load_explicit(&v->empty, memory_order_acquire))
        return false;
    pthread_rwlock_rdlock(&v->lock);
    bool found = strmap_find(&v->set, user) != NULL;
    pthread_rwlock_unlock(&v->lock);
    return found;
}

void voids_parse_counter(span_t value, uint64_t *version, uint64_t *count)
{
    char text[48] = "";
    unsigned long long a = 0, n = 0;
    memcpy(text, value.ptr, value.len < sizeof text - 1 ? value.len : sizeof text - 1);
    if (sscanf(text, "%llu %llu", &a, &n) != 2)
        a = n = 0;
    *version = a;
    *count = n;
}

typedef struct {
    strmap_t set;
    uint64_t version;
    bool failed;
} load_t;

static int collect(void *arg, span_t key, span_t value)
{
    load_t *l = arg;
    size_t plen = strlen(STORE_VOID_PREFIX);
    if (span_eq_str(key, VOIDS_COUNTER_KEY)) {
        uint64_t count;
        voids_parse_counter(value, &l->version, &count);
        return 0;
    }
    if (key.len <= plen || memcmp(key.ptr, STORE_VOID_PREFIX, plen) != 0)
        return 0;
    uint64_t *slot = strmap_get(&l->set, (span_t){key.ptr + plen, key.len - plen});
    if (!slot) {
        l->failed = true;
        return 1;
    }
    *slot = 1;
    return 0;
}

static int read_version(voids_t *v, uint64_t *version)
{
    store_read_t *snap;
    load_t l = {0};
    int rc = store_read_begin_single(v->store, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = store_read_aux(snap, SPAN_LIT(VOIDS_COUNTER_KEY), collect, &l);
    store_read_end(snap);
    *version = l.version;
    return rc;
}

static int load(voids_t *v)
{
    store_read_t *snap;
    load_t l = {0};
    int rc = store_read_begin(v->store, &snap);
    if (rc != STORE_OK)
        return rc;
    rc = store_read_aux(snap, SPAN_LIT("void/"), collect, &l);
    store_read_end(snap);
    if (rc == STORE_OK && l.failed)
        rc = STORE_ERROR;
    if (rc != STORE_OK) {
        strmap_free(&l.set);
        atomic_fetch_add_explicit(&v->stats.load_failures, 1, memory_order_relaxed);
        return rc;
    }
    pthread_rwlock_wrlock(&v->lock);
    strmap_t old = v->set;
    v->set = l.set;
    atomic_store_explicit(&v->empty, l.set.count == 0, memory_order_release);
    pthread_rwlock_unlock(&v->lock);
    strmap_free(&old);
    v->version = l.version;
    v->loaded = true;
    atomic_store_explicit(&v->stats.count, l.set.count, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->stats.loads, 1, memory_order_relaxed);
    return STORE_OK;
}

int voids_refresh(voids_t *v, bool force)
{
    pthread_mutex_lock(&v->load_lock);
    uint64_t version = 0;
    force |= !v->loaded;
    int rc = force ? STORE_OK : read_version(v, &version);
    if (rc == STORE_OK && (force || version != v->version))
        rc = load(v);
    pthread_mutex_unlock(&v->load_lock);
    return rc;
}

void voids_changed(voids_t *v, span_t user, bool voided, uint64_t version, size_t rows)
{
    atomic_fetch_add_explicit(voided ? &v->stats.voids : &v->stats.restores, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(voided ? &v->stats.voided_rows : &v->stats.restored_rows, rows, memory_order_relaxed);
    pthread_mutex_lock(&v->load_lock);
    bool applied = false;
    if (v->loaded && v->version + 1 == version) { /* the set in force is the one just before this change */
        pthread_rwlock_wrlock(&v->lock);
        if (voided) {
            uint64_t *slot = strmap_get(&v->set, user);
            if (slot) {
                *slot = 1;
                applied = true;
            }
        } else {
            strmap_delete(&v->set, user);
            applied = true;
        }
        atomic_store_explicit(&v->empty, v->set.count == 0, memory_order_release);
        atomic_store_explicit(&v->stats.count, v->set.count, memory_order_relaxed);
        pthread_rwlock_unlock(&v->lock);
        if (applied)
            v->version = version;
    }
    pthread_mutex_unlock(&v->load_lock);
    if (!applied && voids_refresh(v, true) != STORE_OK) /* the follower (or the next change) tries again */
        log_line("level=warn event=void-load error=\"reading the voided users failed\"");
}

static void *follow_main(void *arg)
{
    voids_t *v = arg;
    thread_set_name("tally-voids");
    pthread_mutex_lock(&v->wait_lock);
    while (!v->stopping) {
        struct timespec deadline = clock_deadline(CLOCK_MONOTONIC, VOIDS_POLL_MS);
        pthread_cond_timedwait(&v->wake, &v->wait_lock, &deadline);
        if (v->stopping)
            break;
        pthread_mutex_unlock(&v->wait_lock);
        voids_refresh(v, false); /* a failure keeps the set in force until the store answers */
        pthread_mutex_lock(&v->wait_lock);
    }
    pthread_mutex_unlock(&v->wait_lock);
    return NULL;
}

int voids_open(store_t *store, bool may_wait, voids_t **out, char *err, size_t errlen)
{
    voids_t *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    v->store = store;
    pthread_rwlock_init(&v->lock, NULL);
    pthread_mutex_init(&v->load_lock, NULL);
    pthread_mutex_init(&v->wait_lock, NULL);
    clock_cond_init_monotonic(&v->wake);
    atomic_store(&v->empty, true);
    if (voids_refresh(v, true) != STORE_OK && !(may_wait && store_shared(store))) {
        snprintf(err, errlen, "reading the voided users from the store failed");
        voids_close(v);
        return -1;
    }
    if (store_shared(store)) {
        if (pthread_create(&v->thread, NULL, follow_main, v) != 0) {
            snprintf(err, errlen, "starting the voided users' thread failed");
            voids_close(v);
            return -1;
        }
        v->follow = true;
    }
    *out = v;
    return 0;
}

void voids_close(voids_t *v)
{
    if (!v)
        return;
    if (v->follow)
        thread_stop_join(&v->wait_lock, &v->wake, &v->stopping, v->thread);
    strmap_free(&v->set);
    pthread_rwlock_destroy(&v->lock);
    pthread_mutex_destroy(&v->load_lock);
    pthread_mutex_destroy(&v->wait_lock);
    pthread_cond_destroy(&v->wake);
    free(v);
}
