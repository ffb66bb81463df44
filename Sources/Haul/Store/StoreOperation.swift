import Foundation
import GRDB

/// A change to the store, queued by the manager and written in batches by ``StoreWriter``.
package enum StoreOperation: Sendable {
    /// A transfer's row, inserted (or, when the store has it, updated as ``SQL/insert`` says) as item `position`
    /// of a batch: see ``insertItem(batchID:position:row:)``.
    case insert(InsertedRow)
    /// A transfer the store records in full already joins a batch: a completed file, found unchanged, in a batch
    /// submitted again. Its row stays as it is (an ``insert(_:)`` would leave it so too: a completed row is no one's
    /// to change, see ``apply(_:owner:statements:)``).
    case joinBatch(batchID: BatchID, position: Int, TransferID)
    /// A completed transfer whose file is gone (deleted, or changed since) is submitted again: its row goes back to
    /// waiting, with its lease free, so that the ``insert(_:)`` after it takes the row and its lease as it takes a
    /// new one (without it, the insert leaves a completed row alone, and each transfer claimed its lease in a
    /// transaction of its own before its request). Only when the row is as it was read (`completedAt`, its
    /// `updatedAt` then) and no one holds its lease: the holder `staleHolder`, whose process is gone, counts as no one.
    /// Otherwise it changes nothing, and the transfer's claim settles it as before.
    case reopen(TransferID, completedAt: Double, staleHolder: String?)
    case state(TransferID, TransferState, attempts: Int)
    case validator(TransferID, etag: String?, lastModified: String?, totalSize: Int64?)
    case checkpoint(TransferID, bytesOnDisk: Int64)
    case completed(TransferID, CompletedFile, modified: Double?)
    /// The finished file is about to be renamed to `finalPath`: the completion is recorded in full before the rename
    /// (one statement per file, not a record of the path and then one of the completion), so that a process killed
    /// right after the rename still knows, on the next run, that the file there is this transfer's: it has the
    /// recorded size and modification time (a rename keeps both). Until the rename is done the row says completed
    /// but the file is not there yet, so the lease is kept (renewed), not released: another process sharing the
    /// store waits rather than downloading the same file; the lease lapses on its own (it expires, or its process
    /// or manager is gone: ``LeaseOwner/isAlive(_:)``).
    case publishing(TransferID, finalPath: String, size: Int64, sha256: String?, modified: Double?)
    /// Frees a lease whose holder is gone.
    case releaseLease(TransferID, holder: String)
    case failed(TransferID, HaulError, attempts: Int)
    /// Every item of an open batch has been added.
    case listComplete(BatchID)

    /// Inserts `row` as item `position` of batch `batchID`.
    package static func insertItem(batchID: BatchID, position: Int, row: TransferRow) -> StoreOperation {
        .insert(InsertedRow(batchID: batchID, position: position, row: row, id: TransferID(row.id)))
    }

    /// ``apply(_:owner:statements:)`` with statements prepared for it alone.
    @discardableResult
    func apply(_ db: Database, owner: String) throws -> Bool {
        var statements = PreparedStatements()
        return try self.apply(db, owner: owner, statements: &statements)
    }

    /// Applies the operation as `owner`. The holder of a transfer's lease changes its row; while no one holds it
    /// (or the lease expired), anyone may, unless the row says completed: a manager waiting for another never
    /// overwrites the other's result. Every settled state releases the lease, except a completion recorded before its
    /// rename (``publishing``), which keeps it until it lapses.
    ///
    /// - Returns: whether the operation gave `owner` the transfer's lease: an inserted row in state `waiting` is
    ///   leased to its inserter at once (when no one else holds it), so that starting it needs no claim of its own.
    @discardableResult
    func apply(_ db: Database, owner: String, statements: inout PreparedStatements) throws -> Bool {
        let now = Date().timeIntervalSince1970
        switch self {
        case .insert(let item):
            let leases = item.row.state == TransferState.waiting.description
            try statements.run(
                .insert,
                in: db,
                arguments: StatementArguments(Self.insertValues(item.row, owner: owner, now: now) + [owner, now])
            )
            let leased = leases && db.changesCount > 0
            try statements.run(.batchEntry, in: db, arguments: [item.batchID.rawValue, item.position, item.row.id])
            return leased
        case .joinBatch(let batchID, let position, let id):
            try statements.run(.batchEntry, in: db, arguments: [batchID.rawValue, position, id.rawValue])
        case .reopen(let id, let completedAt, let staleHolder):
            try statements.run(.reopen, in: db, arguments: [id.rawValue, completedAt, now, staleHolder])
        case .state(let id, let state, let attempts):
            // Waiting keeps the lease the insert took (see ``insert(_:)``); running renews nothing here either.
            if state == .running || state == .waiting {
                try statements.run(
                    .state,
                    in: db,
                    arguments: [state.description, attempts, now, id.rawValue, owner, now]
                )
            } else {
                try statements.run(
                    .stateReleasingLease,
                    in: db,
                    arguments: [state.description, attempts, now, owner, id.rawValue, owner, now]
                )
            }
        case .validator(let id, let etag, let lastModified, let totalSize):
            try statements.run(
                .validator,
                in: db,
                arguments: [etag, lastModified, totalSize, now, id.rawValue, owner, now]
            )
        case .checkpoint(let id, let bytes):
            // A checkpoint also renews the lease.
            try statements.run(
                .checkpoint,
                in: db,
                arguments: [bytes, now, now + TransferStore.leaseDuration, id.rawValue, owner]
            )
        case .completed(let id, let file, let modified):
            try statements.run(
                .completed,
                in: db,
                arguments: [
                    file.byteCount, file.path.path, modified, file.sha256, now, owner, id.rawValue, owner, now,
                ]
            )
        case .publishing(let id, let finalPath, let size, let sha256, let modified):
            try statements.run(
                .publishing,
                in: db,
                arguments: [
                    size, finalPath, modified, sha256, now, owner, now + TransferStore.leaseDuration, id.rawValue,
                ]
            )
        case .releaseLease(let id, let holder):
            try statements.run(.releaseLease, in: db, arguments: [id.rawValue, holder])
        case .failed(let id, let error, let attempts):
            try statements.run(
                .failed,
                in: db,
                arguments: [
                    error.code.description, error.message, error.httpStatus, attempts, now, owner, id.rawValue, owner,
                    now,
                ]
            )
        case .listComplete(let batchID):
            try statements.run(.listComplete, in: db, arguments: [batchID.rawValue])
        }
        return false
    }

    /// The values ``SQL/insert`` binds for `row`, in its columns' order: a waiting row is leased to `owner`.
    static func insertValues(_ row: TransferRow, owner: String, now: Double) -> [(any DatabaseValueConvertible)?] {
        let leases = row.state == TransferState.waiting.description
        return [
            row.id, row.url, row.destinationKind, row.destinationPath, row.folder, row.nameComponents,
            row.usesContentDisposition, row.conflictPolicy, row.headers, row.checksum, row.expectedSize,
            row.computesSHA256, row.state, row.bytesOnDisk, row.totalSize, row.etag, row.lastModified, now,
            row.operation, leases ? owner : nil, leases ? now + TransferStore.insertLeaseDuration : nil,
        ]
    }

    /// Inserts ``SQL/bulkRows`` rows and their batch entries with one statement each: the same rows as one at a
    /// time, for about half the cost per row. Returns the transfers whose lease `owner` took: all of the waiting
    /// ones when every row was written, none when one was not (a row another manager holds; they are claimed
    /// before their requests, as usual).
    static func insertInBulk(
        _ items: [InsertedRow],
        _ db: Database,
        owner: String,
        statements: inout PreparedStatements
    ) throws -> [TransferID] {
        precondition(items.count == SQL.bulkRows, "a bulk insert holds \(SQL.bulkRows) rows")
        let now = Date().timeIntervalSince1970
        var values: [(any DatabaseValueConvertible)?] = []
        values.reserveCapacity(items.count * SQL.insertColumns + 2)
        for item in items { values += Self.insertValues(item.row, owner: owner, now: now) }
        values += [owner, now]
        try statements.run(.bulkInsert, in: db, arguments: StatementArguments(values))
        let written = db.changesCount == items.count
        var entries: [(any DatabaseValueConvertible)?] = []
        entries.reserveCapacity(items.count * 3)
        for item in items { entries += [item.batchID.rawValue, item.position, item.row.id] }
        try statements.run(.bulkBatchEntries, in: db, arguments: StatementArguments(entries))
        guard written else { return [] }
        return items.filter { $0.row.state == TransferState.waiting.description }.map(\.id)
    }

    /// Whether this operation inserts a row.
    var isInsert: Bool {
        if case .insert = self { true } else { false }
    }

    /// The transfer whose row this operation inserts, if it does.
    var insertedID: TransferID? {
        if case .insert(let item) = self { item.id } else { nil }
    }

    /// The transfer whose lease this operation gives up, if it does (a settled state, a pause, a retry wait).
    var releasedLease: TransferID? {
        switch self {
        case .state(let id, let state, _): state == .running || state == .waiting ? nil : id
        case .completed(let id, _, _), .failed(let id, _, _): id
        case .insert, .joinBatch, .reopen, .validator, .checkpoint, .publishing, .releaseLease, .listComplete: nil
        }
    }
}

