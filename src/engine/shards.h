/* shards.h — the router's owner: the node's stores, one per shard, and the cluster's identity.
 *
 * A node is given its stores as an ordered list of locations (directories or postgresql:// URIs),
 * the same order on every node. Each database keeps its identity — the cluster id, "shard k of N"
 * and the virtual-shard map (core/shardmap.h) — as the auxiliary record SHARDS_IDENTITY_KEY. The
 * first start writes it into every database; every later start reads it back and checks that
 * position k holds shard k of this cluster, with the same count and the same map. Identities are
 * compared, never locations (URIs differ between nodes). The embedded store and a single database
 * are shard 0 of 1, by this same path. */
#ifndef TALLY_ENGINE_SHARDS_H
#define TALLY_ENGINE_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/kinds.h"
#include "core/shardmap.h"
#include "core/span.h"
#include "store/store.h"

/* The auxiliary record holding a database's identity (shard_identity_format's text). The prefix
 * "cluster/" is reserved for records about the cluster. */
#define SHARDS_AUX_PREFIX "cluster/"
#define SHARDS_IDENTITY_KEY SHARDS_AUX_PREFIX "identity"

typedef struct shards shards_t;

/* Opens the n stores (1..SHARD_MAX) at locations[0..n) with store_open (kinds and opt for each),
 * then settles the identity:
 *   - no database holds one (a first start): a new cluster id (random) and the even map of n
 *     shards are written into every database, each in one write transaction;
 *   - otherwise each database's identity is checked against its position; a database without one
 *     gets it written when no database of the list holds tally data yet (a first start that was
 *     interrupted) or, with n = 1, when it holds data from before identities existed (an upgrade);
 *     with n > 1 a database holding data but no identity is refused (moving data between shards is
 *     not built).
 * A first start needs every database. At a later start shard 0 (the cluster-wide records) must be
 * reached, and a database past it that cannot be is opened anyway (store_options_t.open_unreachable):
 * it serves nothing until it is reached and holds the identity of its position, and never if it holds
 * another. Returns 0 with *out set, or -1 with err naming the position and the difference (nothing is
 * left open). Two nodes starting at once on the same fresh databases agree: each identity is written
 * under the store's lock on that record, shard 0 first, and a node that finds one written meanwhile
 * adopts it. Main thread, before any writer thread starts. */
int shards_open(const char *const *locations, size_t n, const kinds_t *kinds, const store_options_t *opt,
                shards_t **out, char *err, size_t errlen);

/* The number of shards. Any thread. */
size_t shards_count(const shards_t *s);

/* Shard k's store (k below shards_count), owned by s. Any thread. */
store_t *shards_store(const shards_t *s, size_t k);

/* The shard of an item, and of a user (whose own records — a user's list, their idempotency
 * claims — live there): both by the map of the id's virtual shard. Any thread. */
uint32_t shards_of_item(const shards_t *s, span_t item);
uint32_t shards_of_user(const shards_t *s, span_t user);

/* The cluster's identity as shard k holds it (its cluster id, k, the map). Any thread. */
void shards_identity(const shards_t *s, size_t k, shard_identity_t *id);

/* Closes every store (NULL: nothing). Nothing else may use them (as store_close). */
void shards_close(shards_t *s);

/* The identity kept in one store, for tools that open a store by itself: STORE_OK with *found
 * saying whether there is one (and *id filled), or an error code with err filled (a read failed, or
 * the record is not an identity). Any thread. */
int shards_read_identity(store_t *store, shard_identity_t *id, bool *found, char *err, size_t errlen);

#endif
