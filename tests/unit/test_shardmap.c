/* test_shardmap.c — core/shardmap.h: virtual shards, the map, the identity text, the cursors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/shardmap.h"
#include "unit.h"

#define CLUSTER "0123456789abcdef0123456789abcdef"

static void test_virtual(void)
{
    /* CRC-32 check values (zlib's, the IEEE polynomial), mod 4096 */
    CHECK(shard_virtual_of(SPAN_LIT("123456789")) == (0xCBF43926u % 4096)); /* the standard check value */
    CHECK(shard_virtual_of(SPAN_LIT("")) == 0);
    CHECK(shard_virtual_of(SPAN_LIT("a")) == (0xE8B7BE43u % 4096));
    CHECK(shard_virtual_of(SPAN_LIT("The quick brown fox jumps over the lazy dog")) == (0x414FA339u % 4096));
}

static void test_even(void)
{
    shard_map_t m;
    CHECK(shard_map_even(&m, 0) == -1 && shard_map_even(&m, SHARD_MAX + 1) == -1);
    CHECK(shard_map_even(&m, 1) == 0 && m.count == 1);
    bool all0 = true;
    for (int v = 0; v < SHARD_VIRTUAL; v++)
        all0 = all0 && m.of[v] == 0;
    CHECK(all0);
    CHECK(shard_map_even(&m, 2) == 0 && m.of[0] == 0 && m.of[2047] == 0 && m.of[2048] == 1 && m.of[4095] == 1);
    CHECK(shard_map_even(&m, 3) == 0);
    unsigned sizes[3] = {0}, changes = 0;
    for (int v = 0; v < SHARD_VIRTUAL; v++) {
        sizes[m.of[v]]++;
        changes += v > 0 && m.of[v] != m.of[v - 1];
    }
    CHECK(changes == 2 && sizes[0] >= 1365 && sizes[0] <= 1366 && sizes[1] >= 1365 && sizes[1] <= 1366 &&
          sizes[0] + sizes[1] + sizes[2] == SHARD_VIRTUAL);
    /* lookups by id follow the virtual shard */
    CHECK(shard_map_even(&m, 2) == 0);
    CHECK(shard_map_of_id(&m, SPAN_LIT("123456789")) == (0xCBF43926u % 4096 >= 2048));
    shard_map_t other = m;
    CHECK(shard_map_diff(&m, &other) == -1);
    other.of[3000] = 0;
    CHECK(shard_map_diff(&m, &other) == 3000);
}

static int parse(const char *text, shard_identity_t *id, char err[256])
{
    err[0] = '\0';
    return shard_identity_parse(span_of(text), id, err, 256);
}

