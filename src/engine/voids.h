/* voids.h — voided users as the store keeps them and every node caches them. The store keeps one
 * auxiliary record per voided user (STORE_VOID_PREFIX<user>, the void's time in ms) and a counter
 * record ("void/c": "<version> <count>"), shared by every node of a shared store; the version rises with
 * every void and restore, in its own transaction. The writer decides from the store itself
 * (store_user_voided), never from this cache: the cache serves the reads (a voided viewer's own counts,
 * the lists of who reacted) and the metrics. It is updated at once on the node that made the change
 * (before its answer leaves) and, on a shared store, within a second on the others (a thread reads
 * the version every VOIDS_POLL_MS). A restart reads it again from the store. */
#ifndef TALLY_ENGINE_VOIDS_H
#define TALLY_ENGINE_VOIDS_H

#include <stdatomic.h>

#include "core/span.h"
#include "store/store.h"

#define VOIDS_POLL_MS 500
#define VOIDS_COUNTER_KEY "void/c"

typedef struct voids voids_t;

typedef struct {
    atomic_uint_fast64_t voids, restores;            /* made through this node (that changed something) */
    atomic_uint_fast64_t voided_rows, restored_rows; /* rows that stopped / started counting through them */
    atomic_uint_fast64_t loads, load_failures;       /* sets loaded from the store */
    atomic_uint_fast64_t count;                      /* voided users known here */
} voids_stats_t;

/* Loads the set from store and, on a shared store, starts the thread that follows the version.
 * may_wait: the store may not answer yet (a shard past 0, opened while down): the set starts empty
 * and the thread loads it once the store answers (the shard serves nothing before). Returns 0, or -1
 * with err filled. */
int voids_open(store_t *store, bool may_wait, voids_t **out, char *err, size_t errlen);
void voids_close(voids_t *v);

/* Whether user is voided as this node knows it. Any thread; NULL v: false. */
bool voids_has(voids_t *v, span_t user);

/* Reads the version and loads the set again when it moved (or when force). Not an HTTP thread. */
int voids_refresh(voids_t *v, bool force);

/* After a void (voided true) or restore of user committed with the counter at version: in force here
 * at once. rows: how many rows it changed. Writer thread, before the answer leaves. */
void voids_changed(voids_t *v, span_t user, bool voided, uint64_t version, size_t rows);

const voids_stats_t *voids_stats(const voids_t *v);

/* "<version> <count>" → both (0 0 when unreadable). */
void voids_parse_counter(span_t value, uint64_t *version, uint64_t *count);

#endif
