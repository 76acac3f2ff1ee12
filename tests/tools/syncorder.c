/* syncorder.c — test-only LD_PRELOAD shim: records, in one global order, each request read from
 * a socket, each response written to one, each fdatasync, and among them those of the store's
 * journal files (journal-0, journal-1: the commit point, JB/JE), so that a test can prove every 2xx
 * answer left only after a journal sync that began after its request arrived. Writes through an
 * O_DSYNC descriptor are recorded too (MB/ME). Log: SYNCORDER_LOG (one line per event). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536

static atomic_ulong seq;
static int log_fd = -1;
static _Atomic unsigned char fd_kind[MAX_FDS]; /* 0 unknown, 1 socket, 2 other, 3 O_DSYNC file, 4 journal */

static void log_line(const char *fmt, ...)
{
    if (log_fd < 0)
        return;
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        syscall(SYS_write, log_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

__attribute__((constructor)) static void syncorder_init(void)
{
    const char *path = getenv("SYNCORDER_LOG");
    if (path)
        log_fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static unsigned char kind_of(int fd)
{
    if (fd < 0 || fd >= MAX_FDS)
        return 2;
    unsigned char k = fd_kind[fd];
    if (k == 0) {
        struct stat st;
        k = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? 1 : 2;
        fd_kind[fd] = k;
    }
    return k;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static int note_open(int fd, const char *path, int flags)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    bool journal = strcmp(base, "journal-0") == 0 || strcmp(base, "journal-1") == 0;
    if (fd >= 0 && fd < MAX_FDS)
        fd_kind[fd] = journal ? 4 : (flags & (O_DSYNC | O_SYNC)) ? 3 : 0;
    return fd;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return note_open(REAL(open)(path, flags, mode), path, flags);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & O_CREAT) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return note_open(REAL(open64)(path, flags, mode), path, flags);
}

int close(int fd)
{
    if (fd >= 0 && fd < MAX_FDS)
        fd_kind[fd] = 0;
    return REAL(close)(fd);
}

int fdatasync(int fd)
{
    bool journal = kind_of(fd) == 4;
    log_line("%s %lu\n", journal ? "JB" : "SB", atomic_fetch_add(&seq, 1));
    int rc = REAL(fdatasync)(fd);
    log_line("%s %lu\n", journal ? "JE" : "SE", atomic_fetch_add(&seq, 1));
    return rc;
}

static ssize_t meta_write(int fd, ssize_t (*real)(int, const void *, size_t, off_t), const void *buf, size_t n,
                          off_t off)
{
    bool meta = kind_of(fd) == 3;
    if (meta)
        log_line("MB %lu\n", atomic_fetch_add(&seq, 1));
    ssize_t rc = real(fd, buf, n, off);
    if (meta)
        log_line("ME %lu\n", atomic_fetch_add(&seq, 1));
    return rc;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return meta_write(fd, REAL(pwrite), buf, n, off);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return meta_write(fd, REAL(pwrite64), buf, n, off);
}

/* A request starts with its method; a response with its status line. */
static void note_in(int fd, const void *buf, ssize_t n)
{
    if (n >= 4 && kind_of(fd) == 1)
        log_line("R %d %lu %.6s\n", fd, atomic_fetch_add(&seq, 1), (const char *)buf);
}

/* W fd seq status changed: "c" when the body says "changed":true, "n" for false, "-" otherwise. */
static void note_out(int fd, const struct iovec *iov, int cnt)
{
    if (cnt < 1 || iov[0].iov_len < 12 || kind_of(fd) != 1 || memcmp(iov[0].iov_base, "HTTP/1.1 ", 9) != 0)
        return;
    char changed = '-';
    for (int i = 0; i < cnt && changed == '-'; i++) {
        if (memmem(iov[i].iov_base, iov[i].iov_len, "\"changed\":true", 14))
            changed = 'c';
        else if (memmem(iov[i].iov_base, iov[i].iov_len, "\"changed\":false", 15))
            changed = 'n';
    }
    log_line("W %d %lu %.3s %c\n", fd, atomic_fetch_add(&seq, 1), (const char *)iov[0].iov_base + 9, changed);
}

ssize_t read(int fd, void *buf, size_t n)
{
    ssize_t rc = REAL(read)(fd, buf, n);
    note_in(fd, buf, rc);
    return rc;
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    ssize_t rc = REAL(recv)(fd, buf, n, flags);
    note_in(fd, buf, rc);
    return rc;
}

/* The sequence number is taken before the bytes leave, so "W" precedes the client seeing them. */
ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    note_out(fd, iov, cnt);
    return REAL(writev)(fd, iov, cnt);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct iovec one = {(void *)buf, n};
    note_out(fd, &one, 1);
    return REAL(write)(fd, buf, n);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    note_out(fd, msg->msg_iov, (int)msg->msg_iovlen);
    return REAL(sendmsg)(fd, msg, flags);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    struct iovec one = {(void *)buf, n};
    note_out(fd, &one, 1);
    return REAL(send)(fd, buf, n, flags);
}
