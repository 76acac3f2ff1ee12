/* journalrec.h — the bytes of one record of the embedded store's journal (store/lmdb/lmdb_journal.c):
 * a header [magic u32][payload length u32][id u64][crc32 u32][changes u32], then the changes,
 * each [op u8][database u8][key length u16][value length u32][key][value]. Host byte order (the
 * journal never leaves the machine that wrote it). Pure: encoding, and decoding of bytes that may be
 * damaged or cut short.
 *
 * A record is one batch; several batches may share one LMDB transaction (an epoch), so the id is
 * [txn id: 48 bits][part: 16 bits], the batch's place among its transaction's records, and ids rise
 * strictly through a file. Records of the first format (magic "TLRJ", one per transaction) carry the
 * txn id alone and read as part 0. */
#ifndef TALLY_CORE_JOURNALREC_H
#define TALLY_CORE_JOURNALREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNALREC_HEADER_LEN 24
#define JOURNALREC_OP_HEADER_LEN 8
#define JOURNALREC_MAX (1u << 30)   /* a batch's changes are far below; longer is a damaged header */
#define JOURNALREC_PARTS_MAX 65536u /* records one transaction may have */
#define JOURNALREC_TXNID_MAX ((UINT64_C(1) << 48) - 1)

enum { JOURNALREC_PUT = 1, JOURNALREC_DEL = 2, JOURNALREC_EMPTY = 3 };

typedef struct {
    uint64_t txnid;    /* the LMDB transaction the batch commits in (at most JOURNALREC_TXNID_MAX) */
    uint32_t part;     /* the batch's place among that transaction's records: 0, 1, … */
    uint32_t len;      /* of the payload (the changes) */
    uint32_t crc;      /* crc32 of the id's 8 bytes as stored, then the payload */
    uint32_t nops;     /* changes in the payload */
    bool first_format; /* read from a record of the first format (part 0); written back as one */
} journalrec_head_t;

typedef struct {
    int op, db;
    const uint8_t *key, *val;
    size_t klen, vlen;
} journalrec_op_t;

void journalrec_head_put(uint8_t out[JOURNALREC_HEADER_LEN], const journalrec_head_t *h);
/* False when the bytes are not a header (wrong magic, a length past JOURNALREC_MAX). */
bool journalrec_head_get(const uint8_t in[JOURNALREC_HEADER_LEN], journalrec_head_t *h);
/* The record's place in the journal's order: rises strictly from one record to the next. */
uint64_t journalrec_order(const journalrec_head_t *h);
/* The checksum of a record with header h (its id and format) and that payload. */
uint32_t journalrec_crc(const journalrec_head_t *h, const uint8_t *payload, size_t len);
/* Where in buf[0, len) a header may begin (its magic's first byte), searching from `from`; len when
 * nowhere. A match may still not be a header (journalrec_head_get says). */
size_t journalrec_find(const uint8_t *buf, size_t len, size_t from);
/* Encodes one change into out (JOURNALREC_OP_HEADER_LEN + klen + vlen bytes); returns that size.
 * klen must fit in 16 bits and vlen in 32. */
size_t journalrec_op_put(uint8_t *out, int op, int db, const void *key, size_t klen, const void *val, size_t vlen);
/* The next change of [*p, end): 1 (*p moved past it), 0 at end, -1 when malformed (a length past the
 * end, an unknown op). */
int journalrec_op_next(const uint8_t **p, const uint8_t *end, journalrec_op_t *op);

#endif
