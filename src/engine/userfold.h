/* userfold.h — a user's list across shards: every shard's log folded into the user's shard.
 *
 * A user's list (GET /v1/users/{user}/reactions) lives on the user's shard; the transitions that make
 * it are in the logs of the items' shards. It is a fold, as the counts are: shard j's log is folded
 * into shard k's lists for the users of shard k, with one checkpoint per source shard j kept on k as
 * the auxiliary record USERFOLD_KEY_PREFIX "<j>" beside the lists, committed with the lists it
 * produced (the seed's "batch id next to the count").
 *
 * One code path. The fold of shard k's own log into k is the one that already happens: the counts'
 * fold writes every pair of k's items into both of k's indexes (store.h § the lists), with the counts'
 * checkpoint beside them. With one shard that is the whole of it: this module is not started, nothing
 * is added to a write or a fold. With N shards that same fold keeps each item's list whole on the
 * item's shard (the user-index entries it writes there for users of other shards are never read), and
 * this module adds the N-1 other sources of k: it runs inside shard k's fold transaction, where k's
 * fold leader runs it (the node elected for the counts, which also holds the checkpoint's row lock),
 * so two nodes never fold the same entries, and a crash loses a fold's lists with its checkpoints,
 * never one without the other. A source that cannot be read is skipped until it can: it holds back
 * only its own items' entries.
 *
 * Positions. A user's list is ordered by positions of the user's shard's log: a change of k's own log
 * sits at its own position; a change from another shard's log takes, when it reaches k, a position of
 * k's log (store_list_apply with position 0), later than every entry committed on k before it. So a
 * list is in the order its changes reached the user's shard, k's commit order, and a change moves a
 * pair to the front, as on one shard (the cursor "<seq>.<name>" is unchanged). `at` is the source's.
 *
 * What the lists skip, they skip here too: a void or a restore (from == to) leaves a user's own list
 * as it is; an erased user's rows go to none through their items' logs, and leave the list with them.
 *
 * Pruning. Shard j's log is pruned only behind every fold that reads it: the counts' checkpoint and
 * the checkpoints of j on every other shard (userfold_prune_floor; read by the node that leads j's
 * fold, at most every second; while a shard cannot be read the floor stays where it was, so the log
 * waits). A fold that moves such a checkpoint commits durably (store.h, aux_put), so no database prunes
 * on a checkpoint that a crash could take back. */
#ifndef TALLY_ENGINE_USERFOLD_H
#define TALLY_ENGINE_USERFOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/itemmap.h"
#include "core/span.h"
#include "engine/shards.h"
#include "store/store.h"

/* On the target shard k: USERFOLD_KEY_PREFIX "<j>" → the decimal position of j's log folded into k. */
#define USERFOLD_KEY_PREFIX SHARDS_AUX_PREFIX "userfold/"
#define USERFOLD_KEY_MAX (sizeof USERFOLD_KEY_PREFIX + 3)
#define USERFOLD_BATCH 4096 /* entries of one source read per fold at most */

typedef struct userfold userfold_t;

/* The fold over the node's shards: *out NULL (and nothing to do) with one shard. Returns 0, or -1. */
int userfold_new(shards_t *shards, userfold_t **out);
void userfold_free(userfold_t *f);

/* The hooks of shard k's writer (writer_options_t.fold_more, prune_floor, with fold_more_arg =
 * userfold_arg(f, k)). */
void *userfold_arg(userfold_t *f, size_t k);
/* Folds, in shard k's fold transaction tx, the other shards' logs past k's checkpoints of them:
 * their changes of users of shard k, into k's lists; *more when a source has more. The fold thread. */
int userfold_fold(void *arg, store_write_t *tx, bool *more);
/* How far shard k's log may be pruned for the other shards' folds of it: the least of their
 * checkpoints of k as last read (0 until read). Any thread; never waits. */
uint64_t userfold_prune_floor(void *arg);

/* The checkpoint of the fold of shard k's log into shard target as target's record holds it, read
 * from a snapshot of target (0: none yet). For the recount's check. */
int userfold_checkpoint_read(store_read_t *target, size_t k, uint64_t *seq);

/* The recount's check of the copies: for shard j's items in items (others are skipped), every pair
 * of a user of another shard k as k's list holds it, against j's rows (as of k's checkpoint of j:
 * a pair changed in j's log after it has its set before that change). k is read first, then j, so
 * that the rows are never older than the checkpoint. *mismatches counts what disagrees, as
 * store_read_lists_check does. A shard that cannot be read: its error. Any thread. */
int userfold_check(shards_t *shards, size_t j, const itemmap_t *items, uint64_t *mismatches);

/* --- pure parts --- */

/* The record's key of source j into buf; its length. */
size_t userfold_key(char buf[USERFOLD_KEY_MAX], size_t source);
/* A record: 0 with *source and *seq, or -1 when key and value are not one (another record). */
int userfold_record_parse(span_t key, span_t value, size_t *source, uint64_t *seq);

#endif
