/* fuzz_shardid.c — libFuzzer target for shard_identity_parse (core/shardmap.h), the cluster identity
 * a database keeps. Input: the text. Properties: an accepted identity is whole (k below N, every
 * virtual shard given to a shard below N), its canonical text parses back to the same identity and
 * is a fixed point; a refusal says why. */
#include <stdint.h>
#include <stdlib.h>

#include "core/shardmap.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static shard_identity_t id, back;
    char err[256] = "";
    if (shard_identity_parse((span_t){(const char *)data, size}, &id, err, sizeof err) != 0) {
        FUZZ_ASSERT(err[0] != '\0');
        return 0;
    }
    FUZZ_ASSERT(id.map.count >= 1 && id.map.count <= SHARD_MAX && id.shard < id.map.count);
    FUZZ_ASSERT(shard_cluster_id_valid(span_of(id.cluster)));
    for (int v = 0; v < SHARD_VIRTUAL; v++)
        FUZZ_ASSERT(id.map.of[v] < id.map.count);
    char *text = shard_identity_format(&id);
    FUZZ_ASSERT(text != NULL);
    FUZZ_ASSERT(shard_identity_parse(span_of(text), &back, err, sizeof err) == 0);
    FUZZ_ASSERT(strcmp(back.cluster, id.cluster) == 0 && back.shard == id.shard && back.map.count == id.map.count);
    FUZZ_ASSERT(shard_map_diff(&back.map, &id.map) == -1);
    char *again = shard_identity_format(&back);
    FUZZ_ASSERT(again && strcmp(again, text) == 0);
    char msg[512];
    FUZZ_ASSERT(shard_identity_check(&id, id.shard, &back, msg, sizeof msg) == 0);
    free(text);
    free(again);
    return 0;
}
