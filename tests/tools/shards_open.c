/* shards_open.c — test-only: opens the given stores as the shards of one cluster with shards_open
 * (engine/shards.h), as a sharded node will, and prints the cluster's identity; at a first open
 * that writes "shard k of N" into each. tallyd serves one store today, so this is how the tests
 * give a store the identity of a cluster of several shards.
 * usage: shards_open LOCATION...   (directories or postgresql:// URIs, new ones made with tallyd's
 *                                    default kinds; no tallyd running on them)
 * Exit status 0, or 1 with shards_open's error on stderr. */
#include <stdio.h>

#include "engine/shards.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shards_open LOCATION...\n");
        return 2;
    }
    store_options_t opt = {.map_size_bytes = 1ull << 30};
    shards_t *s;
    char err[512];
    kinds_t kinds; /* tallyd's default kinds: a new store is made with them */
    if (kinds_parse(&kinds, KINDS_DEFAULT, err, sizeof err) != 0) {
        fprintf(stderr, "shards_open: %s\n", err);
        return 1;
    }
    if (shards_open((const char *const *)argv + 1, (size_t)argc - 1, &kinds, &opt, &s, err, sizeof err) != 0) {
        fprintf(stderr, "shards_open: %s\n", err);
        return 1;
    }
    shard_identity_t id;
    shards_identity(s, 0, &id);
    printf("cluster %s shards %u\n", id.cluster, id.map.count);
    shards_close(s);
    return 0;
}
