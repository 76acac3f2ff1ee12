/* lmdb_journal.c — where the embedded store's durability comes from (docs/architecture.md,
 * "Durability: the journal"). Each write transaction's changes (puts, deletes, a database emptied) are kept as it
 * runs; at its commit they are appended to a journal file as one record and synced (one sequential
 * write), and only then is the LMDB transaction committed, without a sync of its own (MDB_NOSYNC):
 * readers see a batch only once it is durable, and the B-tree's pages reach the disk later, many
 * batches' at once.
 *
 * Every JOURNAL_CHECKPOINT_MS a thread syncs the data file and records that state as the base:
 * its transaction id and LMDB's two meta pages as they were at its commit (the file `journal-base`).
 * A snapshot (a read transaction) is held on the base until the next base is recorded, so LMDB
 * never reuses a page of it: whatever reached the disk since, the base's tree is intact there.
 *
 * A clean close syncs the data file and removes the base and the records: nothing to recover. After
 * a crash the base is there, and opening the store writes its meta pages back into data.mdb (the
 * newer ones may name pages that never reached the disk, after a power loss), then replays the
 * records that came after the base, in transaction order, which must follow on from it without a
 * gap. After a kill -9 nothing was lost from the page cache, and the same steps give the same
 * result, so there is one recovery.
 *
 * Only the directory's owner (lmdb_dir_owner: tallyd, or a tool on a stopped store) journals and
 * recovers; a tool beside a running tallyd opens the store read-only and leaves the journal alone.
 *
 * Records go to two files in turn: each checkpoint switches to the other, whose records the base
 * before it already holds. A record's bytes: core/journalrec.h. */
#include "store/lmdb/lmdb_internal.h"

#include "core/clock.h"
#include "core/journalrec.h"
#include "core/log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A base is written as "TLRE" since the records may be of several parts a transaction: a build from
 * before them finds it damaged and refuses the store rather than replay none of its records (which
 * it could not read) after a crash. "TLRB", the first format's, is still read. */
#define BASE_MAGIC 0x45524c54u       /* "TLRE" */
#define BASE_MAGIC_FIRST 0x42524c54u /* "TLRB" */
#define BASE_HEADER_LEN 20
#define BASE_FILE "journal-base"
#define JOURNAL_FILE "journal-%d"
#define CHECKPOINT_TRIES 5           /* lmdb_journal_checkpoint_wait */
#define DAMAGE_SCAN_CHUNK (1u << 20) /* recovery reads what lies behind the records' end this much at a time */

/* --- the changes of the open transaction --- */

int lmdb_journal_db(const lmdb_store_t *s, MDB_dbi db)
{
    for (int i = 0; i < s->journal.ndbs; i++)
        if (s->journal.dbs[i] == db)
            return i;
    return -1;
}

static int ops_reserve(lmdb_journal_t *j, size_t more)
{
    if (j->ops_len + more <= j->ops_cap)
        return 0;
    size_t cap = j->ops_cap ? j->ops_cap : 64 * 1024;
    while (cap < j->ops_len + more)
        cap *= 2;
    uint8_t *p = realloc(j->ops, cap);
    if (!p)
        return ENOMEM;
    j->ops = p;
    j->ops_cap = cap;
    return 0;
}

/* Keeps one change of the open transaction (nothing while the journal is not recording: opening). */
static int note(MDB_txn *txn, int op, MDB_dbi db, const MDB_val *key, const MDB_val *val)
{
    lmdb_store_t *s = mdb_env_get_userctx(mdb_txn_env(txn));
    lmdb_journal_t *j = &s->journal;
    if (!j->recording)
        return MDB_SUCCESS;
    int idx = lmdb_journal_db(s, db);
    size_t klen = key ? key->mv_size : 0, vlen = val ? val->mv_size : 0;
    if (idx < 0 || klen > UINT16_MAX)
        return EINVAL;
    int rc = ops_reserve(j, JOURNALREC_OP_HEADER_LEN + klen + vlen);
    if (rc != 0)
        return rc;
    j->ops_len += journalrec_op_put(j->ops + j->ops_len, op, idx, key ? key->mv_data : NULL, klen,
                                    val ? val->mv_data : NULL, vlen);
    j->nops++;
    return MDB_SUCCESS;
}

int lmdb_put(MDB_txn *txn, MDB_dbi db, MDB_val *key, MDB_val *val, unsigned flags)
{
    assert(!(flags & MDB_RESERVE)); /* lmdb_reserve, then lmdb_reserved once the value is written */
    int rc = mdb_put(txn, db, key, val, flags);
    return rc == MDB_SUCCESS ? note(txn, JOURNALREC_PUT, db, key, val) : rc;
}

