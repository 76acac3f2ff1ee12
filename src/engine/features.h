/* features.h — the feature version: which features the nodes sharing a store may use.
 *
 * A feature that changes what the store holds (a record or a log entry an older build would misread)
 * is used only once every node runs a build that knows it. Each build supports feature versions up to
 * FEATURE_VERSION_SUPPORTED; the store holds the version in force and, per node, the highest version
 * it supports and when it was last seen. The version in force is raised (by any node, in its
 * heartbeat's transaction) to the lowest version supported by the nodes seen alive within
 * FEATURES_ALIVE_MS, and never lowered. A node that supports less than the version in force refuses
 * to start; a running node that finds itself passed (it was taken for gone) stops the process.
 *
 * The records (auxiliary records, so both stores keep them as they keep the policies' counter):
 *   feature/v            "<version in force>"
 *   feature/n/<node id>  "<supported version> <last seen, wall ms>"
 * A node id is new for each start (host name, process id, random bits). Builds without this module
 * write no record: they cannot be seen (docs/operations.md "Feature versions").
 *
 * On the embedded store the process is the only node: the version in force is raised to what it
 * supports when it opens. On a shared store a thread heartbeats every FEATURES_HEARTBEAT_MS. */
#ifndef TALLY_ENGINE_FEATURES_H
#define TALLY_ENGINE_FEATURES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/answer.h"
#include "engine/writer.h"
#include "store/store.h"

/* The feature versions, and what each adds:
 *   1  the base: reactions, counts, the log and change feed, lists, trending, webhooks;
 *   2  item policies (policy/ records) and voiding users (void/ records, the log's counted bits).
 * A new version is one more line here and FEATURE_VERSION_SUPPORTED raised. */
#define FEATURE_VERSION_BASE 1
#define FEATURE_VERSION_POLICIES_VOIDS 2
#define FEATURE_VERSION_SUPPORTED 2

#define FEATURES_HEARTBEAT_MS 1000 /* a node's record is written again this often (a shared store) */
#define FEATURES_ALIVE_MS 5000     /* a node seen this recently counts; the bound the version waits for */
#define FEATURES_FORGET_MS 3600000 /* a record not seen for this long is deleted */

#define FEATURES_KEY_PREFIX "feature/"
#define FEATURES_VERSION_KEY "feature/v"
#define FEATURES_NODE_PREFIX "feature/n/"

/* One node's record as read. */
typedef struct {
    uint64_t supported;
    uint64_t seen_ms;
} feature_node_t;

/* The rule (pure): the version in force given the one stored and the nodes' records at now_ms. The
 * lowest version supported among the nodes seen within alive_ms (a record stamped later than now, a
 * clock ahead, counts as seen), when that is above in_force; else in_force (never lowered; no node
 * alive: unchanged). */
uint64_t features_rule(uint64_t in_force, const feature_node_t *nodes, size_t n, uint64_t now_ms, uint64_t alive_ms);

/* Whether this node may raise the version now (pure): when no other node has a record (a fresh store,
 * the embedded store), or once its own heartbeats have succeeded for alive_ms without a failure
 * (steady_ms: for how long; 0: the last one failed, or none yet). Otherwise a node back from an outage
 * of the database could raise the version before a node that supports less, back too, has written its
 * record again: that node would then find itself passed and stop. */
bool features_may_raise(bool others, uint64_t steady_ms, uint64_t alive_ms);

/* The version in force where a store holds no feature/v record: the base, unless the store already
 * holds policies or voids (used_before: only builds that knew them wrote them). */
uint64_t features_initial(bool used_before);

/* "<supported> <seen_ms>" → record; -1 when unreadable. */
int features_parse_node(span_t value, feature_node_t *out);

/* In a write transaction (w's thread): whether the version in force is at least need. When it is
 * not, *answer is a 409 feature-unavailable problem naming what needs it (what) and both versions, and
 * *ok is false. Returns a STORE_ code. */
int features_require(store_write_t *tx, uint64_t need, const char *what, answer_t *answer, bool *ok);

typedef struct features features_t;

typedef struct {
    atomic_uint_fast64_t in_force;     /* as this node last read it */
    atomic_uint_fast64_t nodes_alive;  /* nodes seen alive at the last heartbeat, this one included */
    atomic_uint_fast64_t nodes_behind; /* of them, those supporting less than this build */
    atomic_uint_fast64_t heartbeats, heartbeat_failures;
} features_stats_t;

/* Registers this process as a node (one transaction through w: its record written, the version in
 * force raised when the rule says so) and, on a shared store, starts the heartbeat. Returns 0; or -1
 * with err filled: the version in force is above what this build supports (the message names both),
 * or the store could not be written. announce: log the start-up line (event=feature-version). Any
 * thread that may block; w running. */
int features_open(store_t *store, writer_t *w, bool announce, features_t **out, char *err, size_t errlen);

/* Stops the heartbeat and frees f (NULL: nothing). Before writer_stop. */
void features_close(features_t *f);

const features_stats_t *features_stats(const features_t *f);

/* True once a heartbeat found the version in force above what this build supports: the process has
 * been asked to stop (SIGTERM to itself) and should exit with status 1. Any thread. */
bool features_passed(const features_t *f);

#endif