/// The row of an ``StoreOperation/insert(_:)``, held by reference: operations are copied into the writer's queue and
/// out of it, and a reference is one retain where two dozen fields inline were a dozen.
package final class InsertedRow: Sendable {
    let batchID: BatchID
    let position: Int
    let row: TransferRow
    /// The row's identifier (`row.id`), read once: a claim compares it with its own.
    let id: TransferID

    init(batchID: BatchID, position: Int, row: TransferRow, id: TransferID) {
        self.batchID = batchID
        self.position = position
        self.row = row
        self.id = id
    }
}

/// The store's statements, each prepared once per transaction (``PreparedStatements``).
enum SQL {
    /// The statements an operation runs, by name.
    enum Name: Int, CaseIterable {
        case insert, bulkInsert, batchEntry, bulkBatchEntries, state, stateReleasingLease, validator, checkpoint,
            completed, publishing, releaseLease, reopen, failed, listComplete

        var text: String {
            switch self {
            case .insert: SQL.insert
            case .bulkInsert: SQL.bulkInsert
            case .batchEntry: SQL.batchEntry
            case .bulkBatchEntries: SQL.bulkBatchEntries
            case .state: SQL.state
            case .stateReleasingLease: SQL.stateReleasingLease
            case .validator: SQL.validator
            case .checkpoint: SQL.checkpoint
            case .completed: SQL.completed
            case .publishing: SQL.publishing
            case .releaseLease: SQL.releaseLease
            case .reopen: SQL.reopen
            case .failed: SQL.failed
            case .listComplete: SQL.listComplete
            }
        }
    }

