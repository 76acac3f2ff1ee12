/* ratelimit.c — sharded open-addressing table of token buckets. */
#include "core/ratelimit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/hash.h"
#include "core/parse.h"

#define RATE_MAX 1000000

typedef struct {
    uint64_t key;     /* hash of the key; 0 = empty */
    uint64_t last_ms; /* when tokens was computed */
    double tokens;
} bucket_t;

typedef struct {
    pthread_mutex_t lock;
    bucket_t *slots;
} shard_t;

struct ratelimit {
    ratelimit_rule_t rule;
    size_t per_shard;
    shard_t shards[RATELIMIT_SHARDS];
};

int ratelimit_parse(const char *text, ratelimit_rule_t *rule)
{
    if (strcmp(text, "off") == 0) {
        *rule = (ratelimit_rule_t){0, 0};
        return 0;
    }
    const char *per = strstr(text, "/s");
    uint64_t rate, burst;
    if (!per || parse_uint((span_t){text, (size_t)(per - text)}, RATE_MAX, &rate) != 0 || rate == 0)
        return -1;
    if (per[2] == '\0')
        burst = rate * 2;
    else if (per[2] != ':' || parse_uint(span_of(per + 3), RATE_MAX, &burst) != 0 || burst == 0)
        return -1;
    *rule = (ratelimit_rule_t){(double)rate, (double)burst};
    return 0;
}

static uint64_t key_hash(span_t key)
{
    uint64_t h = hash_mix(hash_bytes(HASH_SEED, key.ptr, key.len));
    return h ? h : 1;
}

int ratelimit_new(ratelimit_rule_t rule, size_t capacity, ratelimit_t **out)
{
    *out = NULL;
    if (rule.rate_per_s <= 0)
        return 0; /* off */
    ratelimit_t *rl = calloc(1, sizeof *rl);
    if (!rl)
        return -1;
    rl->rule = rule;
    rl->per_shard = capacity / RATELIMIT_SHARDS + RATELIMIT_PROBE;
    for (int i = 0; i < RATELIMIT_SHARDS; i++) {
        pthread_mutex_init(&rl->shards[i].lock, NULL);
        rl->shards[i].slots = calloc(rl->per_shard, sizeof(bucket_t));
        if (!rl->shards[i].slots) {
            ratelimit_free(rl);
            return -1;
        }
    }
    *out = rl;
    return 0;
}

void ratelimit_free(ratelimit_t *rl)
{
    if (!rl)
        return;
    for (int i = 0; i < RATELIMIT_SHARDS; i++) {
        free(rl->shards[i].slots);
        pthread_mutex_destroy(&rl->shards[i].lock);
    }
    free(rl);
}

/* The bucket's tokens at now_ms. */
static double refilled(const ratelimit_t *rl, const bucket_t *b, uint64_t now_ms)
{
    double t = b->tokens + (double)(now_ms - b->last_ms) / 1000.0 * rl->rule.rate_per_s;
    return t > rl->rule.burst ? rl->rule.burst : t;
}

void ratelimit_set_rule(ratelimit_t *rl, ratelimit_rule_t rule)
{
    /* every shard's lock: a take sees the old rule or the new one, never half of each */
    for (int i = 0; i < RATELIMIT_SHARDS; i++)
        pthread_mutex_lock(&rl->shards[i].lock);
    rl->rule = rule;
    for (int i = 0; i < RATELIMIT_SHARDS; i++) {
        /* buckets filled under another burst start again from the new one */
        if (rule.rate_per_s > 0)
            for (size_t k = 0; k < rl->per_shard; k++)
                if (rl->shards[i].slots[k].tokens > rule.burst)
                    rl->shards[i].slots[k].tokens = rule.burst;
    }
    for (int i = RATELIMIT_SHARDS - 1; i >= 0; i--)
        pthread_mutex_unlock(&rl->shards[i].lock);
}

ratelimit_rule_t ratelimit_rule(ratelimit_t *rl)
{
    pthread_mutex_lock(&rl->shards[0].lock);
    ratelimit_rule_t rule = rl->rule;
    pthread_mutex_unlock(&rl->shards[0].lock);
    return rule;
}

unsigned ratelimit_take(ratelimit_t *rl, span_t key, uint64_t now_ms)
{
    if (!rl)
        return 0;
    uint64_t h = key_hash(key);
    shard_t *shard = &rl->shards[h % RATELIMIT_SHARDS];
    size_t start = (size_t)((h / RATELIMIT_SHARDS) % (rl->per_shard - RATELIMIT_PROBE + 1));
    pthread_mutex_lock(&shard->lock);
    if (rl->rule.rate_per_s <= 0) { /* turned off by a reload */
        pthread_mutex_unlock(&shard->lock);
        return 0;
    }
    bucket_t *found = NULL, *victim = NULL;
    double victim_tokens = -1;
    for (size_t i = start; i < start + RATELIMIT_PROBE; i++) {
        bucket_t *b = &shard->slots[i];
        if (b->key == h) {
            found = b;
            break;
        }
        /* Room for a new key: an empty slot, else the fullest bucket (full = idle = forgettable). */
        double t = b->key ? refilled(rl, b, now_ms) : rl->rule.burst + 1;
        if (t > victim_tokens) {
            victim_tokens = t;
            victim = b;
        }
    }
    if (!found) {
        found = victim;
        *found = (bucket_t){h, now_ms, rl->rule.burst};
    }
    double tokens = refilled(rl, found, now_ms);
    found->last_ms = now_ms;
    unsigned wait_s = 0;
    if (tokens >= 1) {
        found->tokens = tokens - 1;
    } else {
        found->tokens = tokens;
        wait_s = (unsigned)ceil((1 - tokens) / rl->rule.rate_per_s);
        if (wait_s < 1)
            wait_s = 1;
    }
    pthread_mutex_unlock(&shard->lock);
    return wait_s;
}
