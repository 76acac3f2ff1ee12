/* shardmap.h — where an id lives when tally's data is spread over several databases (shards), and
 * the texts that name a shard: the cluster identity kept in each database, the change feed's cursors.
 *
 * An id belongs to one of SHARD_VIRTUAL virtual shards (zlib's CRC-32 of its bytes, mod 4096); the
 * map gives each virtual shard to a database (a shard index) by explicit contiguous ranges, so that
 * a database can later be added by moving ranges without rehashing any id. One database is a map of
 * one shard. Pure logic: no I/O, any thread. */
#ifndef TALLY_CORE_SHARDMAP_H
#define TALLY_CORE_SHARDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "core/span.h"

#define SHARD_VIRTUAL 4096
#define SHARD_MAX 256                       /* shards in a cluster: the map's and the page token's bound */
#define SHARD_CLUSTER_HEX 32                /* a cluster id: 128 random bits as lowercase hex */
#define SHARD_POSITION_MAX (UINT64_MAX - 1) /* the largest log position a cursor names (as today's) */
/* The longest cursor texts, NUL included: "255.18446744073709551614"; the page token of SHARD_MAX
 * shards (a version byte, the count and SHARD_MAX positions, 10 bytes each at most, in base64url). */
#define SHARD_CURSOR_MAX 32
#define SHARD_TOKEN_MAX 3480
/* The longest identity text the parser reads (4096 single-shard ranges fit with room to spare). */
#define SHARD_IDENTITY_TEXT_MAX (256u * 1024)

/* The virtual shard of an id: crc32(id) mod SHARD_VIRTUAL. */
uint32_t shard_virtual_of(span_t id);

/* The map: virtual shard -> shard index, as a table (lookups are one load); count is the number of
 * shards (every index in the table is below it). Built by shard_map_even or shard_identity_parse. */
typedef struct {
    uint32_t count;
    uint16_t of[SHARD_VIRTUAL];
} shard_map_t;

/* The even map of count shards (1..SHARD_MAX): contiguous ranges whose sizes differ by one at most,
 * shard 0 first. Returns 0, or -1 for a count out of range. */
int shard_map_even(shard_map_t *map, uint32_t count);

static inline uint32_t shard_map_of_virtual(const shard_map_t *map, uint32_t v)
{
    return map->of[v % SHARD_VIRTUAL];
}

static inline uint32_t shard_map_of_id(const shard_map_t *map, span_t id)
{
    return map->of[shard_virtual_of(id)];
}

/* The first virtual shard the two maps give to different shards, or -1 when they agree everywhere. */
int shard_map_diff(const shard_map_t *a, const shard_map_t *b);

/* A database's identity: which cluster it belongs to, which shard of how many it is, and the map
 * (the same in every database of the cluster). */
typedef struct {
    char cluster[SHARD_CLUSTER_HEX + 1]; /* NUL-terminated */
    uint32_t shard;
    shard_map_t map; /* map.count: the cluster's number of shards */
} shard_identity_t;

/* True when text is a cluster id: exactly SHARD_CLUSTER_HEX lowercase hex digits. */
bool shard_cluster_id_valid(span_t text);

/* The canonical text of id, a JSON object, NUL-terminated, malloc'd (the caller frees it), or NULL
 * when out of memory:
 *   {"version":1,"cluster":"<32 hex>","shard":k,"shards":N,"map":[[first,last,shard],...]}
 * with the map as its maximal ranges in virtual-shard order. */
char *shard_identity_format(const shard_identity_t *id);

/* Parses an identity text: every member above required, no other, the ranges in order covering
 * 0..SHARD_VIRTUAL-1 exactly once, each shard below N, k below N. Returns 0, or -1 with err filled
 * (what is wrong, in words) and *id unspecified. */
int shard_identity_parse(span_t text, shard_identity_t *id, char *err, size_t errlen);

/* Checks the identity found in the database at position (of a node's list of count locations)
 * against what that position must hold: shard `position` of cluster want->cluster, want->map.count
 * shards, want->map. Returns 0 when it does, or -1 with msg naming the first difference, e.g.
 * "database at position 2 is shard 1 of cluster …", "cluster has 3 shards, this node lists 2",
 * "map differs at virtual shard 2048 …". */
int shard_identity_check(const shard_identity_t *want, uint32_t position, const shard_identity_t *got, char *msg,
                         size_t len);

/* --- cursors of the change feed ---
 * An entry's cursor names one log entry: its shard and its position in that shard's log. With one
 * shard it is the position in decimal, as the change feed has always given it; with more, "S.P"
 * (decimal, no sign, no leading zero, S below the count, P at most SHARD_POSITION_MAX). */

/* The entry cursor's text into out (SHARD_CURSOR_MAX bytes suffice): its length, or -1 when cap is
 * too small or shard is not below count. */
int shard_cursor_format(uint32_t count, uint32_t shard, uint64_t position, char *out, size_t cap);

/* Parses an entry cursor of a cluster of count shards. With one shard, the decimal position as the
 * feed has always read it (digits only, leading zeros allowed). 0, or -1 when text is not one. */
int shard_cursor_parse(span_t text, uint32_t count, uint32_t *shard, uint64_t *position);

/* A page's cursor covers every shard: a position per shard. With one shard it is that position in
 * decimal (today's cursor); with more, an opaque token: base64url (no padding) of a version byte (1),
 * the count and each position as unsigned LEB128 varints in their shortest form. */

/* The token of positions[0..count) into out (SHARD_TOKEN_MAX bytes suffice): its length, or -1. */
int shard_token_format(const uint64_t *positions, uint32_t count, char *out, size_t cap);

/* Parses a page token of a cluster of count shards into positions[0..count): 0, or -1 when it is not
 * one (malformed, another version, another count, a position past SHARD_POSITION_MAX, bytes left). */
int shard_token_parse(span_t text, uint32_t count, uint64_t *positions);

#endif
