import CHaulSystem
import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers

/// The persistent queue: batches and their transfers in SQLite, so that a batch outlives the process that started
/// it. A manager given a store records every request, state change, validator and checkpoint in it; a later manager
/// on the same store resumes partial files with a validated `Range` request and skips files already completed.
///
/// A file store uses SQLite's write-ahead log, so several processes can share it: readers never block the writer.
/// Within a process, one store's reads and writes take turns on one connection (GRDB's `DatabaseQueue`): the
/// manager's reads are few and short.
public final class TransferStore: Sendable {
    let database: any DatabaseWriter
    /// The requests this process's managers sliced (see Slices.swift) and still find in their slices: where each is,
    /// so that its completion goes there without a look-up. Only an optimisation: a completion not found here is
    /// recorded as a row's, its row written out first when a slice holds it.
    let ownSliceEntries = NIOLockedValueBox<[TransferID: OwnSliceEntry]>([:])
    /// Whether the store holds no transfers for certain: it was created when it was opened (no file there, or in
    /// memory) and nothing has written one through it since. A manager then knows it holds none of its requests
    /// without reading it, on the way to its first request (rows another process adds meanwhile are that process's
    /// business: leases keep the two apart, as for rows added after a manager has looked).
    var holdsNoTransfers: Bool { self.createdEmpty.withLockedValue { $0 } }
    private let createdEmpty: NIOLockedValueBox<Bool>

    /// Called before operations are written: the store may hold transfers from then on.
    func willWriteTransfers() {
        self.createdEmpty.withLockedValue { $0 = false }
    }

