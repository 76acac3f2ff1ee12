/* webhook_store.h — webhooks as the store keeps them: auxiliary records, shared by every node of a
 * shared store. Three records per webhook, under keys "webhook/<id>/…":
 *   d  the definition: url, secret, the previous secret and until when it still signs, creation time
 *      (written by the admin routes only)
 *   r  the last resume asked for: an epoch and the cursor to go on after (admin routes only)
 *   s  the delivery state: the delivered cursor, the pending batch fixed before its first attempt
 *      (its last cursor and its delivery id), failing since, last error, expired, the resume epoch
 *      applied (the delivering thread only, and the creation)
 * Each record has one kind of writer, so no record is written from two places. Values are JSON.
 * Writes go through the writer thread (WRITE_AUX); reads come from a snapshot. */
#ifndef TALLY_ENGINE_WEBHOOK_STORE_H
#define TALLY_ENGINE_WEBHOOK_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/writer.h"
#include "store/store.h"

#define WHSTORE_ID_HEX 24                     /* random hex digits of an id */
#define WHSTORE_ID_MAX (3 + WHSTORE_ID_HEX)   /* "wh_" + hex */
#define WHSTORE_URL_MAX 2048                  /* API.md: a url is at most 2048 bytes */
#define WHSTORE_SECRET_MIN 32                 /* API.md: a given secret is at least 32 bytes */
#define WHSTORE_SECRET_MAX 512                /* bounded: the request body is at most 4 KiB anyway */
#define WHSTORE_SECRET_GENERATED_BYTES 32     /* random bytes of a generated secret (hex: twice) */
#define WHSTORE_DELIVERY_ID_HEX 32            /* a delivery id: 128 random bits as hex */
#define WHSTORE_ERROR_MAX 16                  /* "refused-address" and the other categories */
#define WHSTORE_KEY_MAX (16 + WHSTORE_ID_MAX) /* "webhook/<id>/s" */
#define WHSTORE_MAX 64                        /* webhooks at most */

typedef struct {
    char id[WHSTORE_ID_MAX + 1];
    char url[WHSTORE_URL_MAX + 1];
    char secret[WHSTORE_SECRET_MAX + 1];
    size_t secret_len;
    char old_secret[WHSTORE_SECRET_MAX + 1]; /* signs too until old_until_ms (wall); empty: none */
    size_t old_secret_len;
    uint64_t old_until_ms;
    uint64_t created_ms;
} whstore_def_t;

typedef struct {
    uint64_t delivered;  /* every entry up to this cursor was answered 2xx */
    uint64_t pending_to; /* > delivered: the batch (delivered, pending_to] is fixed, with delivery_id */
    char delivery_id[WHSTORE_DELIVERY_ID_HEX + 1];
    uint64_t failing_since_ms;              /* wall; 0: not failing */
    char last_error[WHSTORE_ERROR_MAX + 1]; /* a category, "" when none */
    bool expired;                           /* fell behind the log's retention: delivery stopped */
    uint64_t epoch;                         /* the resume applied last */
} whstore_state_t;

typedef struct {
    uint64_t epoch; /* rises with every resume */
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

/* A WRITE_AUX command and what it points to, owned by whoever submits it. */
typedef struct {
    write_cmd_t cmd;
    write_aux_t aux;
    char keys[3][WHSTORE_KEY_MAX];
    char *values[3];
    char delete_from[WHSTORE_KEY_MAX], delete_to[WHSTORE_KEY_MAX];
} whstore_write_t;

/* Fills w with puts of the given records (NULL: not written) and, when erase, the deletion of
 * every record of id first. Returns 0, or -1 (out of memory). Free with whstore_write_free. */
int whstore_write_init(whstore_write_t *w, const char *id, const whstore_def_t *def, const whstore_resume_t *resume,
                       const whstore_state_t *state, bool erase);
void whstore_write_free(whstore_write_t *w);

/* n random bytes as 2n hex digits (NUL-terminated) from OpenSSL's generator. Returns 0, or -1. */
int whstore_random_hex(char *out, size_t nbytes);

/* The newest cursor the snapshot knows and the oldest still retained (oldest = newest + 1 when the
 * log is empty), as the change feed judges cursors. */
int whstore_log_window(store_read_t *r, uint64_t *oldest, uint64_t *newest);

#endif