int lmdb_reserve(MDB_txn *txn, MDB_dbi db, MDB_val *key, MDB_val *val)
{
    return mdb_put(txn, db, key, val, MDB_RESERVE);
}

int lmdb_reserved(MDB_txn *txn, MDB_dbi db, const MDB_val *key, const MDB_val *val)
{
    return note(txn, JOURNALREC_PUT, db, key, val);
}

int lmdb_del(MDB_txn *txn, MDB_dbi db, MDB_val *key)
{
    int rc = mdb_del(txn, db, key, NULL);
    return rc == MDB_SUCCESS ? note(txn, JOURNALREC_DEL, db, key, NULL) : rc;
}

int lmdb_cursor_put(MDB_cursor *cur, MDB_val *key, MDB_val *val, unsigned flags)
{
    int rc = mdb_cursor_put(cur, key, val, flags);
    if (rc != MDB_SUCCESS)
        return rc;
    MDB_val k, v; /* with MDB_CURRENT the key given may be the caller's copy: the record's own */
    if ((rc = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT)) != MDB_SUCCESS)
        return rc;
    return note(mdb_cursor_txn(cur), JOURNALREC_PUT, mdb_cursor_dbi(cur), &k, &v);
}

int lmdb_cursor_del(MDB_cursor *cur)
{
    MDB_val k, v;
    int rc = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
    if (rc != MDB_SUCCESS)
        return rc;
    MDB_txn *txn = mdb_cursor_txn(cur);
    lmdb_journal_t *j = &((lmdb_store_t *)mdb_env_get_userctx(mdb_txn_env(txn)))->journal;
    size_t len = j->ops_len, n = j->nops;
    if ((rc = note(txn, JOURNALREC_DEL, mdb_cursor_dbi(cur), &k, NULL)) != MDB_SUCCESS) /* before: k dies with it */
        return rc;
    if ((rc = mdb_cursor_del(cur, 0)) != MDB_SUCCESS) {
        j->ops_len = len;
        j->nops = n;
    }
    return rc;
}

int lmdb_empty(MDB_txn *txn, MDB_dbi db)
{
    int rc = mdb_drop(txn, db, 0);
    return rc == MDB_SUCCESS ? note(txn, JOURNALREC_EMPTY, db, NULL, NULL) : rc;
}

void lmdb_journal_txn_reset(lmdb_store_t *s)
{
    s->journal.ops_len = 0;
    s->journal.nops = 0;
}

/* --- files --- */

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int rc = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* All len bytes at off, written or read (pwrite and pread may do less, or be interrupted). Returns 0,
 * or an errno (EIO: the file ended first). */
static int transfer_all(int fd, void *buf, size_t len, off_t off, bool writing)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = writing ? pwrite(fd, p, len, off) : pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
    return transfer_all(fd, (void *)buf, len, off, true);
}

static int read_all(int fd, void *buf, size_t len, off_t off)
{
    return transfer_all(fd, buf, len, off, false);
}

/* The base's checksum: the txn id's 8 bytes, then the meta pages (as a record of the first format's). */
static uint32_t base_crc(uint64_t txnid, const uint8_t *metas, size_t len)
{
    journalrec_head_t h = {.txnid = txnid, .first_format = true};
    return journalrec_crc(&h, metas, len);
}

/* The base: [magic u32][page size u32][txn id u64][crc32 u32] then the two meta pages. Written to
 * a new file, synced and renamed over the old one: a crash leaves one or the other, whole. */