    /// Opens (creating it and its folders) the store at `path`, and brings its schema up to date.
    ///
    /// - Throws: ``HaulError/Code/fileSystem`` when its folder cannot be made; SQLite's error when the file cannot be
    ///   opened as a database.
    public init(path: URL) throws {
        try Folders.make(path.deletingLastPathComponent().path)
        let isNew = !FileManager.default.fileExists(atPath: path.path)
        self.createdEmpty = NIOLockedValueBox(isNew)
        // Best effort: when it fails (another process created the file first, or is migrating it), the database is
        // opened (or created) and migrated below as any other. When it succeeds, the file holds the current schema
        // and the log, and records every migration as applied.
        let created = isNew && Self.createUnsynced(path.path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            // NORMAL is durable across a killed process in WAL mode; only a power loss may lose the last commits.
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // The write-ahead log, kept in the file: a store made by Haul has it from its creation (which also leaves
            // the log itself in place); a file made otherwise is switched to it.
            if !created, try String.fetchOne(db, sql: "PRAGMA journal_mode") != "wal" {
                try db.execute(sql: "PRAGMA journal_mode = WAL")
            }
            // A statement that changes many rows inside a transaction (a batch's bulk insert) journals the pages it
            // changes; past 64 KiB, SQLite spilled that journal into a file under /var/tmp (2,000 URLs: 558 pages
            // written there and deleted). In memory it costs at most what one bulk insert changes.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            // The log is copied into the database when it passes this many pages (16 MiB), not SQLite's 1,000: each copy
            // rewrites the pages a batch changes in every transaction.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.checkpointPages)")
            // Closing leaves the write-ahead log for the next process to read, instead of copying it into the database and
            // syncing both: that sync waits for the downloaded files' dirty data. What a power loss may lose is what NORMAL
            // already allows (the files are not synced either).
            let code = haul_sqlite_keep_wal_on_close(db.sqliteConnection)
            guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code)) }
        }
        self.database =
            created
            ? try DatabaseQueue(path: path.path, configuration: configuration)
            : try Self.openMigrated(path: path.path, configuration: configuration)
    }

    /// Creates a new database file in write-ahead-log mode without syncing it, so that opening it finds the log
    /// in place and syncs nothing either: a sync of a new store waits for the dirty data of other files. Without them, a
    /// power loss in the store's first milliseconds can leave a file that is not a database, and nothing else: it holds
    /// nothing yet. A killed process loses nothing (the data is in the operating system's hands).
    ///
    /// The file is made with its schema (``createdSchema``), in the transaction that puts its log in place: GRDB's
    /// migrator then finds every migration applied.
    /// - Returns: whether it created the file (`false` when it exists already, or SQLite failed).
    static func createUnsynced(_ path: String) -> Bool {
        haul_sqlite_create_unsynced(path, Self.createdSchema) == SQLITE_OK
    }

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

    /// The tables of slices (see Slices.swift), as migration "v6" made them and a new store has them.
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

    /// The schema every migration of ``migrations`` leaves, written directly: what a new store is made with. A test
    /// checks that it has the same tables, columns, keys and indexes as the migrations make: a new migration changes
    /// it too.
    static let currentSchema = """
        CREATE TABLE batch (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            createdAt DOUBLE NOT NULL,
            listComplete INTEGER NOT NULL DEFAULT 1
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
            updatedAt DOUBLE NOT NULL,
            leaseOwner TEXT,
            leaseExpires DOUBLE,
            operation TEXT NOT NULL DEFAULT '{"kind":"download"}'
        );
        CREATE TABLE batchEntry (
            batchID INTEGER NOT NULL REFERENCES batch(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            transferID TEXT NOT NULL,
            PRIMARY KEY (batchID, position)
        ) WITHOUT ROWID;
        \(TransferStore.slicesSchema)
        """

    /// A new store's schema in one transaction: ``currentSchema``, and GRDB's table of applied migrations with each
    /// of ``migrations`` in it, as GRDB records them (its migrator then finds nothing to do).
    static let createdSchema: String = {
        // Quotes doubled character by character, without bridging each name to `NSString`.
        let names = TransferStore.migrations.map { migration in
            "('" + migration.identifier.map { $0 == "'" ? "''" : String($0) }.joined() + "')"
        }
        return "BEGIN IMMEDIATE;\n" + TransferStore.currentSchema + "\n"
            + "CREATE TABLE IF NOT EXISTS grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);\n"
            + "INSERT INTO grdb_migrations (identifier) VALUES " + names.joined(separator: ", ") + ";\n"
            + "COMMIT;"
    }()

    /// How long opening a store waits at most for another process creating or migrating the same one.
    static let openingPatience: Duration = .seconds(5)

    /// Opens the database and brings its schema up to date, waiting for another process doing the same: two
    /// processes starting together on a new store both switch it to the write-ahead log (one finds it locked) and
    /// both run the migrations (one finds the tables the other has just made). Each failure of that kind is tried
    /// again after 10 ms, until the schema is complete or ``openingPatience`` has passed; other errors are thrown.
    private static func openMigrated(path: String, configuration: Configuration) throws -> DatabaseQueue {
        let deadline = ContinuousClock.now + Self.openingPatience
        while true {
            do {
                let queue = try DatabaseQueue(path: path, configuration: configuration)
                do {
                    try Self.migrator.migrate(queue)
                } catch {
                    // Another process's migration may have run between our reading of what was applied and ours.
                    if try queue.read(Self.migrator.hasCompletedMigrations) { return queue }
                    throw error
                }
                return queue
            } catch let error as DatabaseError
                where [.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_ERROR].contains(error.resultCode)
                && ContinuousClock.now < deadline
            {
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
    }

    /// Turns off SQLite's memory statistics for the whole process: SQLite then takes no lock on each of its
    /// allocations (a sixth of the time a record's write takes in `Store` benchmarks), and `sqlite3_memory_used`,
    /// `sqlite3_status64` and the heap limits stop working, for every user of SQLite in the process. Only possible
    /// before SQLite is first used in the process (a store opened, or any other use); later it changes nothing.
    /// For programs that own their process, as the `haul` command does.
    /// - Returns: whether it took effect.
    @discardableResult
    public static func disableMemoryStatistics() -> Bool {
        haul_sqlite_disable_memory_statistics() == SQLITE_OK
    }

    /// A store in memory, gone with the process: for callers that want the store's queries without a file.
    public init() throws {
        self.createdEmpty = NIOLockedValueBox(true)
        self.database = try DatabaseQueue()
        try Self.migrator.migrate(self.database)
    }

    /// The schema, as GRDB's named migrations of ``migrations``.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for (identifier, sql) in Self.migrations {
            migrator.registerMigration(identifier) { db in try db.execute(sql: sql) }
        }
        return migrator
    }

    /// How many pages the write-ahead log holds before SQLite copies it into the database (see ``init(path:)``).
    static let checkpointPages = 4_000

    /// How long a lease lasts without renewal: a process that dies frees its transfers after this long.
    static let leaseDuration: TimeInterval = 60
    /// How long the lease taken when a waiting row is inserted lasts: long enough to cover a queue's first starts
    /// without a claim each, short enough that another process sharing the store soon finds the rest of a long queue
    /// free and shares the work (a transfer that starts later claims its lease as usual).
    static let insertLeaseDuration: TimeInterval = 10

    /// What a claim found.
    enum Claim: Sendable {
        /// This process may download the transfer now.
        case claimed
        /// Another live process holds the lease.
        case heldElsewhere
        /// Another process completed it, and the file is there unchanged.
        case completedElsewhere(CompletedFile)
    }

    /// Claims a transfer for `owner` before a request is made for it, inside a write transaction.
    func claim(_ id: TransferID, owner: String, in db: Database) throws -> Claim {
        let now = Date().timeIntervalSince1970
        // Sliced by this claimant, whose insert's lease lasts: nothing to read or write (a checkpoint renews the
        // lease, as a row's).
        let own = self.ownSliceEntries.withLockedValue { $0[id] }
        if let own, own.owner == owner, own.leaseExpires > now { return .claimed }
        // The common case in one statement: the row is not completed and its lease is free, ours, or expired.
        try db.executeCached(
            sql: """
                UPDATE transfer SET leaseOwner = ?, leaseExpires = ?
                WHERE id = ? AND state != 'completed' AND (leaseOwner IS NULL OR leaseOwner = ? OR leaseExpires < ?)
                """,
            arguments: [owner, now + Self.leaseDuration, id.rawValue, owner, now]
        )
        if db.changesCount > 0 { return .claimed }
        // Else: the row is completed, or someone else holds its lease, or a slice holds the transfer.
        let tableRow = try Self.tableRows([id], in: db)[0]
        let slicedRow = try tableRow == nil && Self.holdsSlices(db) ? Self.slicedRows([id.rawValue], in: db)[0] : nil
        guard let row = tableRow ?? slicedRow else { return .claimed }
        // Sliced by this claimant, whose insert's lease lasts: nothing to write (a checkpoint renews it, as a row's).
        if slicedRow != nil, row.leaseOwner == owner, row.state != TransferState.completed.description,
            (row.leaseExpires ?? 0) > now
        {
            return .claimed
        }
        if row.state == TransferState.completed.description, row.leaseOwner != owner, let finalPath = row.finalPath,
            let (size, modified) = Persisted.sizeAndModification(finalPath), size == row.finalSize,
            modified == row.finalModified
        {
            return .completedElsewhere(
                CompletedFile(
                    path: URL(filePath: finalPath),
                    byteCount: size,
                    sha256: row.sha256,
                    modificationTime: modified
                )
            )
        }
        // A lease whose process is gone (killed) is free at once, not only when it expires.
        let holderIsGone = row.leaseOwner.map { !LeaseOwner.isAlive($0) } ?? false
        // A transfer a slice holds is written out as a row when this claim takes its lease, so that the claim has a
        // row to take it on; held by another, it stays where it is.
        if row.leaseOwner == nil || row.leaseOwner == owner || (row.leaseExpires ?? 0) < now || holderIsGone {
            var statements = StoreStatements(ownSliceEntries: self.ownSliceEntries)
            try Self.promote(id.rawValue, in: db, statements: &statements, by: owner)
        }
        try db.executeCached(
            sql: """
                UPDATE transfer SET leaseOwner = ?, leaseExpires = ?
                WHERE id = ? AND (leaseOwner IS NULL OR leaseOwner = ? OR leaseExpires < ? OR ?)
                """,
            arguments: [owner, now + Self.leaseDuration, id.rawValue, owner, now, holderIsGone]
        )
        return db.changesCount > 0 ? .claimed : .heldElsewhere
    }

    // MARK: Queries

    /// Every batch, oldest first, with the state of its transfers.
    public func batches() throws -> [StoredBatch] {
        try self.database.read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT batch.id, batch.createdAt, batch.listComplete, transfer.state, COUNT(*) AS count,
                           SUM(transfer.bytesOnDisk) AS bytes, SUM(transfer.totalSize) AS total
                    FROM batch JOIN batchEntry ON batchEntry.batchID = batch.id
                    JOIN transfer ON transfer.id = batchEntry.transferID
                    GROUP BY batch.id, transfer.state ORDER BY batch.id
                    """
            )
            var batches: [Int: StoredBatch] = [:]
            for row in rows {
                let id: Int = row["id"]
                var batch =
                    batches[id]
                    ?? StoredBatch(
                        id: BatchID(id),
                        createdAt: Date(timeIntervalSince1970: row["createdAt"]),
                        isListComplete: row["listComplete"]
                    )
                let count: Int = row["count"]
                batch.transferCounts[row["state"] ?? "waiting", default: 0] += count
                batch.bytesOnDisk += row["bytes"] ?? 0
                batch.knownTotalBytes += row["total"] ?? 0
                batches[id] = batch
            }
            if try Self.holdsSlices(db) { try Self.countSlicedTransfers(into: &batches, in: db) }
            let empty = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, createdAt, listComplete FROM batch
                    WHERE id NOT IN (SELECT batchID FROM batchEntry) AND id NOT IN (SELECT batchID FROM slice)
                    """
            )
            for row in empty {
                let id: Int = row["id"]
                batches[id] = StoredBatch(
                    id: BatchID(id),
                    createdAt: Date(timeIntervalSince1970: row["createdAt"]),
                    isListComplete: row["listComplete"]
                )
            }
            return batches.values.sorted { $0.id.rawValue < $1.id.rawValue }
        }
    }

    /// Adds to `batches` the transfers that the query of rows and batch entries in ``batches()`` does not see: the
    /// requests of each batch's slices (each as its row says once it has one, else as its slice and completion
    /// say), and batch entries whose transfer a slice holds.
    private static func countSlicedTransfers(into batches: inout [Int: StoredBatch], in db: Database) throws {
        var batchRows: [Int: Row] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT id, createdAt, listComplete FROM batch") {
            batchRows[row["id"]] = row
        }
        func add(_ state: String, bytes: Int64, total: Int64?, to id: Int) {
            guard let batchRow = batchRows[id] else { return }
            var batch =
                batches[id]
                ?? StoredBatch(
                    id: BatchID(id),
                    createdAt: Date(timeIntervalSince1970: batchRow["createdAt"]),
                    isListComplete: batchRow["listComplete"]
                )
            batch.transferCounts[state, default: 0] += 1
            batch.bytesOnDisk += bytes
            batch.knownTotalBytes += total ?? 0
            batches[id] = batch
        }
        // Counted elsewhere: an entry that its batch lists in a batch entry too (the batch was resumed), with the
        // batch entries; an entry with a row, as its row says (once).
        var counted: Set<SlicePlace> = []
        for row in try Row.fetchAll(
            db,
            sql: """
                SELECT batchEntry.batchID, slice.batchID AS sliceBatchID, sliceEntry.slice, sliceEntry.entry
                FROM batchEntry JOIN sliceEntry ON sliceEntry.id = batchEntry.transferID
                JOIN slice ON slice.id = sliceEntry.slice
                """
        ) where (row["batchID"] as Int) == (row["sliceBatchID"] as Int) {
            counted.insert(SlicePlace(slice: row["slice"], entry: row["entry"]))
        }
        for row in try Row.fetchAll(
            db,
            sql: """
                SELECT slice.batchID, sliceEntry.slice, sliceEntry.entry, transfer.state, transfer.bytesOnDisk,
                    transfer.totalSize
                FROM transfer JOIN sliceEntry ON sliceEntry.id = transfer.id JOIN slice ON slice.id = sliceEntry.slice
                """
        ) where counted.insert(SlicePlace(slice: row["slice"], entry: row["entry"])).inserted {
            add(row["state"], bytes: row["bytesOnDisk"], total: row["totalSize"], to: row["batchID"])
        }
        // The others, as their slices and completions say, read without making their texts.
        var completedSizes: [SlicePlace: Int64] = [:]
        try Self.forEachBlob(sql: "SELECT slice, records FROM sliceResult ORDER BY rowid", in: db) { slice, _, reader in
            while !reader.isAtEnd {
                let (entry, size) = try SliceCompletion.size(from: &reader)
                completedSizes[SlicePlace(slice: slice, entry: entry)] = size
            }
        }
        try Self.forEachBlob(sql: "SELECT id, batchID, entries FROM slice", in: db) { slice, batchID, reader in
            var entry = 0
            while !reader.isAtEnd {
                let (bytes, total) = try SliceEntry.sizes(from: &reader)
                let place = SlicePlace(slice: slice, entry: entry)
                entry += 1
                guard !counted.contains(place) else { continue }
                if let size = completedSizes[place] {
                    add(TransferState.completed.description, bytes: size, total: size, to: batchID)
                } else {
                    add(TransferState.waiting.description, bytes: bytes, total: total, to: batchID)
                }
            }
        }
        // Batch entries whose transfer a slice holds (a completed transfer submitted again in a later batch).
        let entries = try Row.fetchAll(
            db,
            sql: """
                SELECT batchEntry.batchID, batchEntry.transferID FROM batchEntry
                LEFT JOIN transfer ON transfer.id = batchEntry.transferID WHERE transfer.id IS NULL
                """
        )
        let found = try Self.slicedRows(entries.map { $0["transferID"] }, in: db)
        for (entry, row) in zip(entries, found) {
            if let row { add(row.state, bytes: row.bytesOnDisk, total: row.totalSize, to: entry["batchID"]) }
        }
    }

    /// Calls `body` with each row's first integer column, and the blob of its last column to read (with the
    /// second column, an integer, when the statement selects three).
    private static func forEachBlob(
        sql: String,
        in db: Database,
        _ body: (Int64, Int, inout PackedReader) throws -> Void
    ) throws {
        let statement = try db.makeStatement(sql: sql)
        try withExtendedLifetime(statement) {
            let handle = statement.sqliteStatement
            let columns = sqlite3_column_count(handle)
            var code = sqlite3_step(handle)
            while code == SQLITE_ROW {
                let count = Int(sqlite3_column_bytes(handle, columns - 1))
                if count > 0, let blob = sqlite3_column_blob(handle, columns - 1) {
                    var reader = PackedReader(UnsafeRawBufferPointer(start: blob, count: count))
                    let second = columns > 2 ? Int(sqlite3_column_int64(handle, 1)) : 0
                    try body(sqlite3_column_int64(handle, 0), second, &reader)
                }
                code = sqlite3_step(handle)
            }
            guard code == SQLITE_DONE else { throw db.failure(code, sql: sql) }
        }
    }

    /// The batches that still have transfers to do (waiting, running, waiting to retry, or paused), or whose list
    /// was not recorded to its end.
    public func unfinishedBatches() throws -> [StoredBatch] {
        try self.batches().filter { !$0.isFinished }
    }

    /// The transfers of a batch, in the order they were added.
    public func transfers(inBatch id: BatchID) throws -> [StoredTransfer] {
        try self.rows(inBatch: id).map(StoredTransfer.init)
    }

    /// A transfer by its identifier, as last recorded (HWIFileDownload's identifiers survive restarts).
    public func transfer(_ id: TransferID) throws -> StoredTransfer? {
        try self.row(id).map(StoredTransfer.init)
    }

    /// Forgets batches whose recorded transfers have all finished, and transfers no batch refers to any more. A
    /// batch whose list was not recorded to its end goes too once what it recorded is done (running the command
    /// that made it again makes a new batch).
    /// - Returns: how many batches were forgotten.
    @discardableResult
    public func forgetFinishedBatches() throws -> Int {
        let finished = try self.batches().filter(\.areRecordedTransfersFinished).map(\.id.rawValue)
        try self.database.write { db in
            for id in finished {
                try Self.forgetSlices(ofBatch: id, in: db)
                try db.execute(sql: "DELETE FROM batchEntry WHERE batchID = ?", arguments: [id])
                try db.execute(sql: "DELETE FROM batch WHERE id = ?", arguments: [id])
            }
            try db.execute(
                sql: """
                    DELETE FROM transfer
                    WHERE id NOT IN (SELECT transferID FROM batchEntry) AND id NOT IN (SELECT id FROM sliceEntry)
                    """
            )
        }
        return finished.count
    }

    // MARK: Used by the manager

    func rows(inBatch id: BatchID) throws -> [TransferRow] {
        try self.database.read { db in
            let sql = """
                SELECT batchEntry.position, \(TransferRow.columns) FROM batchEntry
                JOIN transfer ON transfer.id = batchEntry.transferID
                WHERE batchEntry.batchID = ? ORDER BY batchEntry.position
                """
            let statement = try db.cachedStatement(sql: sql)
            var rows = try withExtendedLifetime(statement) {
                let handle = statement.sqliteStatement
                defer { sqlite3_reset(handle) }
                var rows: [(position: Int, row: TransferRow)] = []
                var code = sqlite3_bind_int64(handle, 1, Int64(id.rawValue))
                while code == SQLITE_OK || code == SQLITE_ROW {
                    code = sqlite3_step(handle)
                    if code == SQLITE_ROW {
                        rows.append((Int(sqlite3_column_int64(handle, 0)), TransferRow(columnsOf: handle, from: 1)))
                    }
                }
                guard code == SQLITE_DONE else { throw db.failure(code, sql: sql) }
                return rows
            }
            guard try Self.holdsSlices(db) else { return rows.map(\.row) }
            // Entries whose transfer a slice holds, and the batch's own slices (a position a batch entry has too,
            // when the batch was resumed, is the entry's).
            let orphans = try Row.fetchAll(
                db,
                sql: """
                    SELECT batchEntry.position, batchEntry.transferID FROM batchEntry
                    LEFT JOIN transfer ON transfer.id = batchEntry.transferID
                    WHERE batchEntry.batchID = ? AND transfer.id IS NULL
                    """,
                arguments: [id.rawValue]
            )
            for (orphan, row) in zip(orphans, try Self.slicedRows(orphans.map { $0["transferID"] }, in: db)) {
                if let row { rows.append((orphan["position"], row)) }
            }
            var (positions, ids) = (Set(rows.map(\.position)), Set(rows.map(\.row.id)))
            for slice in try Self.slices(ofBatch: id.rawValue, in: db) {
                let written = try Self.tableRows(slice.entries.map { TransferID($0.id) }, in: db)
                for (index, entry) in slice.entries.enumerated()
                where !ids.contains(entry.id) && positions.insert(entry.position).inserted {
                    rows.append((entry.position, written[index] ?? slice.row(index)))
                }
            }
            rows.sort { $0.position < $1.position }
            return rows.map(\.row)
        }
    }

    /// Digests of the identifiers of every transfer the store knows, read straight from SQLite's text without making
    /// a string of each (see ``TransferIDDigests``).
    func transferIDDigests() throws -> TransferIDDigests {
        try self.database.read { db in
            let sql = "SELECT id FROM transfer UNION ALL SELECT id FROM sliceEntry"
            let statement = try db.makeStatement(sql: sql)
            return try withExtendedLifetime(statement) {
                let handle = statement.sqliteStatement
                var digests = TransferIDDigests()
                var code = sqlite3_step(handle)
                while code == SQLITE_ROW {
                    if let text = sqlite3_column_text(handle, 0) {
                        let count = Int(sqlite3_column_bytes(handle, 0))
                        digests.insert(UnsafeRawBufferPointer(start: text, count: count))
                    }
                    code = sqlite3_step(handle)
                }
                guard code == SQLITE_DONE else { throw db.failure(code, sql: sql) }
                return digests
            }
        }
    }

    /// At least as many as the transfers the store holds: the largest row number, read from the end of the table
    /// (rows are numbered as they are inserted; those deleted leave gaps), and as many for each slice as a slice
    /// holds at most.
    func rowsAtMost() throws -> Int {
        try self.database.read { db in
            let rows = try Int.fetchOne(db, sql: "SELECT MAX(rowid) FROM transfer") ?? 0
            let slices = try Int.fetchOne(db, sql: "SELECT MAX(id) FROM slice") ?? 0
            return rows + slices * SQLText.sliceSize
        }
    }

    func row(_ id: TransferID) throws -> TransferRow? {
        try self.rows([id])[0]
    }

    /// The rows of `ids`, in their order (`nil` for a transfer the store does not hold), read in one transaction: a
    /// run over a list whose files the store holds already reads a row for each of them.
    func rows(_ ids: [TransferID]) throws -> [TransferRow?] {
        guard !ids.isEmpty else { return [] }
        return try self.database.read { db in
            try Self.rows(ids, in: db)
        }
    }

    /// ``rows(_:)`` in a transaction already open: each transfer's row, or the row that a slice's entry for it
    /// stands for.
    static func rows(_ ids: [TransferID], in db: Database) throws -> [TransferRow?] {
        var rows = try Self.tableRows(ids, in: db)
        let missing = rows.indices.filter { rows[$0] == nil }
        guard !missing.isEmpty, try Self.holdsSlices(db) else { return rows }
        for (index, row) in zip(missing, try Self.slicedRows(missing.map { ids[$0].rawValue }, in: db)) {
            rows[index] = row
        }
        return rows
    }

    /// The rows of `transfer` for `ids` (`nil` for a transfer without one, whether or not a slice holds it).
    static func tableRows(_ ids: [TransferID], in db: Database) throws -> [TransferRow?] {
        let sql = "SELECT \(TransferRow.columns) FROM transfer WHERE id = ?"
        let statement = try db.cachedStatement(sql: sql)
        return try withExtendedLifetime(statement) {
            let handle = statement.sqliteStatement
            return try ids.map { id in
                defer { sqlite3_reset(handle) }
                let code = id.withUTF8 { StatementBinder.bindText($0, to: handle, at: 1) }
                let step = code == SQLITE_OK ? sqlite3_step(handle) : code
                switch step {
                case SQLITE_ROW: return TransferRow(columnsOf: handle)
                case SQLITE_DONE: return nil
                default: throw db.failure(step, sql: sql)
                }
            }
        }
    }

    /// Creates a batch and returns its identifier.
    /// Records a new batch; `listComplete` false for a batch whose items are still to be added (see
    /// ``StoredBatch/isListComplete``).
    package func createBatch(listComplete: Bool = true) throws -> BatchID {
        try self.database.write { db in
            try db.execute(
                sql: "INSERT INTO batch (createdAt, listComplete) VALUES (?, ?)",
                arguments: [Date().timeIntervalSince1970, listComplete]
            )
            return BatchID(Int(db.lastInsertedRowID))
        }
    }

    /// Applies operations in one transaction, as `owner` (the manager writing them).
    func apply(owner: String, _ operations: [StoreOperation]) throws {
        guard !operations.isEmpty else { return }
        self.willWriteTransfers()
        try self.database.write { db in
            // One operation at a time: nothing here is sliced (that takes a bulk insert), but a completion may go
            // to a slice.
            var statements = StoreStatements(ownSliceEntries: self.ownSliceEntries)
            for operation in operations { try operation.apply(db, owner: owner, statements: &statements) }
            try statements.writeCompletions(db)
        }
    }
}

