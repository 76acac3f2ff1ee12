/* policies.h — item policies as the store keeps them and every node caches them. The store keeps one
 * auxiliary record per policy ("policy/p/<target>", the policy's JSON) and a counter record
 * ("policy/c": the version and how many policies there are), shared by every node of a shared store; the version rises
 * with every change, in the change's own transaction. Each node holds the policies in memory (one immutable table
 * behind a read-write lock, swapped whole) and loads them again when the version moves: at once on the node that made
 * the change (before its answer goes out), and on a shared store within a second on the others (a thread reads the
 * version every POLICIES_POLL_MS). So a restart keeps them, and the writer, which decides every write, checks each
 * against the table in force when it decides.
 *
 * A change is one WRITE_AUX command decided in the writer's transaction against the store's current
 * records (store_aux_read_locked: one such change at a time over every node), so the limit of
 * POLICY_MAX and a delete's 404 hold whoever else writes. */
#ifndef TALLY_ENGINE_POLICIES_H
#define TALLY_ENGINE_POLICIES_H

#include <jansson.h>
#include <stdatomic.h>

#include "core/policy.h"
#include "engine/writer.h"
#include "store/store.h"

#define POLICIES_POLL_MS 500
#define POLICIES_COUNTER_KEY "policy/c" /* "<version> <count>": every change rises the version */

typedef struct policies policies_t;

typedef struct {
    atomic_uint_fast64_t changes;                  /* policies put or deleted through this node */
    atomic_uint_fast64_t refused[POLICY_VERDICTS]; /* writes refused, by verdict */
    atomic_uint_fast64_t loads, load_failures;     /* tables loaded from the store */
    atomic_uint_fast64_t count;                    /* policies in force */
    atomic_uint_fast64_t epoch;                    /* rises with every table installed here */
} policies_stats_t;

/* Loads the policies from store and, on a shared store, starts the thread that follows the version.
 * Returns 0, or -1 with err filled. */
int policies_open(store_t *store, const kinds_t *kinds, policies_t **out, char *err, size_t errlen);
void policies_close(policies_t *p);

/* The policy of item in force (a copy into *out); false when none applies. Any thread. NULL p: none. */
bool policies_lookup(policies_t *p, span_t item, policy_t *out);

/* Reads the version from the store and loads the policies when it moved (or when force). Any thread
 * but an HTTP one (it reads the store). Returns STORE_OK or an error (the table in force stays). */
int policies_refresh(policies_t *p, bool force);

/* Every policy in force as {"policies":[{"target":…,…}, …]}, in target order (a new reference,
 * NULL when out of memory). */
json_t *policies_list_json(policies_t *p);

/* One policy in force as {"target":…,…}, or NULL when target has none. */
json_t *policies_one_json(policies_t *p, span_t target);

const policies_stats_t *policies_stats(const policies_t *p);
void policies_count_refusal(policies_t *p, policy_verdict_t v);

/* A change: PUT (put true, with policy) or DELETE of target, as a WRITE_AUX command. The answer the
 * decision gives: 200 with the stored policy, 204 for a delete, 404 not-found, 400
 * too-many-policies. Once the command is final with a 2xx, call policies_changed (writer thread,
 * before the answer leaves). */
typedef struct {
    write_cmd_t cmd; /* first: a write_cmd_t * is a policy_write_t * */
    write_aux_t aux;
    policies_t *policies;
    bool put;
    char target[POLICY_TARGET_MAX + 1];
    size_t target_len;
    policy_t policy;
    char key[POLICY_TARGET_MAX + 16];
    char key_end[POLICY_TARGET_MAX + 16];
    char version[48];     /* the counter record written: "<version> <count>" */
    uint64_t new_version; /* the version the change wrote */
    char *value;          /* the stored JSON, owned */
} policy_write_t;

void policy_write_init(policy_write_t *w, policies_t *p, span_t target, const policy_t *policy, bool put);
void policy_write_free(policy_write_t *w);

/* After w committed (a 2xx): puts the new table in force before anything else is decided. */
void policies_changed(policies_t *p, const policy_write_t *w);

#endif
