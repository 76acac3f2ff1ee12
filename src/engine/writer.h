/* writer.h — the single writer thread: a bounded queue of commands, one transaction and one durable
 * commit per batch (group commit), the pipeline's fold and the idempotency sweep in the same commit.
 * Because one thread decides every transition, two concurrent clicks can never both read `none`. */
#ifndef TALLY_ENGINE_WRITER_H
#define TALLY_ENGINE_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/answer.h"
#include "core/fingerprint.h"
#include "core/histogram.h"
#include "core/ids.h"
#include "core/kinds.h"
#include "core/parse.h"
#include "core/reaction.h"
#include "store/store.h"

typedef struct writer writer_t;
typedef struct policies policies_t; /* engine/policies.h */
typedef struct write_cmd write_cmd_t;
typedef struct writer_group writer_group_t;

typedef enum {
    WRITE_REACT,         /* a reaction write from a request */
    WRITE_COUNTS_ADJUST, /* counts[item] += deltas: a recount's correction */
    WRITE_CLEAR_ITEM,    /* every reaction on item becomes none (a chunk at a time) */
    WRITE_CLEAR_USER,    /* every reaction of user becomes none, and their idempotency records go */
    WRITE_AUX,           /* auxiliary records: puts and a range deletion (trending's summaries) */
    WRITE_VOID,          /* a user's reactions stop counting, or count again (restore) */
    WRITE_CLAIM,         /* an Idempotency-Key's claim taken or released (engine/claims.h) */
} write_type_t;

#define WRITE_AUX_MAX 1024

/* What a WRITE_AUX command writes; owned by the submitter. */
typedef struct write_aux write_aux_t;
struct write_aux {
    size_t n;
    span_t keys[WRITE_AUX_MAX], values[WRITE_AUX_MAX];
    span_t delete_from, delete_to; /* from ≤ key < to; none when delete_to is empty */
    /* Optional: the decision, run first inside the command's transaction against the store's current
     * records (store_aux_read_locked), so that it holds at the commit whoever else writes. It fills
     * the writes above from what it reads (it may run again when a batch is retried: it starts over),
     * and sets cmd->answer: a status of 300 or more refuses (nothing is written, the answer stands),
     * a 2xx is the answer once durable. Returns a STORE_ code; anything else voids the batch.
     * Writer thread. */
    int (*decide)(store_write_t *tx, write_cmd_t *cmd, write_aux_t *aux);
};

#define WRITER_CLEAR_CHUNK 1000 /* rows visited per WRITE_CLEAR_* command */

/* WRITE_REACT: a reaction write as the HTTP layer (or an import) hands it over. */
typedef struct {
    react_op_t op;
    kindset_t arg; /* the kinds op applies (REACT_SET: the whole new set) */
    char item[ID_MAX_LEN];
    size_t item_len;
    char user[ID_MAX_LEN];
    size_t user_len;
    bool has_if_match;
    if_match_t if_match;
    bool no_policy; /* applied as it is, whatever the item's policy (an import) */
    bool no_counts; /* its answer carries no counts (an import: nobody reads it) */
    bool admin;     /* the writer is an admin: counts hidden by the item's policy are shown */
    size_t key_len; /* Idempotency-Key; 0 = none */
    char key[IDEM_KEY_MAX + 1];
    uint8_t fingerprint[FINGERPRINT_LEN];
    /* With several shards, a keyed write whose user's shard is its item's: the key's claim
     * (engine/claims.h) is taken in this write's own transaction, with the batch's other claims, and
     * a claim of another fingerprint answers 409 idempotency-key-mismatch with nothing applied. */
    bool claim;
    bool claim_held; /* result: the claim holds this write's fingerprint */
    size_t changed;  /* result: 1 when the row changed, else 0 */
    /* the writer's: the answer's cursor is the position of the transaction's cursor_ordinal-th
     * appended log entry, known once committed (a store that takes positions at commit); 0: none due */
    uint32_t cursor_ordinal;
    /* the writer's: the answer's counts come with the commit, from the transaction's counts_ask-th
     * ask (a store that takes positions at commit); 0: none due */
    uint32_t counts_ask;
} write_react_t;