/// A batch as the store knows it.
public struct StoredBatch: Sendable, Hashable {
    /// The batch's identifier (stable across processes).
    public var id: BatchID
    /// When it was created.
    public var createdAt: Date
    /// How many of its transfers are in each state (`waiting`, `completed`, ...).
    public var transferCounts: [String: Int] = [:]
    /// Bytes on disk over its transfers, at the last checkpoint.
    public var bytesOnDisk: Int64 = 0
    /// The sum of the sizes known so far.
    public var knownTotalBytes: Int64 = 0
    /// Whether every item of the batch was recorded. A batch fed a window at a time (`haul get -i` with a long
    /// list) is recorded as its items are added; when its process stopped before the end of the list, the store
    /// holds only the items added by then, and this is `false`: resuming it does the recorded items, and running
    /// the command that made it again does the rest.
    public var isListComplete = true

    /// How many transfers it has.
    public var transferCount: Int { self.transferCounts.values.reduce(0, +) }

    /// Whether every transfer has finished (completed, failed, cancelled or skipped) and the list was recorded to
    /// its end.
    public var isFinished: Bool { self.isListComplete && self.areRecordedTransfersFinished }

    /// Whether every transfer the store holds for the batch has finished.
    public var areRecordedTransfersFinished: Bool {
        self.transferCounts.keys.allSatisfy { ["completed", "failed", "cancelled", "skipped"].contains($0) }
    }
}