static int base_write(lmdb_journal_t *j, uint64_t txnid, const uint8_t *metas)
{
    char tmp[sizeof j->base_path + 8];
    snprintf(tmp, sizeof tmp, "%s.new", j->base_path);
    size_t mlen = 2 * (size_t)j->psize;
    uint8_t head[BASE_HEADER_LEN];
    uint32_t magic = BASE_MAGIC, crc = base_crc(txnid, metas, mlen);
    memcpy(head, &magic, 4);
    memcpy(head + 4, &j->psize, 4);
    memcpy(head + 8, &txnid, 8);
    memcpy(head + 16, &crc, 4);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return errno;
    int rc = write_all(fd, head, sizeof head, 0);
    if (rc == 0)
        rc = write_all(fd, metas, mlen, sizeof head);
    if (rc == 0 && fdatasync(fd) != 0)
        rc = errno;
    close(fd);
    if (rc == 0 && rename(tmp, j->base_path) != 0)
        rc = errno;
    if (rc == 0)
        rc = sync_dir(j->dir);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* Reads the base: 0 with *txnid and the meta pages, ENOENT when there is none, else an error. */
static int base_read(lmdb_journal_t *j, uint64_t *txnid, uint8_t **metas, uint32_t *psize)
{
    int fd = open(j->base_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    uint8_t head[BASE_HEADER_LEN];
    uint32_t magic, crc;
    int rc = read_all(fd, head, sizeof head, 0);
    memcpy(&magic, head, 4);
    memcpy(psize, head + 4, 4);
    memcpy(txnid, head + 8, 8);
    memcpy(&crc, head + 16, 4);
    if (rc == 0 && ((magic != BASE_MAGIC && magic != BASE_MAGIC_FIRST) || *psize < 512 || *psize > 65536))
        rc = EBADMSG;
    *metas = NULL;
    if (rc == 0 && !(*metas = malloc(2 * (size_t)*psize)))
        rc = ENOMEM;
    if (rc == 0)
        rc = read_all(fd, *metas, 2 * (size_t)*psize, sizeof head);
    if (rc == 0 && base_crc(*txnid, *metas, 2 * (size_t)*psize) != crc)
        rc = EBADMSG;
    close(fd);
    if (rc != 0) {
        free(*metas);
        *metas = NULL;
    }
    return rc == EIO ? EBADMSG : rc; /* EIO from read_all: the file ended early */
}

/* --- the write path --- */

/* Cuts the file being appended to after its last good record (a failed append, or a record whose
 * transaction LMDB did not take), synced: no replay applies what was not committed. Shortening needs
 * no free block. If even that fails, nothing more is committed until a restart: an acknowledged write
 * must never depend on it. */
static void cut_back(lmdb_journal_t *j)
{
    int fd = j->fd[j->cur];
    if (ftruncate(fd, (off_t)j->off) != 0 || fdatasync(fd) != 0) {
        j->broken = true;
        log_line("level=error event=journal-broken reason=\"%s\" (writes refused until a restart)", strerror(errno));
    }
}

/* The batch's changes as one record, synced, before LMDB commits it (txnid: the id its transaction
 * commits as; part: the batch's place among that transaction's records). Returns 0, or an errno (the
 * batch must then be aborted). */
int lmdb_journal_append(lmdb_store_t *s, uint64_t txnid, uint32_t part)
{
    lmdb_journal_t *j = &s->journal;
    if (j->broken)
        return EIO;
    if (j->ops_len > JOURNALREC_MAX)
        return EFBIG;
    uint8_t head[JOURNALREC_HEADER_LEN];
    if (txnid > JOURNALREC_TXNID_MAX || part >= JOURNALREC_PARTS_MAX)
        return EOVERFLOW;
    journalrec_head_t h = {.txnid = txnid, .part = part, .len = (uint32_t)j->ops_len, .nops = (uint32_t)j->nops};
    h.crc = journalrec_crc(&h, j->ops, j->ops_len);
    journalrec_head_put(head, &h);
    int fd = j->fd[j->cur];
    int rc = write_all(fd, head, sizeof head, (off_t)j->off);
    if (rc == 0)
        rc = write_all(fd, j->ops, j->ops_len, (off_t)(j->off + sizeof head));
    if (rc == 0 && fdatasync(fd) != 0)
        rc = errno;
    if (rc != 0) {
        cut_back(j);
        return rc;
    }
    j->pending_len = sizeof head + j->ops_len;
    atomic_fetch_add(&j->records, 1);
    atomic_fetch_add(&j->bytes, j->pending_len);
    return 0;
}

/* After LMDB's commit of the transaction just appended: ok, the record stays; else it is cut off. */
void lmdb_journal_committed(lmdb_store_t *s, bool ok)
{
    lmdb_journal_t *j = &s->journal;
    if (ok)
        j->off += j->pending_len;
    else if (j->pending_len)
        cut_back(j);
    j->pending_len = 0;
    lmdb_journal_txn_reset(s);
}

/* --- checkpoints --- */

static int metas_read(lmdb_store_t *s, uint8_t *metas)
{
    int fd;
    if (mdb_env_get_fd(s->env, &fd) != MDB_SUCCESS)
        return EBADF;
    return read_all(fd, metas, 2 * (size_t)s->journal.psize, 0);
}

static void *checkpoint_thread(void *arg)
{
    lmdb_store_t *s = arg;
    lmdb_journal_t *j = &s->journal;
    pthread_mutex_lock(&j->lock);
    for (;;) {
        while (!j->ck_pending && !j->stop)
            pthread_cond_wait(&j->cond, &j->lock);
        if (!j->ck_pending)
            break;
        uint64_t txnid = j->ck_txnid;
        pthread_mutex_unlock(&j->lock);
        uint64_t t0 = mono_ms();
        int rc = mdb_env_sync(s->env, 1);
        if (rc == MDB_SUCCESS)
            rc = base_write(j, txnid, j->ck_metas);
        pthread_mutex_lock(&j->lock);
        if (rc == 0) {
            if (j->old_pin)
                mdb_txn_abort(j->old_pin); /* the base before: its pages may be reused now */
            j->old_pin = NULL;
            j->ck_pending = false;
            atomic_fetch_add(&j->checkpoints, 1);
            atomic_store(&j->last_checkpoint_ms, mono_ms() - t0);
            pthread_cond_broadcast(&j->cond);
        } else {
            /* The base before stays, with its snapshot and both files' records: tried again. */
            atomic_fetch_add(&j->checkpoint_failures, 1);
            pthread_cond_broadcast(&j->cond); /* a close waiting for it stops waiting */
            log_line("level=warn event=checkpoint-failed reason=\"%s\"", rc > 0 ? strerror(rc) : mdb_strerror(rc));
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            if (!j->stop)
                pthread_cond_timedwait(&j->cond, &j->lock, &until);
            if (j->stop)
                break;
        }
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* Starts a checkpoint (writer thread, no transaction open) unless one is under way; true when it
 * did. The snapshot of the new base is taken here, before the next commit can free a page of it; the
 * meta pages are read as the last commit left them. */
static bool checkpoint_start(lmdb_store_t *s, uint64_t now)
{
    lmdb_journal_t *j = &s->journal;
    pthread_mutex_lock(&j->lock);
    bool busy = j->ck_pending;
    pthread_mutex_unlock(&j->lock);
    if (busy)
        return false;
    MDB_envinfo info;
    MDB_txn *pin = NULL;
    if (mdb_env_info(s->env, &info) != MDB_SUCCESS || metas_read(s, j->ck_metas) != 0 ||
        mdb_txn_begin(s->env, NULL, MDB_RDONLY, &pin) != MDB_SUCCESS)
        return false; /* tried again after the next commit */
    j->last_start_ms = now;
    j->cur ^= 1; /* the other file's records are all in the base before this one */
    j->off = 0;
    pthread_mutex_lock(&j->lock);
    j->ck_txnid = (uint64_t)info.me_last_txnid;
    j->old_pin = j->pin;
    j->pin = pin;
    j->ck_pending = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    return true;
}

/* After a commit: a checkpoint started when one is due (every interval_ms, or when the current file
 * has grown large). */
void lmdb_journal_maybe_checkpoint(lmdb_store_t *s)
{
    lmdb_journal_t *j = &s->journal;
    uint64_t now = mono_ms();
    if (now - j->last_start_ms >= j->interval_ms || j->off >= JOURNAL_SWITCH_BYTES)
        checkpoint_start(s, now);
}

/* Waits (j->lock held) while a checkpoint is under way, through at most tries failed attempts of it
 * (the thread tries again each second). Returns true when none is under way any more. */
static bool checkpoint_settled(lmdb_journal_t *j, uint64_t tries)
{
    uint64_t failures = atomic_load(&j->checkpoint_failures);
    while (j->ck_pending && atomic_load(&j->checkpoint_failures) < failures + tries)
        pthread_cond_wait(&j->cond, &j->lock);
    return !j->ck_pending;
}

/* A checkpoint started now and waited for (writer thread, no transaction open): for a commit the
 * journal has no record of (lmdb_write_commit's guard), which only a base can make recoverable.
 * Returns 0, or EIO when it could not be done (the journal is then marked broken). */
int lmdb_journal_checkpoint_wait(lmdb_store_t *s)
{
    lmdb_journal_t *j = &s->journal;
    /* the checkpoint under way, if any, then one started now: each given five tries (one a second) */
    pthread_mutex_lock(&j->lock);
    bool busy = !checkpoint_settled(j, CHECKPOINT_TRIES);
    pthread_mutex_unlock(&j->lock);
    if (!busy) { /* due now, whenever the last one started (a clock since boot may be younger than the interval) */
        bool started = checkpoint_start(s, mono_ms());
        pthread_mutex_lock(&j->lock);
        busy = !started || !checkpoint_settled(j, CHECKPOINT_TRIES);
        pthread_mutex_unlock(&j->lock);
    }
    if (busy) {
        j->broken = true;
        log_line("level=error event=journal-broken reason=\"a checkpoint for a commit without a record "
                 "failed\" (writes refused until a restart)");
        return EIO;
    }
    return 0;
}

/* The store's state now made the base (no transaction open, no checkpoint under way): the data
 * file synced, the base written, then both files emptied — their records are all in it. A crash at
 * any point leaves the old base with its records, or the new one. Returns 0, or an error. */
static int rebase(lmdb_store_t *s)
{
    lmdb_journal_t *j = &s->journal;
    MDB_envinfo info;
    int rc = mdb_env_info(s->env, &info);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_sync(s->env, 1);
    if (rc == MDB_SUCCESS)
        rc = metas_read(s, j->ck_metas);
    if (rc == MDB_SUCCESS)
        rc = base_write(j, (uint64_t)info.me_last_txnid, j->ck_metas);
    for (int i = 0; i < 2 && rc == MDB_SUCCESS; i++)
        if (ftruncate(j->fd[i], 0) != 0 || fdatasync(j->fd[i]) != 0)
            rc = errno;
    return rc;
}

/* --- opening and closing --- */

bool lmdb_journal_owns(const char *name)
{
    return strcmp(name, "journal-0") == 0 || strcmp(name, "journal-1") == 0 || strcmp(name, BASE_FILE) == 0 ||
           strcmp(name, BASE_FILE ".new") == 0;
}

int lmdb_journal_init(lmdb_store_t *s, const char *dir, uint64_t interval_ms, char *err, size_t errlen)
{
    lmdb_journal_t *j = &s->journal;
    j->interval_ms = interval_ms ? interval_ms : JOURNAL_CHECKPOINT_MS;
    for (int i = 0; i < 2; i++)
        j->fd[i] = -1;
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    snprintf(j->base_path, sizeof j->base_path, "%s/%s", dir, BASE_FILE);
    for (int i = 0; i < 2; i++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/" JOURNAL_FILE, dir, i);
        if ((j->fd[i] = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640)) < 0) {
            snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
            return STORE_ERROR;
        }
    }
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    j->locks_made = true;
    return STORE_OK;
}

/* Before the environment is opened: the base's meta pages written back into data.mdb (synced), so
 * that LMDB opens the base's tree. *base is its txn id, or 0 when there is no base (a new store, or
 * one from before the journal: then every commit in data.mdb was synced, and no record is needed). */
int lmdb_journal_restore(lmdb_store_t *s, uint64_t *base, char *err, size_t errlen)
{
    lmdb_journal_t *j = &s->journal;
    uint8_t *metas = NULL;
    uint32_t psize = 0;
    *base = 0;
    int rc = base_read(j, base, &metas, &psize);
    if (rc == ENOENT)
        return STORE_OK;
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", j->base_path,
                 rc == EBADMSG ? "damaged (bad length or checksum)" : strerror(rc));
        return STORE_ERROR;
    }
    /* Nobody else may have the environment open (a tool started beside the tallyd that crashed):
     * LMDB's lock file would keep the crashed process's transaction ids, and the tool's snapshot
     * would see its pages rewritten. LMDB holds a shared lock on lock.mdb's first byte while an
     * environment is open; taking it exclusively proves there is none (and is released at once:
     * closing any descriptor of the file drops this process's locks on it). */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/lock.mdb", j->dir);
    int lfd = open(path, O_RDWR | O_CLOEXEC);
    if (lfd >= 0) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        bool busy = fcntl(lfd, F_SETLK, &fl) != 0;
        close(lfd);
        if (busy) {
            snprintf(err, errlen,
                     "the store must recover from a crash, but another process still has it open (a tally "
                     "tool started beside the tallyd that stopped?): stop it, then start again");
            free(metas);
            return STORE_ERROR;
        }
    }
    snprintf(path, sizeof path, "%s/data.mdb", j->dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s names a state of %s, which cannot be opened: %s", j->base_path, path,
                 strerror(errno));
        free(metas);
        return STORE_ERROR;
    }
    rc = write_all(fd, metas, 2 * (size_t)psize, 0);
    if (rc == 0 && fdatasync(fd) != 0)
        rc = errno;
    close(fd);
    free(metas);
    if (rc != 0) {
        snprintf(err, errlen, "restoring the journal's base into %s: %s", path, strerror(rc));
        return STORE_ERROR;
    }
    return STORE_OK;
}

