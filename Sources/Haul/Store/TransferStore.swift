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
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            // NORMAL is durable across a killed process in WAL mode; only a power loss may lose the last commits. A new
            // file is created and migrated without syncs (each would wait for the downloaded files' dirty data): a
            // power loss then can only lose a store that holds nothing yet.
            try db.execute(sql: isNew ? "PRAGMA synchronous = OFF" : "PRAGMA synchronous = NORMAL")
            if try String.fetchOne(db, sql: "PRAGMA journal_mode") != "wal" {
                try db.execute(sql: "PRAGMA journal_mode = WAL")
            }
            // A batch's inserts in one transaction journal the pages they change: in memory, not in a file.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            // The log is copied into the database when it passes this many pages (16 MiB), not SQLite's 1,000: each
            // copy rewrites the pages a batch changes in every transaction.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.checkpointPages)")
            // Closing leaves the write-ahead log for the next process to read, instead of copying it into the
            // database and syncing both: that sync waits for the downloaded files' dirty data. What a power loss may
            // lose is what NORMAL already allows (the files are not synced either).
            let code = haul_sqlite_keep_wal_on_close(db.sqliteConnection)
            guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code)) }
        }
        let database = try Self.openMigrated(path: path.path, configuration: configuration)
        if isNew { try database.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = NORMAL") } }
        self.database = database
    }

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
        // The common case in one statement: the row is not completed and its lease is free, ours, or expired.
        try db.executeCached(
            sql: """
                UPDATE transfer SET leaseOwner = ?, leaseExpires = ?
                WHERE id = ? AND state != 'completed' AND (leaseOwner IS NULL OR leaseOwner = ? OR leaseExpires < ?)
                """,
            arguments: [owner, now + Self.leaseDuration, id.rawValue, owner, now]
        )
        if db.changesCount > 0 { return .claimed }
        // Else: the row is completed, or someone else holds its lease (or there is no row: nothing to claim).
        guard let row = try Self.rows([id], in: db)[0] else { return .claimed }
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
            var batches: [Int: StoredBatch] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, createdAt, listComplete FROM batch") {
                let id: Int = row["id"]
                batches[id] = StoredBatch(
                    id: BatchID(id),
                    createdAt: Date(timeIntervalSince1970: row["createdAt"]),
                    isListComplete: row["listComplete"]
                )
            }
            let counts = try Row.fetchAll(
                db,
                sql: """
                    SELECT batchEntry.batchID, transfer.state, COUNT(*) AS count,
                           SUM(transfer.bytesOnDisk) AS bytes, SUM(transfer.totalSize) AS total
                    FROM batchEntry JOIN transfer ON transfer.id = batchEntry.transferID
                    GROUP BY batchEntry.batchID, transfer.state
                    """
            )
            for row in counts {
                let id: Int = row["batchID"]
                let count: Int = row["count"]
                batches[id]?.transferCounts[row["state"] ?? "waiting", default: 0] += count
                batches[id]?.bytesOnDisk += row["bytes"] ?? 0
                batches[id]?.knownTotalBytes += row["total"] ?? 0
            }
            return batches.values.sorted { $0.id.rawValue < $1.id.rawValue }
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
                try db.execute(sql: "DELETE FROM batchEntry WHERE batchID = ?", arguments: [id])
                try db.execute(sql: "DELETE FROM batch WHERE id = ?", arguments: [id])
            }
            try db.execute(sql: "DELETE FROM transfer WHERE id NOT IN (SELECT transferID FROM batchEntry)")
        }
        return finished.count
    }

    // MARK: Used by the manager

    /// The rows of a batch's transfers, in the order of the batch's items.
    func rows(inBatch id: BatchID) throws -> [TransferRow] {
        try self.database.read { db in
            try TransferRow.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(TransferRow.columns) FROM batchEntry
                        JOIN transfer ON transfer.id = batchEntry.transferID
                        WHERE batchEntry.batchID = ? ORDER BY batchEntry.position
                        """
                ),
                arguments: [id.rawValue]
            )
        }
    }

    /// Digests of the identifiers of every transfer the store knows (see ``TransferIDDigests``).
    func transferIDDigests() throws -> TransferIDDigests {
        try self.database.read { db in
            var digests = TransferIDDigests()
            let ids = try String.fetchCursor(db, sql: "SELECT id FROM transfer")
            while var id = try ids.next() {
                id.withUTF8 { digests.insert(UnsafeRawBufferPointer($0)) }
            }
            return digests
        }
    }

    /// At least as many as the transfers the store holds: the largest row number, read from the end of the table
    /// (rows are numbered as they are inserted; those deleted leave gaps).
    func rowsAtMost() throws -> Int {
        try self.database.read { db in
            try Int.fetchOne(db, sql: "SELECT MAX(rowid) FROM transfer") ?? 0
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

    /// ``rows(_:)`` in a transaction already open.
    static func rows(_ ids: [TransferID], in db: Database) throws -> [TransferRow?] {
        let statement = try db.cachedStatement(sql: "SELECT \(TransferRow.columns) FROM transfer WHERE id = ?")
        return try ids.map { id in try TransferRow.fetchOne(statement, arguments: [id.rawValue]) }
    }

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
            var statements = PreparedStatements()
            for operation in operations { try operation.apply(db, owner: owner, statements: &statements) }
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
