#ifndef C_HAUL_SYSTEM_H
#define C_HAUL_SYSTEM_H

/// Renames `from` to `to` unless `to` exists, in one atomic call: `renameat2(RENAME_NOREPLACE)` on Linux,
/// `renamex_np(RENAME_EXCL)` on Darwin. Returns 0, or -1 with errno set: EEXIST when `to` exists, ENOTSUP when the
/// system or file system cannot do it (the caller then falls back to link and unlink).
int haul_rename_noreplace(const char *from, const char *to);

/// Opens a new regular file without a name in the folder `dir`, for writing (Linux's `O_TMPFILE`, mode `mode` less
/// the umask): it is named by haul_link_descriptor, and vanishes with its last descriptor when it never is. Returns
/// the descriptor, or -1 with errno set: EOPNOTSUPP, EISDIR or EINVAL when the system or the folder's file system
/// cannot, ENOENT when the folder is missing.
int haul_open_unnamed(const char *dir, int mode);

/// Gives the file open on `fd` (opened by haul_open_unnamed) the name `path`, which must not exist: `linkat` of the
/// descriptor itself (AT_EMPTY_PATH: Linux 6.10 and later allow it for a descriptor the process opened, earlier ones
/// only with CAP_DAC_READ_SEARCH), else of its `/proc/self/fd/N` path (haul_link_descriptor_through_proc), which the
/// process then uses from that refusal on. Returns 0, or -1 with errno set: EEXIST when `path` exists, ENOENT when its
/// folder is missing.
int haul_link_descriptor(int fd, const char *path);

/// haul_link_descriptor through `/proc/self/fd/N` only (`linkat` with AT_SYMLINK_FOLLOW): for kernels that refuse
/// AT_EMPTY_PATH, and for tests. Returns 0, or -1 with errno set.
int haul_link_descriptor_through_proc(int fd, const char *path);

/// Grows the process's table of file descriptors to hold `count` of them (fewer when the descriptor limit is lower),
/// by duplicating a descriptor to the table's last slot and closing it again; nothing else changes. Returns the
/// number of slots reserved, or -1. Linux grows the table by doubling it when a descriptor past its end is opened,
/// and in a process with more than one thread each doubling waits for an RCU grace period, milliseconds during which
/// the thread opening the descriptor is stopped; a process with one thread grows it at no such cost.
int haul_reserve_descriptors(int count);

/// Reserves the disk blocks of the file open on `fd` from `offset` for `length` bytes without changing its size
/// (Linux's `fallocate` with FALLOC_FL_KEEP_SIZE), except on tmpfs, where reserving means allocating and zeroing the
/// memory pages that the writes then fill again. Asks for nothing when the file system has less room free than the
/// file still needs, and gives back what a failed reservation got (ext4 keeps it: a file larger than the free space
/// filled the disk). Returns 0 when it reserved them, 1 when it left them alone (tmpfs, or not Linux), or -1 with
/// errno set (ENOSPC or EDQUOT when there is not room enough, EOPNOTSUPP when the file system cannot reserve).
int haul_reserve_space(int fd, long long offset, long long length);

/// The size of the terminal on `fd`: its width in columns in `columns` and its height in rows in `rows` (0 when it
/// does not say). Returns 0, or -1 when `fd` is not a terminal (ioctl is variadic, which Swift cannot call).
int haul_terminal_size(int fd, int *columns, int *rows);

struct sqlite3;

/// Makes SQLite leave the write-ahead log in place when `db`, the last connection to its database, closes, instead of
/// copying it into the database and syncing both (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`; sqlite3_db_config is variadic).
/// Returns SQLite's result code.
int haul_sqlite_keep_wal_on_close(struct sqlite3 *db);

/// Turns off SQLite's memory statistics for the process (`SQLITE_CONFIG_MEMSTATUS`; sqlite3_config is variadic).
/// Returns SQLite's result code: SQLITE_MISUSE once SQLite has been initialized in the process.
int haul_sqlite_disable_memory_statistics(void);


#endif