typedef struct {
    uint64_t txnid, order; /* order: journalrec_order */
    uint32_t part;
    uint8_t *ops;
    uint32_t len, nops;
} record_t;

static int record_cmp(const void *a, const void *b)
{
    uint64_t x = ((const record_t *)a)->order, y = ((const record_t *)b)->order;
    return x < y ? -1 : x > y;
}

/* The order of the last record a transaction can have: every record of it, or of one before it, is
 * at or below. */
static uint64_t order_after(uint64_t txnid)
{
    return txnid << 16 | (JOURNALREC_PARTS_MAX - 1);
}

/* Where a file's records end (at off, before the end of the file), whether a whole record later in
 * the journal's order than `after` (journalrec_order) still follows somewhere behind. Each append is synced before the
 * next is written, so a record cut short by a crash is the last of its generation, and what lies behind it is an older
 * generation's (all at or before the base). A later record behind the end means the bytes there were damaged in place
 * (a checksum, a length, a txn id): replaying up to them would silently drop acknowledged writes. Read in chunks,
 * headers found by their magic. Returns 0
 * (*later: that record's txn id, or 0), or an errno. */
static int damage_behind(int fd, off_t off, uint64_t after, uint64_t *later)
{
    struct stat st;
    *later = 0;
    if (fstat(fd, &st) != 0)
        return errno;
    uint8_t *buf = malloc(DAMAGE_SCAN_CHUNK);
    if (!buf)
        return ENOMEM;
    int rc = 0;
    /* chunks overlap by a header less one byte, so a header across two is seen whole in one */
    for (off_t at = off + 1; rc == 0 && !*later && at + JOURNALREC_HEADER_LEN <= st.st_size;
         at += DAMAGE_SCAN_CHUNK - (JOURNALREC_HEADER_LEN - 1)) {
        size_t len = (size_t)(st.st_size - at < DAMAGE_SCAN_CHUNK ? st.st_size - at : DAMAGE_SCAN_CHUNK);
        if ((rc = read_all(fd, buf, len, at)) != 0)
            break;
        for (size_t i = journalrec_find(buf, len, 0); i + JOURNALREC_HEADER_LEN <= len && !*later;
             i = journalrec_find(buf, len, i + 1)) {
            journalrec_head_t h;
            off_t pay = at + (off_t)i + JOURNALREC_HEADER_LEN;
            if (!journalrec_head_get(buf + i, &h) || journalrec_order(&h) <= after || h.len > st.st_size - pay)
                continue;
            uint8_t *p = malloc(h.len ? h.len : 1);
            if (!p) {
                rc = ENOMEM;
                break;
            }
            if ((rc = read_all(fd, p, h.len, pay)) == 0 && journalrec_crc(&h, p, h.len) == h.crc)
                *later = h.txnid;
            free(p);
        }
    }
    free(buf);
    return rc;
}

