/* fuzz_shardcursor.c — libFuzzer target for the change feed's shard cursors (core/shardmap.h): an
 * entry's "S.P" and a page's token. Input: one byte choosing the cluster's shard count (1..SHARD_MAX),
 * then the text, parsed as both. Properties: what is accepted formats back to a text that parses
 * to the same values (and, in the strict forms, to the very text); positions stay in range. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "core/shardmap.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t count = (uint32_t)data[0] % SHARD_MAX + 1;
    span_t text = {(const char *)data + 1, size - 1};

    uint32_t shard;
    uint64_t pos;
    if (shard_cursor_parse(text, count, &shard, &pos) == 0) {
        FUZZ_ASSERT(shard < count && pos <= SHARD_POSITION_MAX);
        char out[SHARD_CURSOR_MAX];
        int n = shard_cursor_format(count, shard, pos, out, sizeof out);
        FUZZ_ASSERT(n > 0);
        if (count > 1) /* the strict form: one text per cursor */
            FUZZ_ASSERT(span_eq((span_t){out, (size_t)n}, text));
        uint32_t s2;
        uint64_t p2;
        FUZZ_ASSERT(shard_cursor_parse((span_t){out, (size_t)n}, count, &s2, &p2) == 0 && s2 == shard && p2 == pos);
    }

    static uint64_t positions[SHARD_MAX], again[SHARD_MAX];
    if (shard_token_parse(text, count, positions) == 0) {
        static char out[SHARD_TOKEN_MAX];
        int n = shard_token_format(positions, count, out, sizeof out);
        FUZZ_ASSERT(n > 0);
        if (count > 1)
            FUZZ_ASSERT(span_eq((span_t){out, (size_t)n}, text));
        FUZZ_ASSERT(shard_token_parse((span_t){out, (size_t)n}, count, again) == 0);
        for (uint32_t i = 0; i < count; i++)
            FUZZ_ASSERT(again[i] == positions[i] && positions[i] <= SHARD_POSITION_MAX);
        if (count > 1) /* the wrong count is refused */
            FUZZ_ASSERT(shard_token_parse((span_t){out, (size_t)n}, count - 1, again) != 0);
    }
    return 0;
}
