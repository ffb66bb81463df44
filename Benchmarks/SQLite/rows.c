/*
 * What SQLite itself costs for the store's rows, without any code of Haul's around it (docs/benchmarks.md,
 * twenty-third session): 2,048 rows of the `transfer` table inserted 32 to a transaction, then each completed by the
 * store's publishing UPDATE, 8 to a transaction. Count instructions, not time:
 *
 *     gcc -O2 -o /tmp/rows Benchmarks/SQLite/rows.c -lsqlite3
 *     valgrind --tool=callgrind --callgrind-out-file=/dev/null /tmp/rows setup     # opening and schema alone
 *     valgrind --tool=callgrind --callgrind-out-file=/dev/null /tmp/rows inserts   # and the inserts
 *     valgrind --tool=callgrind --callgrind-out-file=/dev/null /tmp/rows           # inserts and completions
 *
 * Variants, as further arguments: `narrow` (the seven columns a batch shares left out of the row, as a table of their
 * own would), `from` (a transaction's completions as one UPDATE ... FROM (VALUES ...)), `nomutex` (the connection in
 * multi-thread mode), `nosecure` (PRAGMA secure_delete = OFF), `norowid` (the table WITHOUT ROWID, keyed by its
 * identifier alone), `byrowid` (each completion finds its row by rowid, as a store that remembered each insert's
 * rowid could, instead of through the identifier's index), `intkey` (the identifier's 64-bit number is the row's
 * INTEGER PRIMARY KEY, its rowid: no text key and no index beside the table; inserts and completions bind the number),
 * `prefill` (the planned final path, a size and a time written with the row, so that the completion grows it less),
 * `split` (what changes while a file runs, state to lease, in a table `status` of its own keyed by the identifier; the
 * request's columns in `transfer`; with `norowid` too, `status` is WITHOUT ROWID), `journal` (each completion appended
 * to a narrow table `completion` without a key or an index; the transfer rows are left as inserted), `entries` (each
 * row's batch entry too, as the store writes it: `batchEntry`, keyed by batch and position, WITHOUT ROWID, 32 rows
 * to a statement with the batch's number bound once), `packed` (the twelve columns a request fixes, URL to operation,
 * as one blob of texts each after its length: the row has 18 columns instead of 29).
 * The database is /dev/shm/haul-rows.db. Not part of `swift test`.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROWS 2048
#define PER_INSERT 32
#define PER_COMPLETION 8
#define FOLDER "/dev/shm/o"
#define MINE "(leaseOwner = ? OR ((leaseOwner IS NULL OR leaseExpires < ?) AND state != 'completed'))"

static const char *wide_schema =
    "CREATE TABLE transfer (id TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL, destinationKind TEXT NOT NULL,"
    " destinationPath TEXT NOT NULL, folder TEXT NOT NULL, nameComponents TEXT NOT NULL,"
    " usesContentDisposition BOOLEAN NOT NULL, conflictPolicy TEXT NOT NULL, headers TEXT NOT NULL, checksum TEXT,"
    " expectedSize INTEGER, computesSHA256 BOOLEAN NOT NULL, state TEXT NOT NULL,"
    " bytesOnDisk INTEGER NOT NULL DEFAULT 0, totalSize INTEGER, etag TEXT, lastModified TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, finalPath TEXT, finalSize INTEGER, finalModified DOUBLE, sha256 TEXT,"
    " errorCode TEXT, errorMessage TEXT, httpStatus INTEGER, updatedAt DOUBLE NOT NULL, leaseOwner TEXT,"
    " leaseExpires DOUBLE, operation TEXT NOT NULL DEFAULT '{\"kind\":\"download\"}');";
static const char *wide_insert =
    "INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents, usesContentDisposition,"
    " conflictPolicy, headers, computesSHA256, state, updatedAt, leaseOwner, leaseExpires, operation)"
    " VALUES (?, ?, 'folder', '" FOLDER "', '" FOLDER "', ?, 0, 'rename', '[]', 0, 'waiting', 1.0, ?, 2.0,"
    " '{\"kind\":\"download\"}')";
static const char *prefill_insert =
    "INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents, usesContentDisposition,"
    " conflictPolicy, headers, computesSHA256, state, updatedAt, leaseOwner, leaseExpires, operation, finalPath,"
    " finalSize, finalModified)"
    " VALUES (?, ?, 'folder', '" FOLDER "', '" FOLDER "', ?, 0, 'rename', '[]', 0, 'waiting', 1.0, ?, 2.0,"
    " '{\"kind\":\"download\"}', ?, 99999, 1.25)";
static const char *split_schema =
    "CREATE TABLE transfer (id TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL, destinationKind TEXT NOT NULL,"
    " destinationPath TEXT NOT NULL, folder TEXT NOT NULL, nameComponents TEXT NOT NULL,"
    " usesContentDisposition BOOLEAN NOT NULL, conflictPolicy TEXT NOT NULL, headers TEXT NOT NULL, checksum TEXT,"
    " expectedSize INTEGER, computesSHA256 BOOLEAN NOT NULL,"
    " operation TEXT NOT NULL DEFAULT '{\"kind\":\"download\"}');"
    "CREATE TABLE status (id TEXT PRIMARY KEY NOT NULL, state TEXT NOT NULL,"
    " bytesOnDisk INTEGER NOT NULL DEFAULT 0, totalSize INTEGER, etag TEXT, lastModified TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, finalPath TEXT, finalSize INTEGER, finalModified DOUBLE, sha256 TEXT,"
    " errorCode TEXT, errorMessage TEXT, httpStatus INTEGER, updatedAt DOUBLE NOT NULL, leaseOwner TEXT,"
    " leaseExpires DOUBLE);";
static const char *split_insert =
    "INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents, usesContentDisposition,"
    " conflictPolicy, headers, computesSHA256, operation)"
    " VALUES (?, ?, 'folder', '" FOLDER "', '" FOLDER "', ?, 0, 'rename', '[]', 0, '{\"kind\":\"download\"}')";
static const char *split_status_insert =
    "INSERT INTO status (id, state, updatedAt, leaseOwner, leaseExpires) VALUES (?, 'waiting', 1.0, ?, 2.0)";
static const char *split_completion =
    "UPDATE status SET state = 'completed', bytesOnDisk = ?, totalSize = ?, finalPath = ?, finalSize = ?,"
    " finalModified = ?, sha256 = ?, errorCode = NULL, errorMessage = NULL, httpStatus = NULL, updatedAt = ?,"
    " leaseOwner = ?, leaseExpires = ? WHERE id = ? AND " MINE;
static const char *journal_schema =
    "CREATE TABLE completion (transferID TEXT NOT NULL, finalPath TEXT NOT NULL, size INTEGER NOT NULL,"
    " modified DOUBLE, sha256 TEXT, updatedAt DOUBLE NOT NULL, leaseOwner TEXT, leaseExpires DOUBLE)";
static const char *entries_schema =
    "CREATE TABLE batchEntry (batchID INTEGER NOT NULL, position INTEGER NOT NULL, transferID TEXT NOT NULL,"
    " PRIMARY KEY (batchID, position)) WITHOUT ROWID";
static const char *journal_completion =
    "INSERT INTO completion (size, finalPath, modified, sha256, updatedAt, leaseOwner, leaseExpires, transferID)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
static const char *narrow_schema =
    "CREATE TABLE transfer (id TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL, profile INTEGER NOT NULL,"
    " destinationPath TEXT, nameComponents TEXT NOT NULL, checksum TEXT, expectedSize INTEGER, state TEXT NOT NULL,"
    " bytesOnDisk INTEGER NOT NULL DEFAULT 0, totalSize INTEGER, etag TEXT, lastModified TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, finalPath TEXT, finalSize INTEGER, finalModified DOUBLE, sha256 TEXT,"
    " errorCode TEXT, errorMessage TEXT, httpStatus INTEGER, updatedAt DOUBLE NOT NULL, leaseOwner TEXT,"
    " leaseExpires DOUBLE);";
static const char *narrow_insert =
    "INSERT INTO transfer (id, url, profile, nameComponents, state, updatedAt, leaseOwner, leaseExpires)"
    " VALUES (?, ?, 1, ?, 'waiting', 1.0, ?, 2.0)";
static const char *packed_schema =
    "CREATE TABLE transfer (id TEXT PRIMARY KEY NOT NULL, request BLOB NOT NULL, state TEXT NOT NULL,"
    " bytesOnDisk INTEGER NOT NULL DEFAULT 0, totalSize INTEGER, etag TEXT, lastModified TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0, finalPath TEXT, finalSize INTEGER, finalModified DOUBLE, sha256 TEXT,"
    " errorCode TEXT, errorMessage TEXT, httpStatus INTEGER, updatedAt DOUBLE NOT NULL, leaseOwner TEXT,"
    " leaseExpires DOUBLE);";
static const char *packed_insert =
    "INSERT INTO transfer (id, request, state, updatedAt, leaseOwner, leaseExpires)"
    " VALUES (?, ?, 'waiting', 1.0, ?, 2.0)";
static const char *completion =
    "UPDATE transfer SET state = 'completed', bytesOnDisk = ?, totalSize = ?, finalPath = ?, finalSize = ?,"
    " finalModified = ?, sha256 = ?, errorCode = NULL, errorMessage = NULL, httpStatus = NULL, updatedAt = ?,"
    " leaseOwner = ?, leaseExpires = ? WHERE id = ? AND " MINE;
static const char *completion_by_rowid =
    "UPDATE transfer SET state = 'completed', bytesOnDisk = ?, totalSize = ?, finalPath = ?, finalSize = ?,"
    " finalModified = ?, sha256 = ?, errorCode = NULL, errorMessage = NULL, httpStatus = NULL, updatedAt = ?,"
    " leaseOwner = ?, leaseExpires = ? WHERE rowid = ? AND " MINE;
static const char *owner = "vm/18121/D0F95BF7-B4EF-42B2-88D8-D233940FAE26";

static int has(int argc, char **argv, const char *word) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], word) == 0) return 1;
    return 0;
}

static void check(int code, sqlite3 *db) {
    if (code != SQLITE_OK && code != SQLITE_DONE) {
        fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
}

int main(int argc, char **argv) {
    int narrow = has(argc, argv, "narrow"), from = has(argc, argv, "from"), byrowid = has(argc, argv, "byrowid");
    int intkey = has(argc, argv, "intkey"), prefill = has(argc, argv, "prefill"), split = has(argc, argv, "split");
    int journal = has(argc, argv, "journal"), entries = has(argc, argv, "entries");
    int packed = has(argc, argv, "packed");
    unlink("/dev/shm/haul-rows.db");
    unlink("/dev/shm/haul-rows.db-wal");
    unlink("/dev/shm/haul-rows.db-shm");
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);  // as the haul command sets it
    sqlite3 *db;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | (has(argc, argv, "nomutex") ? SQLITE_OPEN_NOMUTEX : 0);
    check(sqlite3_open_v2("/dev/shm/haul-rows.db", &db, flags, NULL), db);
    check(sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;",
                       NULL, NULL, NULL), db);
    if (has(argc, argv, "nosecure")) check(sqlite3_exec(db, "PRAGMA secure_delete = OFF", NULL, NULL, NULL), db);
    char schema[4096];
    snprintf(schema, sizeof schema, "%s", split ? split_schema : packed ? packed_schema : narrow ? narrow_schema : wide_schema);
    if (has(argc, argv, "norowid")) strcpy(schema + strlen(schema) - 1, " WITHOUT ROWID;");
    if (intkey) {
        // "id TEXT PRIMARY KEY NOT NULL" becomes "id INTEGER PRIMARY KEY": the rowid itself.
        const char *text_key = "id TEXT PRIMARY KEY NOT NULL", *integer_key = "id INTEGER PRIMARY KEY";
        char *key = strstr(schema, text_key);
        memmove(key + strlen(integer_key), key + strlen(text_key), strlen(key + strlen(text_key)) + 1);
        memcpy(key, integer_key, strlen(integer_key));
    }
    check(sqlite3_exec(db, schema, NULL, NULL, NULL), db);
    if (journal) check(sqlite3_exec(db, journal_schema, NULL, NULL, NULL), db);
    sqlite3_stmt *entry = NULL;
    if (entries) {
        check(sqlite3_exec(db, entries_schema, NULL, NULL, NULL), db);
        char sql[4096] = "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES ";
        for (int k = 0; k < PER_INSERT; k++) {
            char values[64];
            snprintf(values, sizeof values, "%s(?1, ?%d, ?%d)", k ? ", " : "", 2 * k + 2, 2 * k + 3);
            strcat(sql, values);
        }
        check(sqlite3_prepare_v2(db, sql, -1, &entry, NULL), db);
    }

    static char ids[ROWS][17];
    srand(1);
    for (int i = 0; i < ROWS; i++) snprintf(ids[i], sizeof ids[i], "%08x%08x", rand(), rand());

    if (has(argc, argv, "setup")) return 0;  // the opening and the schema alone, to subtract

    sqlite3_stmt *insert, *status_insert = NULL;
    const char *insert_sql = split ? split_insert : packed ? packed_insert : prefill ? prefill_insert : narrow ? narrow_insert : wide_insert;
    check(sqlite3_prepare_v2(db, insert_sql, -1, &insert, NULL), db);
    if (split) check(sqlite3_prepare_v2(db, split_status_insert, -1, &status_insert, NULL), db);
    for (int i = 0; i < ROWS; i += PER_INSERT) {
        check(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), db);
        for (int k = i; k < i + PER_INSERT; k++) {
            char url[64], name[32];
            snprintf(url, sizeof url, "http://127.0.0.1:18431/small/f%06d.bin", k);
            snprintf(name, sizeof name, "[\"f%06d.bin\"]", k);
            if (intkey) sqlite3_bind_int64(insert, 1, (sqlite3_int64)strtoull(ids[k], NULL, 16));
            else sqlite3_bind_text(insert, 1, ids[k], 16, SQLITE_STATIC);
            if (packed) {
                // The request's columns as one blob: each text with its length before it, as the store would pack them.
                char blob[512];
                int n = snprintf(blob, sizeof blob, "%zu%s6folder%zu%s%zu%s%zu%s06rename2[]0%s", strlen(url), url,
                                 strlen(FOLDER), FOLDER, strlen(FOLDER), FOLDER, strlen(name), name,
                                 "{\"kind\":\"download\"}");
                sqlite3_bind_blob(insert, 2, blob, n, SQLITE_TRANSIENT);
                sqlite3_bind_text(insert, 3, owner, -1, SQLITE_STATIC);
                check(sqlite3_step(insert), db);
                sqlite3_reset(insert);
                continue;
            }
            sqlite3_bind_text(insert, 2, url, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(insert, 3, name, -1, SQLITE_TRANSIENT);
            if (split) {
                // The lease is the status row's.
                sqlite3_bind_text(status_insert, 1, ids[k], 16, SQLITE_STATIC);
                sqlite3_bind_text(status_insert, 2, owner, -1, SQLITE_STATIC);
                check(sqlite3_step(status_insert), db);
                sqlite3_reset(status_insert);
            } else {
                sqlite3_bind_text(insert, 4, owner, -1, SQLITE_STATIC);
            }
            if (prefill) {
                char path[128];
                snprintf(path, sizeof path, "%s/f%06d.bin", FOLDER, k);
                sqlite3_bind_text(insert, 5, path, -1, SQLITE_TRANSIENT);
            }
            check(sqlite3_step(insert), db);
            sqlite3_reset(insert);
        }
        if (entries) {
            sqlite3_bind_int64(entry, 1, 1);
            for (int k = 0; k < PER_INSERT; k++) {
                sqlite3_bind_int64(entry, 2 * k + 2, i + k);
                sqlite3_bind_text(entry, 2 * k + 3, ids[i + k], 16, SQLITE_STATIC);
            }
            check(sqlite3_step(entry), db);
            sqlite3_reset(entry);
        }
        check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db);
    }
    if (has(argc, argv, "inserts")) return 0;

    sqlite3_stmt *update;
    if (from) {
        char sql[4096] = "WITH v(id, b, t, p, s, m, h, u, o, e) AS (VALUES ";
        for (int k = 0; k < PER_COMPLETION; k++) strcat(sql, k ? ", (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" : "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        strcat(sql, ") UPDATE transfer SET state = 'completed', bytesOnDisk = v.b, totalSize = v.t, finalPath = v.p,"
                    " finalSize = v.s, finalModified = v.m, sha256 = v.h, errorCode = NULL, errorMessage = NULL,"
                    " httpStatus = NULL, updatedAt = v.u, leaseOwner = v.o, leaseExpires = v.e FROM v"
                    " WHERE transfer.id = v.id AND (transfer.leaseOwner = ? OR ((transfer.leaseOwner IS NULL"
                    " OR transfer.leaseExpires < ?) AND transfer.state != 'completed'))");
        check(sqlite3_prepare_v2(db, sql, -1, &update, NULL), db);
    } else {
        const char *sql = journal ? journal_completion
                          : split ? split_completion
                          : byrowid ? completion_by_rowid
                          : completion;
        check(sqlite3_prepare_v2(db, sql, -1, &update, NULL), db);
    }
    int changed = 0;
    for (int i = 0; i < ROWS; i += PER_COMPLETION) {
        check(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), db);
        int c = 1;
        for (int k = i; k < i + PER_COMPLETION; k++) {
            char path[128];
            snprintf(path, sizeof path, "%s/f%06d.bin", FOLDER, k);
            if (journal) {
                sqlite3_bind_int64(update, 1, 16384);
                sqlite3_bind_text(update, 2, path, -1, SQLITE_TRANSIENT);
                sqlite3_bind_double(update, 3, 1.5e9);
                sqlite3_bind_null(update, 4);
                sqlite3_bind_double(update, 5, 1.6e9);
                sqlite3_bind_text(update, 6, owner, -1, SQLITE_STATIC);
                sqlite3_bind_double(update, 7, 1.7e9);
                sqlite3_bind_text(update, 8, ids[k], 16, SQLITE_STATIC);
                check(sqlite3_step(update), db);
                changed += sqlite3_changes(db);
                sqlite3_reset(update);
                continue;
            }
            if (from) sqlite3_bind_text(update, c++, ids[k], 16, SQLITE_STATIC);
            sqlite3_bind_int64(update, c++, 16384);
            sqlite3_bind_int64(update, c++, 16384);
            sqlite3_bind_text(update, c++, path, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(update, c++, 16384);
            sqlite3_bind_double(update, c++, 1.5e9);
            sqlite3_bind_null(update, c++);
            sqlite3_bind_double(update, c++, 1.6e9);
            sqlite3_bind_text(update, c++, owner, -1, SQLITE_STATIC);
            sqlite3_bind_double(update, c++, 1.7e9);
            if (!from) {
                // Rows were inserted in order into an empty table: row k has rowid k + 1.
                if (byrowid) sqlite3_bind_int64(update, c++, k + 1);
                else if (intkey) sqlite3_bind_int64(update, c++, (sqlite3_int64)strtoull(ids[k], NULL, 16));
                else sqlite3_bind_text(update, c++, ids[k], 16, SQLITE_STATIC);
                sqlite3_bind_text(update, c++, owner, -1, SQLITE_STATIC);
                sqlite3_bind_double(update, c++, 1.6e9);
                check(sqlite3_step(update), db);
                changed += sqlite3_changes(db);
                sqlite3_reset(update);
                c = 1;
            }
        }
        if (from) {
            sqlite3_bind_text(update, c++, owner, -1, SQLITE_STATIC);
            sqlite3_bind_double(update, c++, 1.6e9);
            check(sqlite3_step(update), db);
            changed += sqlite3_changes(db);
            sqlite3_reset(update);
        }
        check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db);
    }
    if (changed != ROWS) {
        fprintf(stderr, "completed %d rows of %d\n", changed, ROWS);
        return 1;
    }
    return 0;
}