/* The valid records of one file after base, appended to *recs: a file is read from its start while
 * each record is whole, its checksum right and its id above the one before (what follows is an
 * older generation's, or a record cut short). An end that hides a later whole record behind it is
 * damage: EBADMSG, with where (*bad_off) and which record (*bad_later). */
static int file_records(int fd, uint64_t base, record_t **recs, size_t *n, size_t *cap, off_t *bad_off,
                        uint64_t *bad_later)
{
    off_t off = 0;
    uint64_t prev = 0;
    for (;;) {
        uint8_t head[JOURNALREC_HEADER_LEN];
        journalrec_head_t h;
        bool whole = read_all(fd, head, sizeof head, off) == 0 && journalrec_head_get(head, &h);
        record_t r = {0};
        if (whole)
            r = (record_t){
                .txnid = h.txnid, .order = journalrec_order(&h), .part = h.part, .len = h.len, .nops = h.nops};
        if (whole && !(r.ops = malloc(r.len ? r.len : 1)))
            return ENOMEM;
        if (whole && (read_all(fd, r.ops, r.len, off + (off_t)sizeof head) != 0 ||
                      journalrec_crc(&h, r.ops, r.len) != h.crc || r.order <= prev)) {
            free(r.ops); /* cut short, damaged, or an older generation's: the end */
            whole = false;
        }
        if (!whole) {
            int rc = damage_behind(fd, off, prev > order_after(base) ? prev : order_after(base), bad_later);
            *bad_off = off;
            return rc != 0 ? rc : *bad_later ? EBADMSG : 0;
        }
        prev = r.order;
        off += (off_t)(sizeof head + r.len);
        if (r.txnid <= base) {
            free(r.ops);
            continue;
        }
        if (*n == *cap) {
            size_t c = *cap ? 2 * *cap : 64;
            record_t *p = realloc(*recs, c * sizeof *p);
            if (!p) {
                free(r.ops);
                return ENOMEM;
            }
            *recs = p;
            *cap = c;
        }
        (*recs)[(*n)++] = r;
    }
}