    /// A transfer this manager may write: its lease is this manager's, or free (or expired) on an unsettled row.
    /// Binds the owner, then now.
    static let mine = "(leaseOwner = ? OR ((leaseOwner IS NULL OR leaseExpires < ?) AND state != 'completed'))"

    /// Gives the lease up when this manager holds it. Binds the owner.
    static let release = "leaseOwner = CASE WHEN leaseOwner = ? THEN NULL ELSE leaseOwner END"

    /// How many values ``insert`` binds for each row.
    static let insertColumns = 21
    /// How many rows ``bulkInsert`` holds.
    static let bulkRows = 32

    /// Inserts a row, or updates the row the store has when it is ``mine``: binds the 21 values of the columns, then
    /// the two of ``mine``.
    static let insert = Self.insert(rows: 1)
    /// ``insert`` for ``bulkRows`` rows.
    static let bulkInsert = Self.insert(rows: bulkRows)

    private static func insert(rows: Int) -> String {
        let row = "(" + Array(repeating: "?", count: insertColumns).joined(separator: ", ") + ")"
        return """
            INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents,
                usesContentDisposition, conflictPolicy, headers, checksum, expectedSize, computesSHA256, state,
                bytesOnDisk, totalSize, etag, lastModified, updatedAt, operation, leaseOwner, leaseExpires)
            VALUES \(Array(repeating: row, count: rows).joined(separator: ", "))
            ON CONFLICT(id) DO UPDATE SET state = excluded.state, headers = excluded.headers,
                checksum = excluded.checksum, expectedSize = excluded.expectedSize,
                operation = excluded.operation, errorCode = NULL, errorMessage = NULL, httpStatus = NULL,
                updatedAt = excluded.updatedAt, leaseOwner = excluded.leaseOwner, leaseExpires = excluded.leaseExpires
            WHERE \(mine)
            """
    }

