/* dirlock.c — one process at a time on a data directory: an exclusive lock on a file in it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

#define LOCK_FILE "tallyd.lock"

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

int store_lock_dir(const char *dir, char *err, size_t errlen)
{
    if (make_dirs(dir) != 0) {
        snprintf(err, errlen, "cannot create data directory %s: %s", dir, strerror(errno));
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "data directory %s is in use by another tallyd or tally (%s)", dir,
                 errno == EWOULDBLOCK ? "it holds the lock" : strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}