static int replay_one(lmdb_store_t *s, MDB_txn *txn, const record_t *r, uint64_t *ops)
{
    const uint8_t *p = r->ops, *end = r->ops + r->len;
    journalrec_op_t op;
    uint32_t n = 0;
    int more;
    while ((more = journalrec_op_next(&p, end, &op)) == 1) {
        if (op.db >= s->journal.ndbs)
            return EBADMSG;
        MDB_val k = {op.klen, (void *)op.key}, v = {op.vlen, (void *)op.val};
        MDB_dbi db = s->journal.dbs[op.db];
        int rc = op.op == JOURNALREC_PUT   ? mdb_put(txn, db, &k, &v, 0)
                 : op.op == JOURNALREC_DEL ? mdb_del(txn, db, &k, NULL)
                                           : mdb_drop(txn, db, 0);
        if (rc != MDB_SUCCESS)
            return rc;
        n++;
    }
    *ops += n;
    return more == 0 && n == r->nops ? 0 : EBADMSG;
}

/* After the databases are opened, on the restored base (txn id base): every record after it, in
 * order, the records of one transaction (its batches: parts 0, 1, …) replayed as one transaction,
 * which must commit as the id they were recorded with — so after a replay the store's ids go on
 * from the last record's, and no record can ever be taken for a later one. They must follow on from
 * the base (base + 1, base + 2, …, each from part 0 without a gap): a gap means records were lost,
 * and the store refuses to open rather than serve a past that skips acknowledged writes. The
 * base's snapshot is held from here until the next base is written (lmdb_journal_start): a crash
 * in between finds the base's pages as they were, and replays again. */
