/* lmdb_dirlock.c — the data directory: one process at a time on it (an exclusive lock on the
 * directory itself), and only a directory that is tally's (a marker file, checked before anything
 * is written into it). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/lmdb/lmdb_internal.h"

#define LEGACY_LOCK_FILE "tallyd.lock" /* what versions before the directory lock locked */
#define MARKER_FILE "TALLY_STORE"
#define MARKER_TEXT "tally store: lmdb, format 1\n"
#define DATA_FILE "data.mdb"
#define LMDB_LOCK_FILE "lock.mdb"

/* mkdir -p: creates dir and any missing parents. */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0750) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0750) != 0 && errno != EEXIST ? -1 : 0;
}

/* The directory this process holds the lock of (lmdb_lock_dir), if any. */
static bool held;
static dev_t held_dev;
static ino_t held_ino;

int lmdb_dir_owner(const char *dir, int *taken, char *err, size_t errlen)
{
    struct stat st;
    *taken = -1;
    if (held && stat(dir, &st) == 0 && st.st_dev == held_dev && st.st_ino == held_ino)
        return 1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open data directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return 0;
        snprintf(err, errlen, "cannot lock data directory %s: %s", dir, strerror(e));
        return -1;
    }
    *taken = fd;
    return 1;
}

/* The lock is a flock on the directory itself, opened O_RDONLY|O_DIRECTORY. A lock file inside it
 * (tallyd.lock, as before) can be deleted under a running server, and the next server then locks a
 * new file of the same name and both write; data.mdb or the marker can be unlinked too. A directory
 * that holds a store cannot be removed without removing the store, and taking the lock writes
 * nothing into it (the marker is checked before anything is written). An existing tallyd.lock is
 * locked as well, so that a tallyd of an earlier version (which locks only that file) and this one
 * never run on one directory together. */
int lmdb_lock_dir(const char *dir, char *err, size_t errlen)
{
    if (make_dirs(dir) != 0) {
        snprintf(err, errlen, "cannot create data directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open data directory %s: %s", dir, strerror(errno));
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, LEGACY_LOCK_FILE);
    int legacy = open(path, O_RDONLY | O_CLOEXEC); /* never created: only an earlier version's */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || (legacy >= 0 && flock(legacy, LOCK_EX | LOCK_NB) != 0)) {
        snprintf(err, errlen, "data directory %s is in use by another tallyd or tally (%s)", dir,
                 errno == EWOULDBLOCK ? "it holds the lock" : strerror(errno));
        close(fd);
        if (legacy >= 0)
            close(legacy);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) == 0) {
        held = true;
        held_dev = st.st_dev;
        held_ino = st.st_ino;
    }
    return fd; /* the legacy fd, if any, stays open (and locked) with it until the process exits */
}

/* A directory without a marker holding data.mdb: tally's only if it is an LMDB environment with
 * tally's meta database and its schema record. Opened read-only and without the lock file
 * (MDB_NOLOCK), so that neither data.mdb nor lock.mdb is written when it is not. */
static int legacy_store_check(const char *dir, char *err, size_t errlen)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi meta;
    MDB_val key = {6, "schema"}, val;
    int rc = mdb_env_create(&env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(env, MAX_DBS);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0640);
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc == MDB_SUCCESS)
        rc = mdb_dbi_open(txn, "meta", 0, &meta);
    if (rc == MDB_SUCCESS)
        rc = mdb_get(txn, meta, &key, &val);
    if (txn)
        mdb_txn_abort(txn);
    if (env)
        mdb_env_close(env);
    if (rc != MDB_SUCCESS)
        snprintf(err, errlen,
                 "%s holds a %s that is not a tally store (%s); tally opens an empty directory or its own store", dir,
                 DATA_FILE, mdb_strerror(rc));
    return rc == MDB_SUCCESS ? 0 : -1;
}

static int marker_write(const char *dir, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    size_t len = strlen(MARKER_TEXT);
    bool ok = fd >= 0 && write(fd, MARKER_TEXT, len) == (ssize_t)len && fsync(fd) == 0;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    int dfd = ok ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    ok = ok && dfd >= 0 && fsync(dfd) == 0; /* the marker's name is durable before the store is */
    saved = ok ? 0 : saved ? saved : errno;
    if (dfd >= 0)
        close(dfd);
    if (!ok)
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(saved));
    return ok ? 0 : -1;
}

int lmdb_dir_claim(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, MARKER_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[256];
        ssize_t n = read(fd, buf, sizeof buf);
        close(fd);
        if (n == (ssize_t)strlen(MARKER_TEXT) && memcmp(buf, MARKER_TEXT, (size_t)n) == 0)
            return 0;
        if (n != 0) {
            const char *nl = n > 0 ? memchr(buf, '\n', (size_t)n) : NULL;
            int shown = n < 0 ? 0 : nl ? (int)(nl - buf) : (int)n;
            snprintf(err, errlen, "%s is not a store this tally opens (%s says '%.*s'; this tally writes '%.*s')", dir,
                     MARKER_FILE, shown, buf, (int)strlen(MARKER_TEXT) - 1, MARKER_TEXT);
            return -1;
        }
        /* empty: a crash while it was written; the directory is judged again below */
    } else if (errno != ENOENT) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    bool has_data = false, has_lmdb_lock = false;
    char foreign[256] = "";
    for (struct dirent *e; !foreign[0] && (e = readdir(d));) {
        const char *name = e->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strcmp(name, MARKER_FILE) == 0 ||
            strcmp(name, LEGACY_LOCK_FILE) == 0 || lmdb_journal_owns(name))
            continue;
        if (strcmp(name, DATA_FILE) == 0)
            has_data = true;
        else if (strcmp(name, LMDB_LOCK_FILE) == 0)
            has_lmdb_lock = true;
        else
            snprintf(foreign, sizeof foreign, "%s", name);
    }
    closedir(d);
    if (!foreign[0] && has_lmdb_lock && !has_data)
        snprintf(foreign, sizeof foreign, "%s", LMDB_LOCK_FILE);
    if (foreign[0]) {
        snprintf(err, errlen,
                 "%s is not empty and is not a tally store (it holds '%s' and no %s); give tally an empty "
                 "directory or one of its stores",
                 dir, foreign, MARKER_FILE);
        return -1;
    }
    /* Empty, or a store of a version before the marker (data.mdb, lock.mdb, tallyd.lock). */
    if (has_data && legacy_store_check(dir, err, errlen) != 0)
        return -1;
    return marker_write(dir, path, err, errlen);
}
