/* claims.h — an Idempotency-Key's claim on the user's shard, taken before a keyed write goes to the
 * item's shard (docs/postgresql.md, "Several primaries").
 *
 * The record atomic with the effect stays on the item's shard (writer.c's idempotency record); but
 * two items of one user may be on two shards, and then neither shard's record sees the other's use of
 * the key. The claim binds (user, key) to one request fingerprint on the user's shard, so one key sent
 * for two different requests is 409 idempotency-key-mismatch wherever their items live:
 *   - no claim, or an expired one (older than --idempotency-ttl, writer_options_t.idem_ttl_ms): it is
 *     written, CLAIM_TAKEN;
 *   - a claim of the same fingerprint: CLAIM_TAKEN, left as it is (a retry proceeds, and a claim a
 *     crash left behind is harmless: the retry has the same fingerprint);
 *   - a claim of another fingerprint: CLAIM_MISMATCH, nothing written: the caller answers 409
 *     (answer_idem_mismatch, the body of the item's shard's mismatch).
 * The claim is not atomic with the effect and need not be: it only binds the key. A claim whose write
 * did not commit — refused (claims_release_due), or not queued at all — is released, so that a
 * corrected retry with the same key is not 409 until the claim expires; a release deletes the claim
 * only while it still holds that fingerprint. Expired claims are swept by the writer with the
 * idempotency records, a bounded number per transaction.
 *
 * Storage: a table of its own in each store (store_claims_apply, store_claims_sweep: tally_claims on
 * PostgreSQL, the claims and claims_exp databases of the embedded store), not auxiliary records. A
 * claim is written per keyed write, so it must cost what an idempotency record costs: looked up by
 * its key, swept by an expiry index from the oldest, and read for a whole batch in one round trip.
 * Auxiliary records have none of that: store_aux_read_locked takes a lock and a round trip per
 * record, and their keys are in name order, so a sweep would walk every claim (or keep a second
 * record each). Claims are not moved with a store (move.c) nor exported: they live a TTL at most, and
 * losing one only loses the cross-shard check of a key in flight during the move.
 *
 * Batching: a claim is a command (WRITE_CLAIM) of the user's shard's writer, so the claims that reach
 * a node's writer together share its transaction and its one durable commit (group commit); the
 * writer applies a batch's claims in one store call, before its other commands. Batches of reaction
 * writes alone pay nothing for it: one test of each command's type where writer_prepare already looks.
 * When the user's shard is the item's, there is no WRITE_CLAIM: the write itself carries its claim
 * (write_react_t.claim), taken in its own transaction with the batch's other claims (the store reads
 * their locks with the batch's rows, store_write_prepare), and a claim of another fingerprint answers
 * the write 409 with nothing applied. One durable commit then, not two in a row.
 *
 * Threads: claims_take and claims_release from any thread (an HTTP thread: they never block); done on
 * the writer thread. */
#ifndef TALLY_ENGINE_CLAIMS_H
#define TALLY_ENGINE_CLAIMS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/fingerprint.h"
#include "core/span.h"
#include "engine/writer.h"

enum {
    CLAIM_TAKEN = 0,    /* the key is bound to this fingerprint, durably: send the write */
    CLAIM_MISMATCH = 1, /* bound to another fingerprint: answer 409 idempotency-key-mismatch */
    CLAIM_FAILED = 2,   /* the user's shard could not commit (or be reached): answer 503 unavailable */
};

/* Called once with the outcome, on the writer thread, when the claim's transaction is durable (or
 * failed). It may submit to any writer (writer_submit does not block); it must not wait. */
typedef void (*claims_done_fn)(void *arg, int outcome);

/* Claims key for user with fingerprint fp on the user's shard's writer w. Returns 0 (done will be
 * called), or -1 when the claim was not queued (the writer's queue is full or it is stopping, or user
 * or key is empty or too long): done is not called, and the caller answers 503. */
int claims_take(writer_t *w, span_t user, span_t key, const uint8_t fp[FINGERPRINT_LEN], claims_done_fn done,
                void *arg);

/* Releases the claim of key for user if it still holds fp (fire and forget). Returns 0 when queued,
 * -1 when not (the claim then expires with its TTL). */
int claims_release(writer_t *w, span_t user, span_t key, const uint8_t fp[FINGERPRINT_LEN]);

/* Whether the claim of a keyed write is to be released once the item's shard has answered cmd (its
 * final answer): the write was refused (a status of 300 or more that is not a replay of a stored
 * answer, nor a 412, which the item's shard stores under the key as it stores a 2xx: the key stays
 * bound, as on one shard) or failed before its commit — not a 503 whose commit outcome is unknown
 * (cmd->maybe_applied: the write may have been applied, and a retry must find the key bound). A
 * write writer_submit did not take is released too (the caller knows: nothing was queued). */
bool claims_release_due(const write_cmd_t *cmd);

#endif