    static let batchEntry = "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES (?, ?, ?)"
    /// ``batchEntry`` for ``bulkRows`` rows.
    static let bulkBatchEntries =
        "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES "
        + Array(repeating: "(?, ?, ?)", count: bulkRows).joined(separator: ", ")
    static let state = """
        UPDATE transfer SET state = ?, attempts = MAX(attempts, ?), updatedAt = ? WHERE id = ? AND \(mine)
        """
    static let stateReleasingLease = """
        UPDATE transfer SET state = ?, attempts = MAX(attempts, ?), updatedAt = ?, \(release) WHERE id = ? AND \(mine)
        """
    static let validator = """
        UPDATE transfer SET etag = ?, lastModified = ?, totalSize = ?, updatedAt = ? WHERE id = ? AND \(mine)
        """
    static let checkpoint = """
        UPDATE transfer SET bytesOnDisk = ?, updatedAt = ?, leaseExpires = ? WHERE id = ? AND leaseOwner = ?
        """
    /// Binds the size, the path, the modification time, the digest, now and the owner, then the id and ``mine``.
    static let completed = """
        UPDATE transfer SET state = 'completed', bytesOnDisk = ?1, totalSize = ?1, finalPath = ?2, finalSize = ?1,
            finalModified = ?3, sha256 = ?4, errorCode = NULL, errorMessage = NULL, httpStatus = NULL,
            updatedAt = ?5, leaseOwner = CASE WHEN leaseOwner = ?6 THEN NULL ELSE leaseOwner END
        WHERE id = ?7 AND (leaseOwner = ?8 OR ((leaseOwner IS NULL OR leaseExpires < ?9) AND state != 'completed'))
        """
    /// Binds the size, the path, the modification time, the digest, now, the owner, the lease's end, then the id.
    static let publishing = """
        UPDATE transfer SET state = 'completed', bytesOnDisk = ?1, totalSize = ?1, finalPath = ?2, finalSize = ?1,
            finalModified = ?3, sha256 = ?4, errorCode = NULL, errorMessage = NULL, httpStatus = NULL,
            updatedAt = ?5, leaseOwner = ?6, leaseExpires = ?7
        WHERE id = ?8 AND (leaseOwner = ?6 OR ((leaseOwner IS NULL OR leaseExpires < ?5) AND state != 'completed'))
        """
    static let releaseLease =
        "UPDATE transfer SET leaseOwner = NULL, leaseExpires = NULL WHERE id = ? AND leaseOwner = ?"
    /// Binds the id, the `updatedAt` read, now, and the holder whose process is gone (or `NULL`).
    static let reopen = """
        UPDATE transfer SET state = 'waiting', leaseOwner = NULL, leaseExpires = NULL
        WHERE id = ? AND state = 'completed' AND updatedAt = ?
            AND (leaseOwner IS NULL OR leaseExpires < ? OR leaseOwner = ?)
        """
    static let failed = """
        UPDATE transfer SET state = 'failed', errorCode = ?, errorMessage = ?, httpStatus = ?,
            attempts = MAX(attempts, ?), updatedAt = ?, \(release) WHERE id = ? AND \(mine)
        """
    static let listComplete = "UPDATE batch SET listComplete = 1 WHERE id = ?"
}

/// The store's statements prepared in one transaction, each the first time it runs there: GRDB's statement cache
/// finds a statement by hashing its whole text, which for the insert costs about as much as running it, and a
/// transaction runs the same few statements for every file.
struct PreparedStatements {
    private var statements = [Statement?](repeating: nil, count: SQL.Name.allCases.count)

    /// Runs statement `name` with `arguments`.
    mutating func run(_ name: SQL.Name, in db: Database, arguments: StatementArguments) throws {
        let statement: Statement
        if let prepared = self.statements[name.rawValue] {
            statement = prepared
        } else {
            statement = try db.cachedStatement(sql: name.text)
            self.statements[name.rawValue] = statement
        }
        // The store's own statements and values: their counts are right by construction.
        statement.setUncheckedArguments(arguments)
        try statement.execute()
    }
}

extension Database {
    /// `execute(sql:arguments:)` through the statement cache: the store's statements are few and constant, and
    /// preparing one costs more than running it.
    func executeCached(sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try self.cachedStatement(sql: sql).execute(arguments: arguments)
    }
}
