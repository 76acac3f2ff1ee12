/* journalrec.c — see journalrec.h. */
#include "core/journalrec.h"

#include <string.h>
#include <zlib.h>

#define RECORD_MAGIC 0x4a524c54u /* "TLRJ" */

void journalrec_head_put(uint8_t out[JOURNALREC_HEADER_LEN], const journalrec_head_t *h)
{
    uint32_t magic = RECORD_MAGIC;
    memcpy(out, &magic, 4);
    memcpy(out + 4, &h->len, 4);
    memcpy(out + 8, &h->txnid, 8);
    memcpy(out + 16, &h->crc, 4);
    memcpy(out + 20, &h->nops, 4);
}

bool journalrec_head_get(const uint8_t in[JOURNALREC_HEADER_LEN], journalrec_head_t *h)
{
    uint32_t magic;
    memcpy(&magic, in, 4);
    memcpy(&h->len, in + 4, 4);
    memcpy(&h->txnid, in + 8, 8);
    memcpy(&h->crc, in + 16, 4);
    memcpy(&h->nops, in + 20, 4);
    return magic == RECORD_MAGIC && h->len <= JOURNALREC_MAX;
}

size_t journalrec_find(const uint8_t *buf, size_t len, size_t from)
{
    uint32_t magic = RECORD_MAGIC;
    if (from >= len)
        return len;
    const uint8_t *p = memmem(buf + from, len - from, &magic, sizeof magic);
    return p ? (size_t)(p - buf) : len;
}

uint32_t journalrec_crc(uint64_t txnid, const uint8_t *payload, size_t len)
{
    uLong c = crc32(0L, (const Bytef *)&txnid, sizeof txnid);
    while (len) { /* crc32 takes a uInt length */
        uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, payload, n);
        payload += n;
        len -= n;
    }
    return (uint32_t)c;
}

size_t journalrec_op_put(uint8_t *out, int op, int db, const void *key, size_t klen, const void *val, size_t vlen)
{
    uint16_t k16 = (uint16_t)klen;
    uint32_t v32 = (uint32_t)vlen;
    out[0] = (uint8_t)op;
    out[1] = (uint8_t)db;
    memcpy(out + 2, &k16, 2);
    memcpy(out + 4, &v32, 4);
    if (klen)
        memcpy(out + JOURNALREC_OP_HEADER_LEN, key, klen);
    if (vlen)
        memcpy(out + JOURNALREC_OP_HEADER_LEN + klen, val, vlen);
    return JOURNALREC_OP_HEADER_LEN + klen + vlen;
}

int journalrec_op_next(const uint8_t **p, const uint8_t *end, journalrec_op_t *op)
{
    const uint8_t *q = *p;
    if (q == end)
        return 0;
    if ((size_t)(end - q) < JOURNALREC_OP_HEADER_LEN)
        return -1;
    uint16_t k16;
    uint32_t v32;
    memcpy(&k16, q + 2, 2);
    memcpy(&v32, q + 4, 4);
    op->op = q[0];
    op->db = q[1];
    op->klen = k16;
    op->vlen = v32;
    size_t room = (size_t)(end - q) - JOURNALREC_OP_HEADER_LEN;
    if (op->op < JOURNALREC_PUT || op->op > JOURNALREC_EMPTY || op->klen > room || op->vlen > room - op->klen)
        return -1;
    op->key = q + JOURNALREC_OP_HEADER_LEN;
    op->val = op->key + op->klen;
    *p = op->val + op->vlen;
    return 1;
}