int lmdb_journal_replay(lmdb_store_t *s, uint64_t base, char *err, size_t errlen)
{
    lmdb_journal_t *j = &s->journal;
    record_t *recs = NULL;
    size_t n = 0, cap = 0;
    uint64_t t0 = mono_ms(), ops = 0;
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &j->pin);
    if (rc != MDB_SUCCESS) {
        snprintf(err, errlen, "reading the store before the journal's replay: %s", mdb_strerror(rc));
        return STORE_ERROR;
    }
    off_t bad_off = 0;
    uint64_t bad_later = 0;
    int i = 0;
    for (; i < 2 && rc == 0; i++)
        rc = file_records(j->fd[i], base, &recs, &n, &cap, &bad_off, &bad_later);
    if (rc == EBADMSG) {
        snprintf(err, errlen,
                 "journal-%d is damaged at byte %lld, and the record of transaction %llu follows the damage: "
                 "refusing a store that would miss acknowledged writes",
                 i - 1, (long long)bad_off, (unsigned long long)bad_later);
        rc = -1;
    } else if (rc > 0 && rc != ENOMEM) {
        snprintf(err, errlen, "reading journal-%d: %s", i - 1, strerror(rc));
        rc = -1;
    }
    if (rc == 0 && n && !base) {
        snprintf(err, errlen, "the journal holds records but %s is missing", j->base_path);
        rc = -1;
    }
    if (n)
        qsort(recs, n, sizeof *recs, record_cmp);
    /* Unsynced commits, one sync at the end: a crash before it restores the base again (its pages are
     * pinned) and replays again. */
    if (rc == 0 && n)
        rc = mdb_env_set_flags(s->env, MDB_NOSYNC, 1);
    size_t txns = 0;
    for (size_t i = 0, end; i < n && rc == 0; i = end, txns++) {
        uint64_t want = base + 1 + txns;
        for (end = i; end < n && recs[end].txnid == recs[i].txnid && recs[end].part == end - i; end++)
            ;
        MDB_txn *txn = NULL;
        if (recs[i].txnid != want || recs[i].part != 0) {
            snprintf(err, errlen,
                     "the journal lacks transaction %llu (it goes on at %llu, part %u): refusing a store "
                     "that would miss acknowledged writes",
                     (unsigned long long)want, (unsigned long long)recs[i].txnid, recs[i].part);
            rc = -1;
        } else if (end < n && recs[end].txnid == recs[i].txnid) {
            snprintf(err, errlen,
                     "the journal lacks part %zu of transaction %llu (it goes on at part %u): refusing a store "
                     "that would miss acknowledged writes",
                     end - i, (unsigned long long)want, recs[end].part);
            rc = -1;
        } else if ((rc = mdb_txn_begin(s->env, NULL, 0, &txn)) != MDB_SUCCESS) {
            snprintf(err, errlen, "replaying the journal: %s", mdb_strerror(rc));
        } else if ((uint64_t)mdb_txn_id(txn) != want) {
            snprintf(err, errlen, "the journal does not follow the store: record %llu, next transaction %llu",
                     (unsigned long long)want, (unsigned long long)mdb_txn_id(txn));
            rc = -1;
        } else {
            size_t k = i;
            while (k < end && (rc = replay_one(s, txn, &recs[k], &ops)) == 0)
                k++;
            if (rc == 0) {
                rc = mdb_txn_commit(txn);
                txn = NULL; /* committed, or ended by its failed commit */
            }
            if (rc != 0)
                snprintf(err, errlen, "replaying journal record %llu part %u: %s", (unsigned long long)want,
                         k < end ? recs[k].part : 0,
                         rc == EBADMSG ? "malformed"
                         : rc > 0      ? strerror(rc)
                                       : mdb_strerror(rc));
        }
        if (txn && rc != 0)
            mdb_txn_abort(txn);
    }
    if (rc == 0 && n && (rc = mdb_env_sync(s->env, 1)) != 0)
        snprintf(err, errlen, "syncing the replayed journal: %s", mdb_strerror(rc));
    if (n)
        mdb_env_set_flags(s->env, MDB_NOSYNC, 0); /* the rest of the opening: synced by LMDB */
    for (size_t i = 0; i < n; i++)
        free(recs[i].ops);
    free(recs);
    if (rc == 0 && n)
        log_line("level=info event=journal-replayed records=%zu changes=%llu base=%llu ms=%llu transactions=%zu", n,
                 (unsigned long long)ops, (unsigned long long)base, (unsigned long long)(mono_ms() - t0), txns);
    if (rc == ENOMEM)
        snprintf(err, errlen, "reading the journal: out of memory");
    return rc == 0 ? STORE_OK : STORE_ERROR;
}

