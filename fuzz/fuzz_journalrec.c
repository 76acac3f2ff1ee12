/* fuzz_journalrec.c — libFuzzer target for the decoder of the embedded store's journal records
 * (core/journalrec.h), which recovery runs over files a crash or a damaged disk may have left. Input:
 * the bytes as a record (header, then payload) and, separately, as a bare payload. Properties: every
 * change decoded lies inside its payload; a payload decoded to its end encodes back to the same
 * bytes; a header that decodes encodes back to the same bytes. */
#include <stdbool.h>
#include <stdint.h>

#include "core/journalrec.h"
#include "fuzz.h"

static void check_payload(const uint8_t *payload, size_t len)
{
    const uint8_t *p = payload, *end = payload + len;
    uint8_t *again = malloc(len ? len : 1);
    size_t n = 0;
    journalrec_op_t op;
    int more;
    if (!again)
        return;
    while ((more = journalrec_op_next(&p, end, &op)) == 1) {
        FUZZ_ASSERT(op.op >= JOURNALREC_PUT && op.op <= JOURNALREC_EMPTY);
        FUZZ_ASSERT(op.key >= payload && op.klen <= len && (size_t)(op.key - payload) <= len - op.klen);
        FUZZ_ASSERT(op.val == op.key + op.klen && op.vlen <= (size_t)(end - op.val));
        FUZZ_ASSERT(p == op.val + op.vlen && p <= end);
        FUZZ_ASSERT(n + JOURNALREC_OP_HEADER_LEN + op.klen + op.vlen <= len);
        n += journalrec_op_put(again + n, op.op, op.db, op.key, op.klen, op.val, op.vlen);
    }
    FUZZ_ASSERT(more == 0 || more == -1);
    if (more == 0)
        FUZZ_ASSERT(n == len && memcmp(again, payload, len) == 0);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_payload(data, size);
    for (size_t at = journalrec_find(data, size, 0); at < size; at = journalrec_find(data, size, at + 1))
        FUZZ_ASSERT(size - at >= 4 && journalrec_find(data, size, at) == at);
    journalrec_head_t h;
    if (size < JOURNALREC_HEADER_LEN || !journalrec_head_get(data, &h))
        return 0;
    FUZZ_ASSERT(h.len <= JOURNALREC_MAX);
    uint8_t again[JOURNALREC_HEADER_LEN];
    journalrec_head_put(again, &h);
    FUZZ_ASSERT(memcmp(again, data, JOURNALREC_HEADER_LEN) == 0);
    size_t len = size - JOURNALREC_HEADER_LEN < h.len ? size - JOURNALREC_HEADER_LEN : h.len;
    (void)journalrec_crc(&h, data + JOURNALREC_HEADER_LEN, len);
    check_payload(data + JOURNALREC_HEADER_LEN, len);
    return 0;
}