static void test_identity(void)
{
    shard_identity_t id = {.cluster = CLUSTER, .shard = 1};
    CHECK(shard_map_even(&id.map, 2) == 0);
    char *text = shard_identity_format(&id);
    CHECK(text && strcmp(text, "{\"version\":1,\"cluster\":\"" CLUSTER
                               "\",\"shard\":1,\"shards\":2,\"map\":[[0,2047,0],[2048,4095,1]]}") == 0);
    shard_identity_t back;
    char err[256];
    CHECK(text && parse(text, &back, err) == 0 && strcmp(back.cluster, CLUSTER) == 0 && back.shard == 1 &&
          back.map.count == 2 && shard_map_diff(&back.map, &id.map) == -1);
    free(text);
    /* the ranges need not be maximal, and whitespace is JSON's */
    CHECK(parse("{ \"map\":[[0,99,0],[100,2047,0],[2048,4095,1]], \"shards\":2, \"shard\":0, \"cluster\":\"" CLUSTER
                "\", \"version\":1}",
                &back, err) == 0 &&
          shard_map_diff(&back.map, &id.map) == -1 && back.shard == 0);

    static const struct {
        const char *text, *want; /* want: a part of the error */
    } bad[] = {
        {"", "not JSON"},
        {"[]", "not a JSON object"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]],\"x\":1}",
         "unknown member \"x\""},
        {"{\"version\":2,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]]}", "version 2"},
        {"{\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]]}", "no \"version\""},
        {"{\"version\":1,\"cluster\":\"0123456789ABCDEF0123456789abcdef\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]"
         "]}",
         "\"cluster\" must be"},
        {"{\"version\":1,\"cluster\":\"0123\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]]}", "\"cluster\" must be"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":2,\"shards\":2,\"map\":[[0,4095,0]]}",
         "\"shard\" 2 is not below \"shards\" 2"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":0,\"map\":[[0,4095,0]]}", "\"shards\""},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0.0,\"shards\":1,\"map\":[[0,4095,0]]}", "\"shard\""},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1}", "no \"map\""},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":2,\"map\":[[0,2047,0],[2049,4095,1]]}",
         "virtual shards 2048..2048 are in no range"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":2,\"map\":[[0,2048,0],[2048,4095,1]]}",
         "range 1 starts at virtual shard 2048"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":2,\"map\":[[0,2047,0]]}",
         "virtual shards 2048..4095 are in no range"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":2,\"map\":[[0,2047,0],[2048,4096,1]]}",
         "not a range"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":2,\"map\":[[0,2047,0],[2048,4095,2]]}",
         "names shard 2 of a cluster of 2"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[[0,4095]]}", "range 0 is not"},
        {"{\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[]}", "non-empty array"},
        {"{\"version\":1,\"version\":1,\"cluster\":\"" CLUSTER "\",\"shard\":0,\"shards\":1,\"map\":[[0,4095,0]]}",
         "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i].text, &back, err);
        CHECK(rc == -1 && strstr(err, bad[i].want) != NULL);
        if (rc != -1 || !strstr(err, bad[i].want))
            fprintf(stderr, "  identity %zu: rc %d, error \"%s\", wanted \"%s\"\n", i, rc, err, bad[i].want);
    }
}

static void test_check(void)
{
    shard_identity_t want = {.cluster = CLUSTER}, got;
    shard_map_even(&want.map, 3);
    char msg[512];
    got = want;
    got.shard = 2;
    CHECK(shard_identity_check(&want, 2, &got, msg, sizeof msg) == 0);
    CHECK(shard_identity_check(&want, 1, &got, msg, sizeof msg) == -1 &&
          strcmp(msg, "database at position 1 is shard 2 of cluster " CLUSTER) == 0);
    got = want;
    memcpy(got.cluster, "ffffffffffffffffffffffffffffffff", SHARD_CLUSTER_HEX);
    CHECK(shard_identity_check(&want, 0, &got, msg, sizeof msg) == -1 &&
          strstr(msg, "database at position 0 is shard 0 of cluster ffffffffffffffffffffffffffffffff") == msg);
    got = want;
    got.map.count = 2;
    CHECK(shard_identity_check(&want, 0, &got, msg, sizeof msg) == -1 &&
          strstr(msg, "has 2 shards, this node lists 3") != NULL);
    got = want;
    got.map.of[2048] = 0;
    CHECK(shard_identity_check(&want, 0, &got, msg, sizeof msg) == -1 &&
          strstr(msg, "map differs at virtual shard 2048") == msg);
}

