/* journalrec.c — see journalrec.h. */
#include "core/journalrec.h"

#include <assert.h>
#include <string.h>
#include <zlib.h>

/* The two magics share their first three bytes ("TLR"), which journalrec_find looks for. */
#define MAGIC_FIRST 0x4a524c54u /* "TLRJ": one record a transaction, the id its txn id */
#define MAGIC_PARTS 0x50524c54u /* "TLRP": the id [txn id][part] */

uint64_t journalrec_order(const journalrec_head_t *h)
{
    return h->txnid << 16 | h->part;
}

/* The id field as stored. */
static uint64_t stored_id(const journalrec_head_t *h)
{
    return h->first_format ? h->txnid : journalrec_order(h);
}

void journalrec_head_put(uint8_t out[JOURNALREC_HEADER_LEN], const journalrec_head_t *h)
{
    assert(h->txnid <= JOURNALREC_TXNID_MAX && h->part < JOURNALREC_PARTS_MAX && !(h->first_format && h->part));
    uint32_t magic = h->first_format ? MAGIC_FIRST : MAGIC_PARTS;
    uint64_t id = stored_id(h);
    memcpy(out, &magic, 4);
    memcpy(out + 4, &h->len, 4);
    memcpy(out + 8, &id, 8);
    memcpy(out + 16, &h->crc, 4);
    memcpy(out + 20, &h->nops, 4);
}

bool journalrec_head_get(const uint8_t in[JOURNALREC_HEADER_LEN], journalrec_head_t *h)
{
    uint32_t magic;
    uint64_t id;
    memcpy(&magic, in, 4);
    memcpy(&h->len, in + 4, 4);
    memcpy(&id, in + 8, 8);
    memcpy(&h->crc, in + 16, 4);
    memcpy(&h->nops, in + 20, 4);
    h->first_format = magic == MAGIC_FIRST;
    h->txnid = h->first_format ? id : id >> 16;
    h->part = h->first_format ? 0 : (uint32_t)(id & 0xffff);
    if (h->first_format && id > JOURNALREC_TXNID_MAX)
        return false; /* no store reaches it: a damaged header */
    return (magic == MAGIC_FIRST || magic == MAGIC_PARTS) && h->len <= JOURNALREC_MAX;
}

size_t journalrec_find(const uint8_t *buf, size_t len, size_t from)
{
    static const uint8_t prefix[3] = {'T', 'L', 'R'};
    while (from + 4 <= len) {
        const uint8_t *p = memmem(buf + from, len - from - 1, prefix, sizeof prefix);
        if (!p)
            break;
        if (p[3] == 'J' || p[3] == 'P')
            return (size_t)(p - buf);
        from = (size_t)(p - buf) + 1;
    }
    return len;
}

uint32_t journalrec_crc(const journalrec_head_t *h, const uint8_t *payload, size_t len)
{
    uint64_t id = stored_id(h);
    uLong c = crc32(0L, (const Bytef *)&id, sizeof id);
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