/// A transfer as the store knows it.
public struct StoredTransfer: Sendable, Hashable {
    /// The identifier.
    public var id: TransferID
    /// The URL.
    public var url: URL
    /// The state when last recorded: `waiting`, `running`, `waitingToRetry`, `paused`, `completed`, `failed`,
    /// `cancelled`, `skipped`.
    public var state: String
    /// Bytes on disk at the last checkpoint (the partial file itself may hold more).
    public var bytesOnDisk: Int64
    /// The file's size, once known.
    public var totalBytes: Int64?
    /// Requests made for it.
    public var attempts: Int
    /// Where the finished file is (for an upload, the file that was sent).
    public var finalPath: URL?
    /// Its SHA-256, when computed.
    public var sha256: String?
    /// The error's code and message, when it failed.
    public var errorCode: String?
    /// The error's message, when it failed.
    public var errorMessage: String?
    /// The HTTP status of the failure, if a server answered.
    public var httpStatus: Int?
    /// What the transfer does, as the command line names it: `get`, `put`, `post` (a multipart upload) or `rm`.
    public var operation: String

    init(_ row: TransferRow) {
        self.id = TransferID(row.id)
        self.url = URL(string: row.url)!
        self.state = row.state
        self.bytesOnDisk = row.bytesOnDisk
        self.totalBytes = row.totalSize
        self.attempts = row.attempts
        self.finalPath = row.finalPath.map { URL(filePath: $0) }
        self.sha256 = row.sha256
        self.errorCode = row.errorCode
        self.errorMessage = row.errorMessage
        self.httpStatus = row.httpStatus
        self.operation =
            (try? JSONDecoder().decode(StoredOperation.self, from: Data(row.operation.utf8)))?.verb ?? "get"
    }
}