/* WRITE_COUNTS_ADJUST: counts[item] += deltas, a recount's correction. */
typedef struct {
    char item[ID_MAX_LEN];
    size_t item_len;
    int64_t deltas[KINDS_MAX + 1]; /* [0]: the reactors */
} write_counts_adjust_t;

/* WRITE_CLEAR_ITEM / WRITE_CLEAR_USER: one chunk of the rows of an item (or of a user) set to none. */
typedef struct {
    char name[ID_MAX_LEN]; /* the item (WRITE_CLEAR_ITEM) or the user (WRITE_CLEAR_USER) */
    size_t name_len;
    char resume[ID_MAX_LEN]; /* continue after this name; updated by the writer */
    size_t resume_len;
    size_t changed; /* result: rows changed by this command */
    bool more;      /* result: rows remain; submit again */
} write_clear_t;

/* WRITE_VOID: the voided flag of a user set (or cleared, restore) and, in the same transaction, one
 * log entry per row of the user whose reaction is not none, from == to at the row's version, counted
 * before and not after (a restore: the other way). Nothing when the flag already says so. With
 * several shards it goes to every shard's writer (the flag is on every shard; each shard's rows are
 * its items'), shard 0 first. */
typedef struct {
    char user[ID_MAX_LEN];
    size_t user_len;
    bool restore;
    /* The feature version was found in force on shard 0, where it is kept (it never falls): not looked
     * for in this store, which does not keep it (a shard past 0). */
    bool feature_checked;
    size_t rows;      /* result: rows that stopped (or started) counting */
    uint64_t version; /* result: the voided users' version after the change; 0: nothing changed */
} write_void_t;

/* WRITE_CLAIM: (user, key) bound to fingerprint, or that binding released (engine/claims.h). The
 * batch's claims (these, and those of its WRITE_REACT commands with claim set) are applied together
 * (store_claims_apply), before its other commands. */
typedef struct {
    bool release;
    char user[ID_MAX_LEN];
    size_t user_len;
    char key[IDEM_KEY_MAX];
    size_t key_len;
    uint8_t fingerprint[FINGERPRINT_LEN];
    bool held; /* result: taken (the claim holds fingerprint); a release: deleted */
} write_claim_t;

/* One command: a common header, then the payload that type names. Owned by the submitter; the
 * writer fills answer (and the payload's results) and calls done (on the writer thread) once the
 * answer is final: after the commit that holds its effect is durable, or after that commit failed. */
struct write_cmd {
    write_type_t type;
    answer_t answer;
    void (*done)(write_cmd_t *cmd);
    /* done's own context, never read by the writer: what writer_submit's caller needs to finish the
     * command (the HTTP layer's pending request). Commands of a group leave it alone. */
    void *done_arg;
    writer_group_t *group; /* set by writer_group_submit: the group waiting for this command; else NULL */
    uint64_t submitted_ns; /* monotonic, set by writer_submit */
    write_cmd_t *next;     /* queue link, the writer's */
    /* Set with a 503 whose commit was sent but whose outcome is unknown (the store could not be reached
     * during it): the command may have been applied. */
    bool maybe_applied;
    union {
        write_react_t react;                 /* WRITE_REACT */
        write_counts_adjust_t counts_adjust; /* WRITE_COUNTS_ADJUST */
        write_clear_t clear;                 /* WRITE_CLEAR_ITEM, WRITE_CLEAR_USER */
        write_aux_t *aux;                    /* WRITE_AUX */
        write_void_t void_user;              /* WRITE_VOID */
        write_claim_t claim;                 /* WRITE_CLAIM */
    };
};