/* After the opening transaction (every commit so far synced by LMDB itself): its state made the
 * base, both files emptied (their records are in it), LMDB's syncs turned off, and the checkpoint
 * thread started. From here on every write transaction is recorded.
 *
 * On a full disk (no room for the new base) the start is deferred, and the store serves reads
 * while every write transaction is refused (lmdb_write_begin tries the start again): the base
 * before, if any, stays with its records and its snapshot (held since the replay), so a crash
 * meanwhile recovers as before. Returns STORE_FULL then (start_error set), STORE_ERROR on any
 * other failure. */
int lmdb_journal_start(lmdb_store_t *s, char *err, size_t errlen)
{
    lmdb_journal_t *j = &s->journal;
    MDB_stat st;
    MDB_txn *pin = NULL;
    int rc = mdb_env_stat(s->env, &st);
    if (rc == MDB_SUCCESS) {
        j->psize = st.ms_psize;
        if (!j->ck_metas)
            j->ck_metas = malloc(2 * (size_t)j->psize);
        rc = j->ck_metas ? rebase(s) : ENOMEM;
    }
    if (rc == MDB_SUCCESS && mdb_txn_begin(s->env, NULL, MDB_RDONLY, &pin) != MDB_SUCCESS)
        rc = EAGAIN;
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_flags(s->env, MDB_NOSYNC, 1);
    if (rc != MDB_SUCCESS) {
        if (pin)
            mdb_txn_abort(pin);
        bool full = rc == ENOSPC || rc == EDQUOT || rc == MDB_MAP_FULL;
        if (full && !atomic_load(&j->start_error))
            log_line("level=warn event=journal-start-deferred reason=\"%s\" (reads served; writes refused with 503 "
                     "until space frees, tried again with each write)",
                     rc > 0 ? strerror(rc) : mdb_strerror(rc));
        atomic_store(&j->start_error, rc == MDB_SUCCESS ? EIO : rc); /* never recording without a base */
        snprintf(err, errlen, "starting the journal: %s", rc > 0 ? strerror(rc) : mdb_strerror(rc));
        return full ? STORE_FULL : STORE_ERROR;
    }
    if (j->pin)
        mdb_txn_abort(j->pin); /* the old base's snapshot, held by the replay: the new base is on the disk */
    j->pin = pin;
    j->cur = 0;
    j->off = 0;
    j->last_start_ms = mono_ms();
    if (pthread_create(&j->thread, NULL, checkpoint_thread, s) != 0) {
        atomic_store(&j->start_error, EAGAIN);
        snprintf(err, errlen, "starting the journal's checkpoint thread failed");
        return STORE_ERROR;
    }
    j->thread_started = true;
    j->recording = true;
    if (atomic_exchange(&j->start_error, 0))
        log_line("level=info event=journal-started msg=\"space freed: writes accepted again\"");
    return STORE_OK;
}

/* Closing: the checkpoint under way finished, then a last one in line, so that a clean stop leaves
 * nothing to replay. Whatever fails here leaves the base and records as they were: still whole. */
void lmdb_journal_close(lmdb_store_t *s)
{
    lmdb_journal_t *j = &s->journal;
    if (j->thread_started) {
        pthread_mutex_lock(&j->lock);
        checkpoint_settled(j, 1);
        j->stop = true;
        pthread_cond_broadcast(&j->cond);
        pthread_mutex_unlock(&j->lock);
        pthread_join(j->thread, NULL);
        /* Synced as a whole, the store needs neither base nor records: a last base names its final
         * state (so that a crash while the rest goes loses nothing), then the records go, then the
         * base, and the next opening restores nothing: data.mdb stays what it is between two runs. */
        if (!j->ck_pending && !j->broken && rebase(s) == 0 && unlink(j->base_path) == 0)
            sync_dir(j->dir);
    }
    if (j->old_pin)
        mdb_txn_abort(j->old_pin);
    if (j->pin)
        mdb_txn_abort(j->pin);
    for (int i = 0; i < 2; i++)
        if (j->fd[i] >= 0)
            close(j->fd[i]);
    if (j->locks_made) {
        pthread_mutex_destroy(&j->lock);
        pthread_cond_destroy(&j->cond);
    }
    free(j->ops);
    free(j->ck_metas);
}
