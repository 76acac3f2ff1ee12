/* webhook_store.h — webhooks as the store keeps them: auxiliary records of shard 0's store (where
 * the cluster-wide records live), shared by every node of a shared store. Three records per webhook, under keys
 * "webhook/<id>/…": d  the definition: url, secret, the previous secrets and until when each still signs, creation time
 *      (written by the admin routes only)
 *   r  the last resume asked for: an epoch and the cursor to go on after, with several shards the
 *      shard it names (admin routes only)
 *   s  the delivery state: the delivered position of each shard's log, the pending batch fixed
 *      before its first attempt (its last position in each shard and its delivery id), failing
 *      since, last error, expired, the resume epoch applied (the delivering thread only, and the
 *      creation). Shard 0's positions are "delivered" and "pending_to", as a record of one shard has
 *      always held them; the other shards' follow as "shards": [[delivered, pending_to], …].
 * Values are JSON. Writes go through the writer thread (WRITE_AUX); reads come from a snapshot. A
 * write that depends on the records (the limit of 64, a webhook that must still exist, a rotation
 * from the secret in force, a resume's epoch) is decided inside the writer's transaction against
 * the store's current records (store_aux_read_locked: on a shared store, one such transaction at a
 * time over every node), never from a snapshot another write may have passed. */
#ifndef TALLY_ENGINE_WEBHOOK_STORE_H
#define TALLY_ENGINE_WEBHOOK_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/shardmap.h"
#include "engine/writer.h"
#include "store/store.h"

#define WHSTORE_ID_HEX 24                     /* random hex digits of an id */
#define WHSTORE_ID_MAX (3 + WHSTORE_ID_HEX)   /* "wh_" + hex */
#define WHSTORE_URL_MAX 2048                  /* docs/api.md: a url is at most 2048 bytes */
#define WHSTORE_SECRET_MIN 32                 /* docs/api.md: a given secret is at least 32 bytes */
#define WHSTORE_SECRET_MAX 512                /* bounded: the request body is at most 4 KiB anyway */
#define WHSTORE_SECRET_GENERATED_BYTES 32     /* random bytes of a generated secret (hex: twice) */
#define WHSTORE_DELIVERY_ID_HEX 32            /* a delivery id: 128 random bits as hex */
#define WHSTORE_ERROR_MAX 16                  /* "refused-address" and the other categories */
#define WHSTORE_KEY_MAX (16 + WHSTORE_ID_MAX) /* "webhook/<id>/s" */
#define WHSTORE_MAX 64                        /* webhooks at most */
#define WHSTORE_SECRETS_MAX 4                 /* secrets alive at once: the one in force and 3 rotated out */

typedef struct {
    char secret[WHSTORE_SECRET_MAX + 1];
    size_t len;
    uint64_t until_ms;
} whstore_prev_t;

typedef struct {
    char id[WHSTORE_ID_MAX + 1];
    char url[WHSTORE_URL_MAX + 1];
    char secret[WHSTORE_SECRET_MAX + 1];
    size_t secret_len;
    /* The secrets rotated out, newest first, each signing too until the time its rotation
     * promised (until_ms, wall): at most WHSTORE_SECRETS_MAX alive with the one in force. */
    whstore_prev_t prev[WHSTORE_SECRETS_MAX - 1];
    size_t nprev;
    uint64_t created_ms;
} whstore_def_t;

/* Delivery positions per shard: shard k's log is delivered up to delivered[k]; a batch fixed before
 * its first attempt covers (delivered[k], pending_to[k]] of each shard whose pending_to[k] is above
 * delivered[k] (a shard it takes nothing from keeps pending_to[k] at most delivered[k]). */
typedef struct {
    uint32_t count; /* shards: the positions given (the record of one shard holds only [0]) */
    uint64_t delivered[SHARD_MAX];
    uint64_t pending_to[SHARD_MAX]; /* some above delivered: a batch is fixed, with delivery_id */
    char delivery_id[WHSTORE_DELIVERY_ID_HEX + 1];
    uint64_t failing_since_ms;              /* wall; 0: not failing */
    char last_error[WHSTORE_ERROR_MAX + 1]; /* a category, "" when none */
    bool expired;                           /* fell behind some shard's log retention: delivery stopped */
    uint64_t epoch;                         /* the resume applied last */
} whstore_state_t;