typedef struct {
    size_t queue_max;             /* commands waiting at most; past it writer_submit refuses */
    size_t batch_max;             /* commands per transaction at most */
    size_t fold_max;              /* log entries per fold at most */
    uint64_t fold_window_ms;      /* minimum interval between folds; 0 = fold with every batch */
    uint64_t idem_ttl_ms;         /* how long an idempotency record (and a claim) is kept */
    size_t sweep_max;             /* expired idempotency records (and claims) deleted per transaction at most */
    uint64_t log_retention_ms;    /* folded log entries older than this are pruned */
    uint64_t log_max_bytes;       /* past this size the oldest folded entries are pruned, whatever their age */
    void (*on_commit)(void *arg); /* after each durable commit that appended transitions (writer thread) */
    void *on_commit_arg;
    /* Around the release of a batch's answers (writer thread; optional): whoever delivers the answers
     * may hold them back and hand them over together at the end (one wake-up per receiving thread). */
    void (*release_begin)(void *arg);
    void (*release_end)(void *arg);
    void *release_arg;
    /* The item policies in force (optional): each reaction write is checked against its item's, after
     * the idempotency record and If-Match, where the row's old value is known. */
    policies_t *policies;
    /* The voided users known on this node (optional): a committed void or restore is put in force
     * there before its command's done is called. */
    struct voids *voids;
    /* More folding in the fold's transaction, after the log's own (optional; only where this process
     * may fold): a user's list from the other shards' logs (engine/userfold.h). Returns a STORE_ code
     * (an error voids the fold); *more says that it left work behind. The thread that folds. */
    int (*fold_more)(void *arg, store_write_t *tx, bool *more);
    /* The highest log position the other folds of this log allow pruning to (optional; none: the
     * checkpoint alone bounds it). Writer thread; must not wait. */
    uint64_t (*prune_floor)(void *arg);
    void *fold_more_arg; /* of both */
} writer_options_t;

#define WRITER_QUEUE_MAX_DEFAULT 8192
#define WRITER_BATCH_MAX_DEFAULT 1024
#define WRITER_FOLD_MAX_DEFAULT 65536
#define WRITER_SWEEP_MAX_DEFAULT 512
#define WRITER_PRUNE_MAX 4096

/* Counters for the metrics; read with relaxed atomics from any thread. */
typedef struct {
    atomic_uint_fast64_t batches, commands, failed_commands, replays, transitions, folds, folded, fold_items;
    atomic_uint_fast64_t swept, pruned, queue_depth, commit_failures;
    atomic_uint_fast64_t conflict_retries;   /* batches run again after a conflict with another node */
    atomic_bool fold_leader;                 /* this process folded (or may fold) the log last time it looked */
    histogram_t write_seconds;               /* from submit to the answer being final (queue wait + commit) */
    histogram_t batch_commands;              /* commands per commit */
    histogram_t fold_entries;                /* log entries per fold */
    atomic_uint_fast64_t oldest_unfolded_ms; /* 0 when the counts are caught up */
    atomic_bool running;
} writer_stats_t;

/* Starts the writer thread over an open store. Returns 0, or -1. */
int writer_start(store_t *store, const kinds_t *kinds, const writer_options_t *opt, writer_t **out);

/* Queues cmd (any thread). Returns 0, or -1 when the queue is full or the writer is stopping (the
 * caller answers 503; cmd is untouched and still the caller's). */
int writer_submit(writer_t *w, write_cmd_t *cmd);

/* Commands submitted together by a thread that may block (never an HTTP thread) and waited for
 * together: recount's corrections, an import's records. done and group of each command are
 * taken over; on_done (optional) sees each final command on the writer thread. */
struct writer_group {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t outstanding; /* submitted, not final yet */
    size_t failed;      /* answered other than 200, or refused */
    bool owns_commands; /* free each command (malloc'd) once final */
    void (*on_done)(write_cmd_t *cmd, void *arg);
    void *arg;
};

void writer_group_init(writer_group_t *g, bool owns_commands, void (*on_done)(write_cmd_t *, void *), void *arg);
/* Submits cmd, waiting out a full queue for ~10 s at most. Returns 0, or -1 when the writer would
 * not take it (cmd stays the caller's; counted as failed). */
int writer_group_submit(writer_t *w, writer_group_t *g, write_cmd_t *cmd);
/* Waits until at most at_most commands of the group are outstanding. */
void writer_group_wait(writer_group_t *g, size_t at_most);
/* Waits for every command, then releases the group. */
void writer_group_destroy(writer_group_t *g);

/* One command, waited for: a group of one. Returns 0, or -1 when the writer would not take it. */
int writer_call(writer_t *w, write_cmd_t *cmd);

/* Answers every queued command, folds what is left, commits and joins the thread. */
void writer_stop(writer_t *w);

const writer_stats_t *writer_stats(const writer_t *w);

/* Pipeline lag: age of the oldest transition not yet in the counts, in ms (0 when caught up). */
uint64_t writer_lag_ms(const writer_t *w);

#endif