static void test_cursors(void)
{
    char out[SHARD_CURSOR_MAX];
    uint32_t s;
    uint64_t p;
    /* one shard: today's decimal cursors */
    CHECK(shard_cursor_format(1, 0, 8812, out, sizeof out) == 4 && strcmp(out, "8812") == 0);
    CHECK(shard_cursor_format(1, 1, 8812, out, sizeof out) == -1);
    CHECK(shard_cursor_parse(SPAN_LIT("8812"), 1, &s, &p) == 0 && s == 0 && p == 8812);
    CHECK(shard_cursor_parse(SPAN_LIT("017"), 1, &s, &p) == 0 && p == 17); /* as /v1/changes always read it */
    CHECK(shard_cursor_parse(SPAN_LIT("0.17"), 1, &s, &p) == -1);
    CHECK(shard_cursor_parse(SPAN_LIT("18446744073709551615"), 1, &s, &p) == -1);
    CHECK(shard_cursor_parse(SPAN_LIT("18446744073709551614"), 1, &s, &p) == 0 && p == UINT64_MAX - 1);
    /* several: S.P */
    CHECK(shard_cursor_format(4, 3, 17, out, sizeof out) == 4 && strcmp(out, "3.17") == 0);
    CHECK(shard_cursor_format(SHARD_MAX, SHARD_MAX - 1, UINT64_MAX - 1, out, sizeof out) == 24);
    CHECK(shard_cursor_format(4, 3, 17, out, 4) == -1);
    CHECK(shard_cursor_parse(SPAN_LIT("3.17"), 4, &s, &p) == 0 && s == 3 && p == 17);
    CHECK(shard_cursor_parse(SPAN_LIT("0.0"), 4, &s, &p) == 0 && s == 0 && p == 0);
    static const char *const bad[] = {"4.17",  "03.17", "3.017", "3.",    ".17",   "17",
                                      "3.1.7", "+3.17", "3.-1",  " 3.17", "3.17 ", "3.18446744073709551615",
                                      "",      "3,17"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(shard_cursor_parse(span_of(bad[i]), 4, &s, &p) == -1);

    /* page tokens */
    char tok[SHARD_TOKEN_MAX];
    uint64_t one = 17, pos[SHARD_MAX], back[SHARD_MAX];
    CHECK(shard_token_format(&one, 1, tok, sizeof tok) == 2 && strcmp(tok, "17") == 0);
    CHECK(shard_token_parse(SPAN_LIT("17"), 1, back) == 0 && back[0] == 17);
    CHECK(shard_token_parse(SPAN_LIT("x"), 1, back) == -1);
    pos[0] = 0, pos[1] = 127, pos[2] = 128, pos[3] = UINT64_MAX - 1;
    int n = shard_token_format(pos, 4, tok, sizeof tok);
    CHECK(n > 0 && shard_token_parse((span_t){tok, (size_t)n}, 4, back) == 0 && back[0] == 0 && back[1] == 127 &&
          back[2] == 128 && back[3] == UINT64_MAX - 1);
    CHECK(shard_token_parse((span_t){tok, (size_t)n}, 3, back) == -1); /* another count */
    CHECK(shard_token_parse((span_t){tok, (size_t)n}, 1, back) == -1);
    CHECK(shard_token_parse((span_t){tok, (size_t)n - 1}, 4, back) == -1); /* cut */
    /* the encoding: version 1, count 2, positions 5 and 300 */
    pos[0] = 5, pos[1] = 300;
    CHECK(shard_token_format(pos, 2, tok, sizeof tok) > 0 && strcmp(tok, "AQIFrAI") == 0);
    CHECK(shard_token_parse(SPAN_LIT("AQIFrAI"), 2, back) == 0 && back[0] == 5 && back[1] == 300);
    CHECK(shard_token_parse(SPAN_LIT("AQIF_v__________AQ"), 2, back) == 0 && back[1] == UINT64_MAX - 1);
    static const char *const bad_tokens[] = {
        "AgIFrAI",            /* version 2 */
        "AQIFrAIA",           /* a byte left over */
        "AQKFAKwC",           /* a position in a longer form than needed (0x85 0x00) */
        "AQIF",               /* a position missing */
        "AQIFrAI=",           /* padding */
        "AQIF rAI",           /* not base64url */
        "AQIF____________AQ", /* 2^64 - 1: past SHARD_POSITION_MAX */
        "",
    };
    for (size_t i = 0; i < sizeof bad_tokens / sizeof bad_tokens[0]; i++)
        CHECK(shard_token_parse(span_of(bad_tokens[i]), 2, back) == -1);
    /* the largest cluster's token fits SHARD_TOKEN_MAX */
    for (int i = 0; i < SHARD_MAX; i++)
        pos[i] = UINT64_MAX - 1;
    n = shard_token_format(pos, SHARD_MAX, tok, sizeof tok);
    CHECK(n > 0 && shard_token_parse((span_t){tok, (size_t)n}, SHARD_MAX, back) == 0 && back[SHARD_MAX - 1] == pos[0]);
    CHECK(shard_token_format(pos, 0, tok, sizeof tok) == -1 &&
          shard_token_format(pos, SHARD_MAX + 1, tok, sizeof tok) == -1);
}

void test_shardmap(void)
{
    test_virtual();
    test_even();
    test_identity();
    test_check();
    test_cursors();
}
