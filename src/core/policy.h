/* policy.h — item policies: what one policy says, its JSON, its targets (an item, a prefix ending
 * in `*`, or `*` alone), and the table that resolves an item's policy, most specific first: the
 * item's own, else the longest prefix that matches it, else `*`, else none. Pure logic: the store
 * keeps the policies, engine/policies.c caches them. */
#ifndef TALLY_CORE_POLICY_H
#define TALLY_CORE_POLICY_H

#include <jansson.h>
#include <stdint.h>

#include "core/ids.h"
#include "core/kinds.h"
#include "core/reaction.h"
#include "core/textbuf.h"

#define POLICY_MAX 10000        /* policies at most */
#define POLICY_MAX_KINDS_MAX 16 /* max_kinds is 1..16 */
#define POLICY_TARGET_MAX (ID_MAX_LEN + 1)

typedef struct {
    kindset_t kinds;   /* the kinds a write may add (every configured kind when !kinds_given) */
    bool kinds_given;  /* false: every kind, including kinds configured later */
    bool closed;       /* every write refused */
    bool hidden;       /* counts: hidden */
    uint8_t max_kinds; /* how many kinds one user may hold (many mode); 0: unbounded */
} policy_t;

typedef enum {
    POLICY_TARGET_ITEM,   /* an item id */
    POLICY_TARGET_PREFIX, /* "comment-*": every item whose id starts with "comment-" */
    POLICY_TARGET_ALL,    /* "*" */
} policy_target_t;

/* Checks a target: an item id, 1–128 bytes of the id alphabet followed by `*`, or `*`. Returns 0
 * with *type set, or -1. */
int policy_target_parse(span_t target, policy_target_t *type);

/* Reads a policy body ({"kinds":[…],"closed":…,"counts":"public"|"hidden","max_kinds":N}, every
 * member optional, no other member). Returns 0, or -1 with a message in err. */
int policy_from_json(const kinds_t *kinds, const json_t *body, policy_t *out, char *err, size_t errlen);

/* The policy as JSON (a new reference; NULL when out of memory): kinds as the names they allow,
 * closed, counts, and max_kinds when bounded. With stored, kinds only when given (so a policy
 * without kinds keeps allowing kinds configured later): the form the store keeps. */
json_t *policy_json(const kinds_t *kinds, const policy_t *p, bool stored);

/* The same object as policy_json(…, false) gives, appended as text (item objects). */
void policy_append(textbuf_t *b, const kinds_t *kinds, const policy_t *p);

/* The kinds a write may add under p (NULL: every kind). */
static inline kindset_t policy_allowed(const kinds_t *kinds, const policy_t *p)
{
    return p && p->kinds_given ? p->kinds : KINDSET_ALL(kinds->count);
}

/* Why a write is refused under p, or POLICY_OK. A write from `from` to `to` (what it would leave);
 * closed refuses any write, a changing one or not. */
typedef enum {
    POLICY_OK,
    POLICY_CLOSED,      /* 403 item-closed */
    POLICY_NOT_ALLOWED, /* 403 reaction-not-allowed */
    POLICY_TOO_MANY,    /* 403 too-many-reactions */
} policy_verdict_t;
#define POLICY_VERDICTS 4
policy_verdict_t policy_check(const kinds_t *kinds, const policy_t *p, kindset_t from, kindset_t to);
/* The problem code of a refusal ("item-closed", …). */
const char *policy_verdict_code(policy_verdict_t v);

/* One stored policy. */
typedef struct {
    char target[POLICY_TARGET_MAX + 1];
    size_t target_len;
    policy_t policy;
} policy_entry_t;

/* The policies in force, built once and then only read (any number of threads). */
typedef struct {
    policy_entry_t *entries; /* sorted by target */
    size_t n;
    const policy_entry_t **items; /* item targets, sorted */
    size_t nitems;
    const policy_entry_t **prefixes; /* prefix targets, sorted by the prefix (without its `*`) */
    size_t nprefixes;
    const policy_entry_t *all; /* `*`, or NULL */
    uint64_t prefix_lens[3];   /* bit L: a prefix of L bytes exists (L ≤ ID_MAX_LEN) */
} policy_table_t;

/* Takes entries (malloc'd, n of them, targets valid and unique) into t. Returns 0, or -1 when out of
 * memory (entries freed either way). */
int policy_table_build(policy_table_t *t, policy_entry_t *entries, size_t n);
void policy_table_free(policy_table_t *t);

/* The policy of item under t, or NULL when none applies. */
const policy_t *policy_resolve(const policy_table_t *t, span_t item);

/* The entry stored for exactly target, or NULL. */
const policy_entry_t *policy_table_find(const policy_table_t *t, span_t target);

#endif
