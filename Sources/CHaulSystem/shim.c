#define _GNU_SOURCE
#include "CHaulSystem.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <linux/magic.h>
#include <sys/vfs.h>
#endif
#include <unistd.h>

int haul_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(RENAME_NOREPLACE)
    int result = renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
    if (result == 0 || (errno != EINVAL && errno != ENOSYS)) {
        return result;
    }
#elif defined(__APPLE__) && defined(RENAME_EXCL)
    int result = renamex_np(from, to, RENAME_EXCL);
    if (result == 0 || (errno != ENOTSUP && errno != EINVAL)) {
        return result;
    }
#endif
    errno = ENOTSUP;
    return -1;
}

int haul_open_unnamed(const char *dir, int mode) {
#if defined(__linux__) && defined(O_TMPFILE)
    return open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, (mode_t)mode);
#else
    (void)dir;
    (void)mode;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

#if defined(__linux__)
/// Whether this process may link a descriptor itself (AT_EMPTY_PATH) rather than its /proc path: cleared the first time
/// the system refuses while the /proc path works.
static atomic_int links_descriptors_directly = 1;

int haul_link_descriptor_through_proc(int fd, const char *path) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, link, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

int haul_link_descriptor(int fd, const char *path) {
    if (!atomic_load_explicit(&links_descriptors_directly, memory_order_relaxed)) {
        return haul_link_descriptor_through_proc(fd, path);
    }
    if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0) {
        return 0;
    }
    // Refused (ENOENT: a kernel before 6.10 without CAP_DAC_READ_SEARCH), or the folder is missing (ENOENT too): the
    // /proc path tells them apart. Any other error (EEXIST above all) is the answer.
    if (errno != ENOENT && errno != EINVAL && errno != EPERM) {
        return -1;
    }
    int refusal = errno;
    if (haul_link_descriptor_through_proc(fd, path) == 0) {
        atomic_store_explicit(&links_descriptors_directly, 0, memory_order_relaxed);
        return 0;
    }
    if (errno == ENOENT && access("/proc/self/fd", F_OK) != 0) {
        errno = refusal;
    }
    return -1;
}
#else
int haul_link_descriptor_through_proc(int fd, const char *path) {
    (void)fd;
    (void)path;
    errno = ENOTSUP;
    return -1;
}

int haul_link_descriptor(int fd, const char *path) { return haul_link_descriptor_through_proc(fd, path); }
#endif

int haul_reserve_descriptors(int count) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && (rlim_t)count > limit.rlim_cur) {
        count = (int)limit.rlim_cur;
    }
    if (count < 4) {
        return -1;
    }
    int source = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (source < 0) {
        return -1;
    }
    // The lowest free descriptor from the last slot on: never one in use.
    int last = fcntl(source, F_DUPFD_CLOEXEC, count - 1);
    close(source);
    if (last < 0) {
        return -1;
    }
    close(last);
    return count;
}

int haul_reserve_space(int fd, long long offset, long long length) {
#if defined(__linux__) && defined(FALLOC_FL_KEEP_SIZE)
    struct statfs system;
    struct stat status;
    if (fstatfs(fd, &system) != 0 || system.f_type == TMPFS_MAGIC || fstat(fd, &status) != 0) {
        return 1;
    }
    // What the file holds past `offset` already (a reservation an earlier attempt left) needs no more room.
    long long held = (long long)status.st_blocks * 512 - offset;
    long long needed = length - (held > 0 ? held : 0);
    if (needed > 0 && (unsigned long long)system.f_bavail * (unsigned long long)system.f_bsize
            < (unsigned long long)needed) {
        errno = ENOSPC;
        return -1;
    }
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length) == 0) {
        return 0;
    }
    // A reservation that fails keeps the blocks it got on ext4, up to a full disk: they are given back.
    int error = errno;
#if defined(FALLOC_FL_PUNCH_HOLE)
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
#endif
    errno = error;
    return -1;
#else
    (void)fd;
    (void)offset;
    (void)length;
    return 1;
#endif
}

int haul_terminal_size(int fd, int *columns, int *rows) {
    struct winsize size;
    if (!isatty(fd) || ioctl(fd, TIOCGWINSZ, &size) != 0) {
        return -1;
    }
    *columns = size.ws_col;
    *rows = size.ws_row;
    return 0;
}

int haul_sqlite_keep_wal_on_close(struct sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

int haul_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