/* Whether a batch is fixed (pending) in s. */
bool whstore_pending(const whstore_state_t *s);

/* A resume: from `after` on shard `shard` (the other shards where they stand), or, without after,
 * every shard where it stands (failing and expired forgotten). */
typedef struct {
    uint64_t epoch; /* rises with every resume */
    bool has_after;
    uint32_t shard;
    uint64_t after;
} whstore_resume_t;

typedef struct {
    whstore_def_t def;
    whstore_state_t state;
    whstore_resume_t resume;
    bool has_def, has_state, has_resume;
} whstore_hook_t;

/* Every webhook's records from the snapshot, in id order, into hooks[0..*n) (at most max; records
 * of a webhook without a definition, left behind by a delete, count too, has_def false). */
int whstore_read_all(store_read_t *r, whstore_hook_t *hooks, size_t max, size_t *n);

/* One webhook's records; STORE_NOTFOUND when it has no definition. */
int whstore_read_one(store_read_t *r, span_t id, whstore_hook_t *hook);

typedef enum {
    WHSTORE_PLAIN,  /* the records given, unconditionally (whstore_write_init) */
    WHSTORE_CREATE, /* a new webhook, when fewer than WHSTORE_MAX exist: else 400 */
    WHSTORE_DELETE, /* every record of id, when it exists: else 404 */
    WHSTORE_RESUME, /* a resume from the state in force (or after), when id exists: else 404 (400, 410) */
    WHSTORE_ROTATE, /* the secret given in force, the one in force a previous one: else 404 (409) */
    WHSTORE_STATE,  /* the delivery state, when id still exists: else 404 and nothing written */
} whstore_op_t;

/* A WRITE_AUX command and what it points to, owned by whoever submits it. Its answer, once final
 * (cmd.answer, on the writer thread), is the one for the admin route: 201/200/204 with its body,
 * a 4xx when the precondition did not hold at the commit, 503 when the commit failed. */
typedef struct {
    write_cmd_t cmd; /* first */
    write_aux_t aux;
    whstore_op_t op;
    char id[WHSTORE_ID_MAX + 1];
    whstore_def_t def;          /* CREATE: the definition; ROTATE: the new secret */
    uint64_t now_ms, until_ms;  /* ROTATE: the time of the request, and until when the old secret signs */
    whstore_state_t state;      /* CREATE, STATE */
    uint32_t count;             /* CREATE, RESUME: the cluster's shards */
    bool has_after;             /* RESUME: after given (on shard), else where the state stands */
    uint32_t shard;             /* RESUME: the shard after names */
    uint64_t after;             /* RESUME */
    uint64_t oldest[SHARD_MAX]; /* RESUME: each shard's log window the cursors are judged by */
    uint64_t newest[SHARD_MAX];
    whstore_hook_t current; /* the decision's buffer: the records as the transaction sees them */
    char keys[3][WHSTORE_KEY_MAX];
    char *values[3];
    char delete_from[WHSTORE_KEY_MAX], delete_to[WHSTORE_KEY_MAX];
} whstore_write_t;

/* Fills w with puts of the given records (NULL: not written) and, when erase, the deletion of
 * every record of id first, unconditionally. Returns 0, or -1 (out of memory). Free with
 * whstore_write_free. */
int whstore_write_init(whstore_write_t *w, const char *id, const whstore_def_t *def, const whstore_resume_t *resume,
                       const whstore_state_t *state, bool erase);
/* Prepares a decided write (op not WHSTORE_PLAIN): the fields op reads must be set in w after.
 * The decision and the records' values are made in the writer's transaction. */
void whstore_write_decided(whstore_write_t *w, whstore_op_t op, const char *id);
void whstore_write_free(whstore_write_t *w);

/* n random bytes as 2n hex digits (NUL-terminated) from OpenSSL's generator. Returns 0, or -1. */
int whstore_random_hex(char *out, size_t nbytes);

#endif
