import Foundation
import GRDB

extension TransferStore {
    /// The schema's migrations, in order, as named migrations of SQL text: a released migration never changes, new
    /// needs get new migrations (appended here).
    static let migrations: [(identifier: String, sql: String)] = [
        (
            "v1: batches and transfers",
            """
            CREATE TABLE batch (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                createdAt DOUBLE NOT NULL
            );
            CREATE TABLE transfer (
                id TEXT PRIMARY KEY NOT NULL,
                url TEXT NOT NULL,
                destinationKind TEXT NOT NULL,
                destinationPath TEXT NOT NULL,
                folder TEXT NOT NULL,
                nameComponents TEXT NOT NULL,
                usesContentDisposition BOOLEAN NOT NULL,
                conflictPolicy TEXT NOT NULL,
                headers TEXT NOT NULL,
                checksum TEXT,
                expectedSize INTEGER,
                computesSHA256 BOOLEAN NOT NULL,
                state TEXT NOT NULL,
                bytesOnDisk INTEGER NOT NULL DEFAULT 0,
                totalSize INTEGER,
                etag TEXT,
                lastModified TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                finalPath TEXT,
                finalSize INTEGER,
                finalModified DOUBLE,
                sha256 TEXT,
                errorCode TEXT,
                errorMessage TEXT,
                httpStatus INTEGER,
                updatedAt DOUBLE NOT NULL
            );
            CREATE TABLE batchItem (
                batchID INTEGER NOT NULL REFERENCES batch(id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                transferID TEXT NOT NULL REFERENCES transfer(id),
                PRIMARY KEY (batchID, position)
            );
            CREATE INDEX batchItemTransfer ON batchItem(transferID);
            """
        ),
        (
            "v2: leases",
            """
            ALTER TABLE transfer ADD COLUMN leaseOwner TEXT;
            ALTER TABLE transfer ADD COLUMN leaseExpires DOUBLE;
            """
        ),
        // JSON: {"kind":"download"}, or an upload's source and method, or a deletion's options.
        (
            "v3: uploads and deletions",
            #"ALTER TABLE transfer ADD COLUMN operation TEXT NOT NULL DEFAULT '{"kind":"download"}'"#
        ),
        // 0 while items may still be added (a batch fed from a stream); a process that stopped before the end of its
        // list leaves it 0, so the store knows it holds only part of that batch.
        ("v4: open batches", "ALTER TABLE batch ADD COLUMN listComplete INTEGER NOT NULL DEFAULT 1"),
        // A batch's items in one B-tree, keyed by batch and position, instead of three (the rows, their key, and the
        // index on the transfer, which only the forgetting of finished batches read): a row's insert took about a
        // third less of SQLite's time. No foreign key on the transfer either: checking it was a look-up per insert,
        // and without the index SQLite would have scanned every item for each transfer deleted.
        (
            "v5: batch entries",
            """
            CREATE TABLE batchEntry (
                batchID INTEGER NOT NULL REFERENCES batch(id) ON DELETE CASCADE,
                position INTEGER NOT NULL,
                transferID TEXT NOT NULL,
                PRIMARY KEY (batchID, position)
            ) WITHOUT ROWID;
            INSERT INTO batchEntry (batchID, position, transferID) SELECT batchID, position, transferID FROM batchItem;
            DROP TABLE batchItem;
            """
        ),
        // A bulk insert's 32 requests that share their batch's values as one row of `slice`, their identifiers in
        // `sliceEntry`, and each transaction's completions of a slice's requests as one row of `sliceResult` (see
        // Slices.swift).
        (
            "v6: slices",
            TransferStore.slicesSchema
        ),
    ]

    /// The migration after ``migrations``: the slices of "v6" written out as rows, one per transfer
    /// (``LegacySlices``), and their tables dropped.
    static let oneRowPerTransfer = "v7: one row per transfer"

    /// The schema: the named migrations of ``migrations`` and then ``oneRowPerTransfer``.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for (identifier, sql) in Self.migrations {
            migrator.registerMigration(identifier) { db in try db.execute(sql: sql) }
        }
        migrator.registerMigration(Self.oneRowPerTransfer) { db in
            try LegacySlices.expand(db)
            try db.execute(sql: "DROP TABLE sliceResult; DROP TABLE sliceEntry; DROP TABLE slice;")
        }
        return migrator
    }

    /// The tables of slices (see ``LegacySlices``), as migration "v6" made them.
    static let slicesSchema = """
        CREATE TABLE slice (
            id INTEGER PRIMARY KEY,
            batchID INTEGER NOT NULL REFERENCES batch(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            destinationKind TEXT NOT NULL,
            destinationPath TEXT NOT NULL,
            folder TEXT NOT NULL,
            usesContentDisposition BOOLEAN NOT NULL,
            conflictPolicy TEXT NOT NULL,
            headers TEXT NOT NULL,
            computesSHA256 BOOLEAN NOT NULL,
            operation TEXT NOT NULL,
            updatedAt DOUBLE NOT NULL,
            leaseOwner TEXT,
            leaseExpires DOUBLE,
            entries BLOB NOT NULL
        );
        CREATE INDEX sliceBatch ON slice(batchID);
        CREATE TABLE sliceEntry (
            id TEXT PRIMARY KEY NOT NULL,
            slice INTEGER NOT NULL,
            entry INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE sliceResult (
            slice INTEGER NOT NULL,
            updatedAt DOUBLE NOT NULL,
            leaseOwner TEXT,
            leaseExpires DOUBLE,
            records BLOB NOT NULL
        );
        CREATE INDEX sliceResultSlice ON sliceResult(slice);
        """
}
