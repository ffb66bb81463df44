import Foundation
import GRDB

/// One row of the `transfer` table.
package struct TransferRow: Codable, Equatable, Sendable, FetchableRecord {
    var id: String
    var url: String
    var destinationKind: String
    var destinationPath: String
    var folder: String
    /// JSON array of the file's path components below `folder`, fixed when the transfer was first queued (so a
    /// UUID-prefixed name, and the partial file's name, stay the same after a restart).
    var nameComponents: String
    var usesContentDisposition: Bool
    var conflictPolicy: String
    /// JSON array of `[name, value]` pairs, without the secret headers (they are never written to disk).
    var headers: String
    var checksum: String?
    var expectedSize: Int64?
    var computesSHA256: Bool
    var state: String
    var bytesOnDisk: Int64
    var totalSize: Int64?
    var etag: String?
    var lastModified: String?
    var attempts: Int
    var updatedAt: Double
    // The result: none while the transfer is unsettled, as every new row is.
    var finalPath: String? = nil
    var finalSize: Int64? = nil
    var finalModified: Double? = nil
    var sha256: String? = nil
    var errorCode: String? = nil
    var errorMessage: String? = nil
    var httpStatus: Int? = nil
    /// The manager that may write this row and download the file now, and until when (seconds since 1970).
    var leaseOwner: String? = nil
    var leaseExpires: Double? = nil
    /// JSON of ``StoredOperation``: what the transfer does.
    var operation: String = #"{"kind":"download"}"#
}

/// A transfer's ``TransferRequest/Operation`` as the store records it. In-memory data is not stored (only that there
/// was some), so such an upload cannot be continued by another process.
struct StoredOperation: Codable, Hashable, Sendable {
    /// A download's operation as JSON, written for most rows without an encoder.
    static let downloadJSON = #"{"kind":"download"}"#

    /// The operation a row's JSON records, or `nil` when it is not one; a download's (most rows) is read without
    /// `JSONDecoder`.
    init?(json: String) {
        if json == Self.downloadJSON {
            self.init(.download)
        } else {
            guard let decoded = try? JSONDecoder().decode(Self.self, from: Data(json.utf8)) else { return nil }
            self = decoded
        }
    }

    var kind: String
    var sourcePath: String?
    var field: String?
    var contentType: String?
    var fileName: String?
    var treatsNotFoundAsSuccess: Bool?

    init(_ operation: TransferRequest.Operation) {
        switch operation {
        case .download:
            self.kind = "download"
        case .upload(let upload):
            if case .file(let url) = upload.source {
                self.kind = "upload"
                self.sourcePath = url.path
            } else {
                self.kind = "uploadData"
            }
            self.field = upload.method.multipartField
            self.contentType = upload.contentType
            self.fileName = upload.fileName
        case .delete(let deletion):
            self.kind = "delete"
            self.treatsNotFoundAsSuccess = deletion.treatsNotFoundAsSuccess
        }
    }

    /// The operation, or `nil` for an upload of in-memory data (gone with the process that had it).
    var operation: TransferRequest.Operation? {
        switch self.kind {
        case "upload":
            guard let sourcePath = self.sourcePath else { return nil }
            let source = URL(filePath: sourcePath)
            return .upload(
                TransferRequest.Upload(
                    source: .file(source),
                    method: self.field.map { .multipart(field: $0) } ?? .put,
                    contentType: self.contentType,
                    fileName: self.fileName ?? source.lastPathComponent
                )
            )
        case "delete":
            return .delete(TransferRequest.Deletion(treatsNotFoundAsSuccess: self.treatsNotFoundAsSuccess ?? false))
        case "download":
            return .download
        default:
            return nil
        }
    }

    /// A short name for listings: `get`, `put`, `post` or `rm`.
    var verb: String {
        switch self.kind {
        case "upload", "uploadData": self.field == nil ? "put" : "post"
        case "delete": "rm"
        default: "get"
        }
    }
}

extension TransferRow {
    /// The row of a waiting download of `url` into `folder`, as a manager would insert it (for benchmarks, which
    /// write to a store without a manager).
    package static func waitingDownload(id: String, url: String, folder: String) -> TransferRow {
        TransferRow(
            id: id,
            url: url,
            destinationKind: "folder",
            destinationPath: folder,
            folder: folder,
            nameComponents: "[]",
            usesContentDisposition: false,
            conflictPolicy: "rename",
            headers: "[]",
            checksum: nil,
            expectedSize: nil,
            computesSHA256: false,
            state: "waiting",
            bytesOnDisk: 0,
            totalSize: nil,
            etag: nil,
            lastModified: nil,
            attempts: 0,
            updatedAt: 0
        )
    }

    /// The request this row records (without the secret headers, which are never stored). A download's operation and
    /// an empty list of headers (most rows) are read without `JSONDecoder`: `haul resume` rebuilds a request from every
    /// row of its batch.
    var request: TransferRequest? {
        guard let url = URL(string: self.url), let operation = StoredOperation(json: self.operation)?.operation else {
            return nil
        }
        let path = URL(
            filePath: self.destinationPath,
            directoryHint: self.destinationKind == "file" ? .notDirectory : .isDirectory
        )
        let pairs =
            self.headers == "[]"
            ? [] : (try? JSONDecoder().decode([[String]].self, from: Data(self.headers.utf8))) ?? []
        let headers = pairs.compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil }
        return TransferRequest(
            url: url,
            destination: self.destinationKind == "file" ? .file(path) : .folder(path),
            id: TransferID(self.id),
            expectedByteCount: self.expectedSize,
            checksum: self.checksum.flatMap(Checksum.init(parsing:)),
            headers: headers,
            conflictPolicy: ConflictPolicy(name: self.conflictPolicy),
            computesSHA256: self.computesSHA256,
            operation: operation
        )
    }
}

/// A change to the store, queued by the manager and written in batches by ``StoreWriter``.
package enum StoreOperation: Sendable {
    /// A transfer's row, inserted (or, when the store has it, updated as ``SQLText/insert`` says) as item `position`
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

    /// Applies the operation as `owner`. The holder of a transfer's lease changes its row; while no one holds it
    /// (or the lease expired), anyone may, unless the row says completed: a manager waiting for another never
    /// overwrites the other's result. Every settled state releases the lease, except a completion recorded before its
    /// rename (``publishing``), which keeps it until it lapses.
    ///
    /// - Returns: whether the operation gave `owner` the transfer's lease: an inserted row in state `waiting` is
    ///   leased to its inserter at once (when no one else holds it), so that starting it needs no claim of its own.
    @discardableResult
    func apply(_ db: Database, owner: String, statements: inout StoreStatements) throws -> Bool {
        let now = Date().timeIntervalSince1970
        switch self {
        case .insert(let item):
            let leases = item.row.state == TransferState.waiting.description
            // A transfer a slice holds meets its insert as the row it stands for: written out first when the insert
            // may change it, left where it is (only the batch entry written) when the insert would not.
            if try statements.holdsSlices(db),
                try db.count(SQLText.rowCount, &statements, { bind in bind.bind(item.id) }) == 0,
                let sliced = try TransferStore.slicedRows([item.row.id], in: db)[0]
            {
                let mine =
                    sliced.leaseOwner == owner
                    || ((sliced.leaseOwner == nil || (sliced.leaseExpires ?? 0) < now)
                        && sliced.state != TransferState.completed.description)
                guard mine else {
                    return try StoreOperation.joinBatch(batchID: item.batchID, position: item.position, item.id)
                        .apply(db, owner: owner, statements: &statements)
                }
                statements.forgetOwnSliceEntry(item.id)
                try db.run(SQLText.promote, &statements) { bind in bind.all(of: sliced) }
            }
            try db.run(SQLText.insert[0], &statements) { bind in
                bind.insertValues(of: item, owner: owner, now: now)
                bind.mine(owner, now)
            }
            let leased = leases && db.changesCount > 0
            try db.run(SQLText.batchEntry, &statements) { bind in
                bind.bind(item.batchID.rawValue)
                bind.bind(item.position)
                bind.bind(item.row.id)
            }
            return leased
        case .joinBatch(let batchID, let position, let id):
            try db.run(SQLText.batchEntry, &statements) { bind in
                bind.bind(batchID.rawValue)
                bind.bind(position)
                bind.bind(id)
            }
        case .reopen(let id, let completedAt, let staleHolder):
            try db.run(SQLText.reopen, changing: id, as: owner, &statements) { bind in
                bind.bind(id)
                bind.bind(completedAt)
                bind.bind(now)
                bind.bind(staleHolder)
            }
        case .state(let id, let state, let attempts):
            // Waiting keeps the lease the insert took (see ``insert(_:)``); running renews nothing here either.
            let releases = state != .running && state != .waiting
            try db.run(releases ? SQLText.stateReleasingLease : SQLText.state, changing: id, as: owner, &statements) {
                bind in
                bind.bind(state.description)
                bind.bind(attempts)
                bind.bind(now)
                if releases { bind.bind(owner) }
                bind.bind(id)
                bind.mine(owner, now)
            }
        case .validator(let id, let etag, let lastModified, let totalSize):
            try db.run(SQLText.validator, changing: id, as: owner, &statements) { bind in
                bind.bind(etag)
                bind.bind(lastModified)
                bind.bind(totalSize)
                bind.bind(now)
                bind.bind(id)
                bind.mine(owner, now)
            }
        case .checkpoint(let id, let bytes):
            // A checkpoint also renews the lease.
            try db.run(SQLText.checkpoint, changing: id, as: owner, &statements) { bind in
                bind.bind(bytes)
                bind.bind(now)
                bind.bind(now + TransferStore.leaseDuration)
                bind.bind(id)
                bind.bind(owner)
            }
        case .completed(let id, let file, let modified):
            try db.run(SQLText.completed, changing: id, as: owner, &statements) { bind in
                bind.bind(file.byteCount)
                bind.bind(file.byteCount)
                bind.bind(file.path.path)
                bind.bind(file.byteCount)
                bind.bind(modified)
                bind.bind(file.sha256)
                bind.bind(now)
                bind.bind(owner)
                bind.bind(id)
                bind.mine(owner, now)
            }
        case .publishing(let id, let finalPath, let size, let sha256, let modified):
            // Sliced by this manager and still there: recorded in its slice with the transaction's others. No other
            // process writes a sliced transfer out while its slice's lease lasts (an insert leaves it, a claim finds
            // it held); after, one may have taken it over, and its row is then the one to change.
            if let place = statements.takeOwnSliceEntry(id, owner: owner),
                try now < place.leaseExpires || db.count(SQLText.rowCount, &statements, { $0.bind(id) }) == 0
            {
                let completion = SliceCompletion(
                    entry: place.entry,
                    finalPath: finalPath,
                    size: size,
                    sha256: sha256,
                    modified: modified
                )
                statements.record(completion, inSlice: place.slice, owner: owner)
                return false
            }
            try db.run(SQLText.publishing, changing: id, as: owner, &statements) { bind in
                bind.bind(size)
                bind.bind(finalPath)
                bind.bind(modified)
                bind.bind(sha256)
                bind.bind(now)
                bind.bind(owner)
                bind.bind(now + TransferStore.leaseDuration)
                bind.bind(id)
            }
        case .releaseLease(let id, let holder):
            try db.run(SQLText.releaseLease, changing: id, as: owner, &statements) { bind in
                bind.bind(id)
                bind.bind(holder)
            }
        case .failed(let id, let error, let attempts):
            try db.run(SQLText.failed, changing: id, as: owner, &statements) { bind in
                bind.bind(error.code.description)
                bind.bind(error.message)
                bind.bind(error.httpStatus)
                bind.bind(attempts)
                bind.bind(now)
                bind.bind(owner)
                bind.bind(id)
                bind.mine(owner, now)
            }
        case .listComplete(let batchID):
            try db.run(SQLText.listComplete, &statements) { bind in bind.bind(batchID.rawValue) }
        }
        return false
    }

    /// Applies a run of ``insert(_:)`` operations (any other operation in it is a programming error) with one
    /// statement per table for every ``bulkInsertRows`` of them: the same rows as one at a time, for about half the
    /// writer's cost per row (each statement has its fixed cost: binding checks, a step, a reset).
    ///
    /// - Returns: the transfers whose lease `owner` took, as ``apply(_:owner:statements:)`` reports them one at a
    ///   time. When a statement changed fewer rows than it held (a row another manager holds), none of its rows count
    ///   as leased: they are claimed before their requests, as usual.
    static func applyInserts(
        _ operations: ArraySlice<StoreOperation>,
        _ db: Database,
        owner: String,
        statements: inout StoreStatements
    ) throws -> [TransferID] {
        if operations.contains(where: { !$0.isInsert }) {
            // Each reopening before the inserts, then the inserts in bulk: a reopening concerns its own transfer's
            // row only, and comes before that row's insert either way.
            for operation in operations where !operation.isInsert {
                try operation.apply(db, owner: owner, statements: &statements)
            }
            return try Self.applyInserts(
                ArraySlice(operations.filter(\.isInsert)),
                db,
                owner: owner,
                statements: &statements
            )
        }
        var leased: [TransferID] = []
        var start = operations.startIndex
        for (level, size) in bulkInsertRows.enumerated() {
            while operations.endIndex - start >= size {
                let chunk = operations[start..<(start + size)]
                let now = Date().timeIntervalSince1970
                let shared = Self.sharedInsert(chunk)
                if let first = shared,
                    try Self.insertSlice(chunk, first: first, db, owner: owner, now: now, statements: &statements)
                {
                    for index in chunk.indices {
                        if case .insert(let item) = chunk[index] { leased.append(item.id) }
                    }
                    start += size
                    continue
                }
                // A chunk with a transfer that a slice holds goes one insert at a time (see `apply`).
                if try statements.holdsSlices(db),
                    try TransferStore.slicePlaces(chunk.indices.compactMap { chunk[$0].insertedID?.rawValue }, in: db)
                        .contains(where: { $0 != nil })
                {
                    try Self.applyEach(chunk, db, owner: owner, statements: &statements, leased: &leased)
                    start += size
                    continue
                }
                if let first = shared {
                    try db.run(SQLText.sharedInsert[level], &statements) { bind in
                        bind.sharedInsertValues(of: first, leaseOwner: owner, now: now)
                        for index in chunk.indices {
                            guard case .insert(let item) = chunk[index] else { continue }
                            bind.ownInsertValues(of: item)
                        }
                    }
                } else {
                    try db.run(SQLText.insert[level + 1], &statements) { bind in
                        for index in chunk.indices {
                            guard case .insert(let item) = chunk[index] else { continue }
                            bind.insertValues(of: item, owner: owner, now: now)
                        }
                        bind.mine(owner, now)
                    }
                }
                if db.changesCount == size {
                    for index in chunk.indices {
                        if case .insert(let item) = chunk[index], item.row.state == TransferState.waiting.description {
                            leased.append(item.id)
                        }
                    }
                }
                try Self.insertEntries(chunk, level: level, db, statements: &statements)
                start += size
            }
        }
        try Self.applyEach(operations[start...], db, owner: owner, statements: &statements, leased: &leased)
        return leased
    }

    /// Applies `operations` one at a time, adding to `leased` each transfer whose lease an insert took.
    private static func applyEach(
        _ operations: ArraySlice<StoreOperation>,
        _ db: Database,
        owner: String,
        statements: inout StoreStatements,
        leased: inout [TransferID]
    ) throws {
        for index in operations.indices {
            if try operations[index].apply(db, owner: owner, statements: &statements),
                let id = operations[index].insertedID
            {
                leased.append(id)
            }
        }
    }

    /// Inserts the batch entries of `chunk`, a run of ``StoreOperation/bulkInsertRows``[`level`] inserts, in one
    /// statement: with the batch's number bound once when the rows share it (they nearly always do).
    private static func insertEntries(
        _ chunk: ArraySlice<StoreOperation>,
        level: Int,
        _ db: Database,
        statements: inout StoreStatements
    ) throws {
        guard case .insert(let first) = chunk.first else { return }
        let batchID = first.batchID
        let shared = chunk.allSatisfy { operation in
            if case .insert(let item) = operation { item.batchID == batchID } else { false }
        }
        try db.run(shared ? SQLText.sharedBatchEntries[level] : SQLText.batchEntries[level], &statements) { bind in
            if shared { bind.bind(batchID.rawValue) }
            for index in chunk.indices {
                guard case .insert(let item) = chunk[index] else { continue }
                if !shared { bind.bind(item.batchID.rawValue) }
                bind.bind(item.position)
                bind.bind(item.row.id)
            }
        }
    }

    /// The first row of `chunk` when every row in it is a new waiting row with the same values as that one in the
    /// columns ``SQLText/sharedInsert`` binds once (a batch's rows, nearly always): the statement then binds 9 values
    /// a row instead of 21.
    static func sharedInsert(_ chunk: ArraySlice<StoreOperation>) -> InsertedRow? {
        guard case .insert(let first) = chunk.first, first.row.state == TransferState.waiting.description else {
            return nil
        }
        let row = first.row
        for index in chunk.indices.dropFirst() {
            guard case .insert(let item) = chunk[index] else { return nil }
            let other = item.row
            guard other.state == row.state, other.destinationKind == row.destinationKind,
                other.destinationPath == row.destinationPath, other.folder == row.folder,
                other.usesContentDisposition == row.usesContentDisposition,
                other.conflictPolicy == row.conflictPolicy, other.headers == row.headers,
                other.computesSHA256 == row.computesSHA256, other.operation == row.operation
            else { return nil }
        }
        return first
    }

    /// How many rows one bulk insert statement holds, largest first (a run is cut into these; the rest, fewer than
    /// the smallest, one at a time). Each size is a prepared statement of its own.
    static let bulkInsertRows = [32, 8]

    /// Whether this operation inserts a row.
    var isInsert: Bool {
        if case .insert = self { true } else { false }
    }

    /// Whether this operation goes in a run for ``applyInserts(_:_:owner:statements:)``: an insert, or a reopening
    /// before one.
    var runsWithInserts: Bool {
        switch self {
        case .insert, .reopen: true
        default: false
        }
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

extension StatementBinder {
    /// Binds every column of `row`, in the order of ``TransferRow/columns``.
    mutating func all(of row: TransferRow) {
        self.bind(row.id)
        self.bind(row.url)
        self.bind(row.destinationKind)
        self.bind(row.destinationPath)
        self.bind(row.folder)
        self.bind(row.nameComponents)
        self.bind(row.usesContentDisposition)
        self.bind(row.conflictPolicy)
        self.bind(row.headers)
        self.bind(row.checksum)
        self.bind(row.expectedSize)
        self.bind(row.computesSHA256)
        self.bind(row.state)
        self.bind(row.bytesOnDisk)
        self.bind(row.totalSize)
        self.bind(row.etag)
        self.bind(row.lastModified)
        self.bind(row.attempts)
        self.bind(row.updatedAt)
        self.bind(row.finalPath)
        self.bind(row.finalSize)
        self.bind(row.finalModified)
        self.bind(row.sha256)
        self.bind(row.errorCode)
        self.bind(row.errorMessage)
        self.bind(row.httpStatus)
        self.bind(row.leaseOwner)
        self.bind(row.leaseExpires)
        self.bind(row.operation)
    }

    /// Binds the two parameters of ``SQLText/mine``: the owner, then now.
    mutating func mine(_ owner: String, _ now: Double) {
        self.bind(owner)
        self.bind(now)
    }

    /// Binds the values a batch's rows share in an insert (``SQLText/insert``, ``SQLText/sharedInsert``), as
    /// `item`'s row has them, leased to `leaseOwner` (none: no lease). The row's fields are read where they are: a
    /// row passed as a value was copied out of its `InsertedRow` (a retain and a release of each of its strings).
    mutating func sharedInsertValues(of item: InsertedRow, leaseOwner: String?, now: Double) {
        self.bind(item.row.destinationKind)
        self.bind(item.row.destinationPath)
        self.bind(item.row.folder)
        self.bind(item.row.usesContentDisposition)
        self.bind(item.row.conflictPolicy)
        self.bind(item.row.headers)
        self.bind(item.row.computesSHA256)
        self.bind(item.row.state)
        self.bind(now)
        self.bind(item.row.operation)
        self.bind(leaseOwner)
        self.bind(leaseOwner == nil ? nil : now + TransferStore.insertLeaseDuration)
    }

    /// Binds one row's own values in an insert (``SQLText/insert``, ``SQLText/sharedInsert``).
    mutating func ownInsertValues(of item: InsertedRow) {
        self.bind(item.row.id)
        self.bind(item.row.url)
        self.bind(item.row.nameComponents)
        self.bind(item.row.checksum)
        self.bind(item.row.expectedSize)
        self.bind(item.row.bytesOnDisk)
        self.bind(item.row.totalSize)
        self.bind(item.row.etag)
        self.bind(item.row.lastModified)
    }

    /// Binds all of one row's values in ``SQLText/insert``: a row in state `waiting` is leased to `owner`.
    mutating func insertValues(of item: InsertedRow, owner: String, now: Double) {
        self.ownInsertValues(of: item)
        let leases = item.row.state == TransferState.waiting.description
        self.sharedInsertValues(of: item, leaseOwner: leases ? owner : nil, now: now)
    }
}

/// One of the store's statements: its text, and its number among them (its place in a ``StoreStatements``).
struct StoreSQL: Sendable {
    let number: Int
    let text: String
}

/// The store's statements, built once: GRDB keeps them prepared by their text, so the text stays constant.
enum SQLText {
    /// How many statements there are (their numbers run from 0 to one less).
    static let count = all.count
    /// Every statement (their numbers are each one's own: a test checks it).
    static var all: [StoreSQL] {
        insert + [batchEntry] + batchEntries + sharedInsert + sharedBatchEntries + [
            state, stateReleasingLease, validator, checkpoint, completed, publishing, releaseLease, reopen, failed,
            listComplete, sliceProbe, sliceInsert, sliceEntries, sliceResult, promote, rowCount,
        ]
    }

    /// How many requests a slice holds: a bulk insert's largest run (``StoreOperation/bulkInsertRows``).
    static let sliceSize = StoreOperation.bulkInsertRows[0]
    /// How many of a slice's identifiers (bound once each) the store holds already, as rows or in slices.
    static let sliceProbe = StoreSQL(
        number: 20,
        text: {
            let ids = (1...sliceSize).map { "?\($0)" }.joined(separator: ", ")
            return "SELECT (SELECT COUNT(*) FROM transfer WHERE id IN (\(ids))) "
                + "+ (SELECT COUNT(*) FROM sliceEntry WHERE id IN (\(ids)))"
        }()
    )
    static let sliceInsert = StoreSQL(
        number: 21,
        text: """
            INSERT INTO slice (batchID, position, destinationKind, destinationPath, folder, usesContentDisposition,
                conflictPolicy, headers, computesSHA256, operation, updatedAt, leaseOwner, leaseExpires, entries)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """
    )
    /// A slice's identifiers, the slice bound once (first), then each identifier in the order of its entries.
    static let sliceEntries = StoreSQL(
        number: 22,
        text: "INSERT INTO sliceEntry (id, slice, entry) VALUES "
            + (0..<sliceSize).map { "(?\($0 + 2), ?1, \($0))" }.joined(separator: ", ")
    )
    static let sliceResult = StoreSQL(
        number: 23,
        text: "INSERT INTO sliceResult (slice, updatedAt, leaseOwner, leaseExpires, records) VALUES (?, ?, ?, ?, ?)"
    )
    /// A row written out whole (``StatementBinder/all(of:)``), unless the store has a row for its transfer.
    static let promote = StoreSQL(
        number: 24,
        text: "INSERT OR IGNORE INTO transfer (\(TransferRow.columns)) VALUES ("
            + Array(repeating: "?", count: 29).joined(separator: ", ") + ")"
    )
    /// Whether the store has a row for a transfer (1) or not (0).
    static let rowCount = StoreSQL(number: 25, text: "SELECT COUNT(*) FROM transfer WHERE id = ?")

    /// A transfer this manager may write: its lease is this manager's, or free (or expired) on an unsettled row. Binds
    /// the owner, then now.
    static let mine = mine(owner: "?", now: "?")

    /// ``mine`` with its owner and now read from the parameters `owner` and `now` (numbered ones, which a statement
    /// binds once and refers to again).
    static func mine(owner: String, now: String) -> String {
        "(leaseOwner = \(owner) OR ((leaseOwner IS NULL OR leaseExpires < \(now)) AND state != 'completed'))"
    }

    /// Gives the lease up when this manager holds it. Binds the owner.
    static let release = "leaseOwner = CASE WHEN leaseOwner = ? THEN NULL ELSE leaseOwner END"

    /// Inserts rows (one, then each of ``StoreOperation/bulkInsertRows``), each row bound by
    /// ``StatementBinder/ownInsertValues(of:)`` and then ``StatementBinder/sharedInsertValues(of:leaseOwner:now:)``,
    /// then the two of ``mine``.
    static let insert = ([1] + StoreOperation.bulkInsertRows).enumerated().map { number, rows in
        let perRow = ownInsertColumns + sharedInsertColumns
        return StoreSQL(
            number: number,
            text: insertText(
                rows: (0..<rows).map { row in
                    insertValues(
                        own: (1...ownInsertColumns).map { "?\(row * perRow + $0)" },
                        shared: (1...sharedInsertColumns).map { "?\(row * perRow + ownInsertColumns + $0)" }
                    )
                },
                owner: "?\(rows * perRow + 1)",
                now: "?\(rows * perRow + 2)"
            )
        )
    }
    /// ``insert``'s bulk statements for rows that share all but their own values: the values they share are bound
    /// once, as numbered parameters every row refers to (``StatementBinder/sharedInsertValues(of:leaseOwner:now:)``,
    /// then ``StatementBinder/ownInsertValues(of:)`` for each row), and ``mine`` reads the owner and now from them.
    /// On 2,000 small files, 24,000 bindings fewer.
    static let sharedInsert = StoreOperation.bulkInsertRows.enumerated().map { level, rows in
        let shared = (1...sharedInsertColumns).map { "?\($0)" }
        return StoreSQL(
            number: 16 + level,
            text: insertText(
                rows: (0..<rows).map { row in
                    insertValues(
                        own: (1...ownInsertColumns).map { "?\(sharedInsertColumns + row * ownInsertColumns + $0)" },
                        shared: shared
                    )
                },
                owner: shared[sharedLeaseOwnerIndex],
                now: shared[sharedNowIndex]
            )
        )
    }

    /// How many values ``StatementBinder/ownInsertValues(of:)`` binds.
    static let ownInsertColumns = 9
    /// How many values ``StatementBinder/sharedInsertValues(of:leaseOwner:now:)`` binds.
    static let sharedInsertColumns = 12
    /// Where ``StatementBinder/sharedInsertValues(of:leaseOwner:now:)`` binds the time and the lease's owner, which
    /// ``sharedInsert``'s ``mine`` reads.
    private static let sharedNowIndex = 8
    private static let sharedLeaseOwnerIndex = 10

    /// One row's values in an insert, from the parameters of its own values and of those a batch's rows share, each
    /// in the order its binding function binds them.
    private static func insertValues(own: [String], shared: [String]) -> String {
        "(\(own[0]), \(own[1]), \(shared[0]), \(shared[1]), \(shared[2]), \(own[2]), \(shared[3]), \(shared[4]), "
            + "\(shared[5]), \(own[3]), \(own[4]), \(shared[6]), \(shared[7]), \(own[5]), \(own[6]), \(own[7]), "
            + "\(own[8]), 0, \(shared[8]), \(shared[9]), \(shared[10]), \(shared[11]))"
    }

    /// An insert of `rows` (each from ``insertValues(own:shared:)``) that updates a row the store has when it is
    /// ``mine`` for the parameters `owner` and `now`.
    private static func insertText(rows: [String], owner: String, now: String) -> String {
        """
        INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents,
            usesContentDisposition, conflictPolicy, headers, checksum, expectedSize, computesSHA256, state,
            bytesOnDisk, totalSize, etag, lastModified, attempts, updatedAt, operation, leaseOwner, leaseExpires)
        VALUES \(rows.joined(separator: ", "))
        ON CONFLICT(id) DO UPDATE SET state = excluded.state, headers = excluded.headers,
            checksum = excluded.checksum, expectedSize = excluded.expectedSize,
            operation = excluded.operation, errorCode = NULL, errorMessage = NULL, httpStatus = NULL,
            updatedAt = excluded.updatedAt, leaseOwner = excluded.leaseOwner, leaseExpires = excluded.leaseExpires
        WHERE \(mine(owner: owner, now: now))
        """
    }

    static let batchEntry = StoreSQL(
        number: 3,
        text: "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES (?, ?, ?)"
    )
    /// ``batchEntry`` for each of ``StoreOperation/bulkInsertRows`` rows.
    static let batchEntries = StoreOperation.bulkInsertRows.enumerated().map { level, rows in
        StoreSQL(
            number: 4 + level,
            text: "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES "
                + Array(repeating: "(?, ?, ?)", count: rows).joined(separator: ", ")
        )
    }
    /// ``batchEntries`` for rows of one batch, its number bound once (first), then each row's position and transfer.
    static let sharedBatchEntries = StoreOperation.bulkInsertRows.enumerated().map { level, rows in
        StoreSQL(
            number: 18 + level,
            text: "INSERT OR REPLACE INTO batchEntry (batchID, position, transferID) VALUES "
                + (0..<rows).map { "(?1, ?\(2 * $0 + 2), ?\(2 * $0 + 3))" }.joined(separator: ", ")
        )
    }
    static let state = StoreSQL(
        number: 6,
        text: """
            UPDATE transfer SET state = ?, attempts = MAX(attempts, ?), updatedAt = ? WHERE id = ? AND \(mine)
            """
    )
    static let stateReleasingLease = StoreSQL(
        number: 7,
        text: """
            UPDATE transfer SET state = ?, attempts = MAX(attempts, ?), updatedAt = ?, \(release) WHERE id = ? AND \(mine)
            """
    )
    static let validator = StoreSQL(
        number: 8,
        text: """
            UPDATE transfer SET etag = ?, lastModified = ?, totalSize = ?, updatedAt = ? WHERE id = ? AND \(mine)
            """
    )
    static let checkpoint = StoreSQL(
        number: 9,
        text: """
            UPDATE transfer SET bytesOnDisk = ?, updatedAt = ?, leaseExpires = ? WHERE id = ? AND leaseOwner = ?
            """
    )
    static let completed = StoreSQL(
        number: 10,
        text: """
            UPDATE transfer SET state = 'completed', bytesOnDisk = ?, totalSize = ?, finalPath = ?,
                finalSize = ?, finalModified = ?, sha256 = ?, errorCode = NULL, errorMessage = NULL,
                httpStatus = NULL, updatedAt = ?, \(release) WHERE id = ? AND \(mine)
            """
    )
    static let publishing = StoreSQL(
        number: 11,
        text: """
            UPDATE transfer SET state = 'completed', bytesOnDisk = ?1, totalSize = ?1, finalPath = ?2, finalSize = ?1,
                finalModified = ?3, sha256 = ?4, errorCode = NULL, errorMessage = NULL, httpStatus = NULL,
                updatedAt = ?5, leaseOwner = ?6, leaseExpires = ?7
            WHERE id = ?8 AND \(mine(owner: "?6", now: "?5"))
            """
    )
    static let releaseLease = StoreSQL(
        number: 12,
        text: "UPDATE transfer SET leaseOwner = NULL, leaseExpires = NULL WHERE id = ? AND leaseOwner = ?"
    )
    /// Binds the id, the `updatedAt` read, now, and the holder whose process is gone (or `NULL`).
    static let reopen = StoreSQL(
        number: 13,
        text: """
            UPDATE transfer SET state = 'waiting', leaseOwner = NULL, leaseExpires = NULL
            WHERE id = ? AND state = 'completed' AND updatedAt = ?
                AND (leaseOwner IS NULL OR leaseExpires < ? OR leaseOwner = ?)
            """
    )
    static let failed = StoreSQL(
        number: 14,
        text: """
            UPDATE transfer SET state = 'failed', errorCode = ?, errorMessage = ?, httpStatus = ?,
                attempts = MAX(attempts, ?), updatedAt = ?, \(release) WHERE id = ? AND \(mine)
            """
    )
    static let listComplete = StoreSQL(
        number: 15,
        text: "UPDATE batch SET listComplete = 1 WHERE id = ?"
    )
}

extension Database {
    /// `execute(sql:arguments:)` through the statement cache: the store's statements are few and constant, and
    /// preparing one costs more than running it (SQLite's parser and GRDB's authorizer, per the profile).
    func executeCached(sql: String, arguments: StatementArguments = StatementArguments()) throws {
        try self.cachedStatement(sql: sql).execute(arguments: arguments)
    }
}

/// JSON text for the store's columns that hold arrays of strings, written without `JSONEncoder`: a row is written
/// for every transfer added, and three encoders per row were 5 % of the CPU on a list of small files. Read back by
/// ``strings(_:)``.
enum JSONText {
    /// A JSON array of strings; with `elementsAreJSON`, of elements that are JSON text already. Written in one pass into
    /// a string of the exact size, counted first; when no element needs an escape (nearly always), each element's bytes
    /// are copied at once.
    static func array(_ elements: [String], elementsAreJSON: Bool = false) -> String {
        var count = 2 + max(elements.count - 1, 0)
        // Whether any element has a byte to escape: when none has (nearly always), each is copied whole.
        var escapes = false
        for index in elements.indices {
            count += elements[index].withUTF8Bytes { bytes in
                guard !elementsAreJSON else { return bytes.count }
                let quoted = Self.quotedCount(bytes)
                if quoted != bytes.count + 2 { escapes = true }
                return quoted
            }
        }
        return String(unsafeUninitializedCapacity: count) { text in
            var at = 0
            Self.put(UInt8(ascii: "["), into: text, at: &at)
            for index in elements.indices {
                if index > 0 { Self.put(UInt8(ascii: ","), into: text, at: &at) }
                at = elements[index].withUTF8Bytes { bytes in
                    if escapes, !elementsAreJSON { return Self.writeEscaped(bytes, into: text, at: at) }
                    var end = at
                    if !elementsAreJSON { Self.put(UInt8(ascii: "\""), into: text, at: &end) }
                    _ = UnsafeMutableBufferPointer(rebasing: text[end..<(end + bytes.count)]).initialize(from: bytes)
                    end += bytes.count
                    if !elementsAreJSON { Self.put(UInt8(ascii: "\""), into: text, at: &end) }
                    return end
                }
            }
            Self.put(UInt8(ascii: "]"), into: text, at: &at)
            return at
        }
    }

    /// Whether a byte is written escaped in a JSON string (RFC 8259 §7): `"`, `\` and the control characters. They
    /// are ASCII, and ASCII bytes never occur inside a multi-byte character, so the bytes are checked one by one.
    private static func needsEscape(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20
    }

    /// How many bytes ``writeEscaped(_:into:at:)`` writes for `bytes`.
    private static func quotedCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var count = bytes.count + 2
        for byte in bytes where Self.needsEscape(byte) {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"):
                count += 1
            default: count += 5
            }
        }
        return count
    }

    /// Writes `bytes` as a JSON string (quoted, escaped) into `text` from `start`, and returns where it ends.
    private static func writeEscaped(
        _ bytes: UnsafeBufferPointer<UInt8>,
        into text: UnsafeMutableBufferPointer<UInt8>,
        at start: Int
    ) -> Int {
        var at = start
        Self.put(UInt8(ascii: "\""), into: text, at: &at)
        for byte in bytes {
            guard Self.needsEscape(byte) else {
                Self.put(byte, into: text, at: &at)
                continue
            }
            Self.put(UInt8(ascii: "\\"), into: text, at: &at)
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): Self.put(byte, into: text, at: &at)
            case UInt8(ascii: "\n"): Self.put(UInt8(ascii: "n"), into: text, at: &at)
            case UInt8(ascii: "\r"): Self.put(UInt8(ascii: "r"), into: text, at: &at)
            case UInt8(ascii: "\t"): Self.put(UInt8(ascii: "t"), into: text, at: &at)
            default:
                for digit in [
                    UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hexDigit(byte >> 4), hexDigit(byte & 0x0f),
                ] {
                    Self.put(digit, into: text, at: &at)
                }
            }
        }
        Self.put(UInt8(ascii: "\""), into: text, at: &at)
        return at
    }

    /// Writes `byte` at `at`, and moves `at` past it.
    private static func put(_ byte: UInt8, into text: UnsafeMutableBufferPointer<UInt8>, at: inout Int) {
        text[at] = byte
        at += 1
    }

    /// The strings of a JSON array of strings (`nil` when `text` is not one), as ``array(_:elementsAreJSON:)`` writes
    /// them. Text without a backslash or a control character (names and paths, nearly always) is split here; anything
    /// else goes to `JSONDecoder`.
    static func strings(_ text: String) -> [String]? {
        var text = text
        let split = text.withUTF8 { bytes -> [String]? in
            let quote = UInt8(ascii: "\"")
            guard bytes.count >= 2, bytes.first == UInt8(ascii: "["), bytes.last == UInt8(ascii: "]"),
                !bytes.contains(where: { $0 == UInt8(ascii: "\\") || $0 < 0x20 })
            else { return nil }
            var strings: [String] = []
            var index = 1
            let end = bytes.count - 1
            while index < end {
                // A string, then a comma before the next one or the closing bracket.
                guard bytes[index] == quote, let close = bytes[(index + 1)..<end].firstIndex(of: quote) else {
                    return nil
                }
                strings.append(String(decoding: bytes[(index + 1)..<close], as: UTF8.self))
                index = close + 1
                if index < end {
                    guard bytes[index] == UInt8(ascii: ","), index + 1 < end else { return nil }
                    index += 1
                }
            }
            return strings
        }
        return split ?? (try? JSONDecoder().decode([String].self, from: Data(text.utf8)))
    }
}

/// Which transfers a store holds, as a 64-bit digest of each identifier's text: enough to tell that a request is new
/// (most of a batch) without reading the store, in 16 bytes or so a transfer. Read once per manager, when its first
/// request comes. Two digests can be equal: `mayContain` then says yes for a transfer the store does not hold, which
/// costs only the read of a row that is not there.
struct TransferIDDigests: Sendable {
    private var digests: Set<Int> = []

    var count: Int { self.digests.count }

    mutating func insert(_ text: UnsafeRawBufferPointer) {
        self.digests.insert(Self.digest(text))
    }

    func mayContain(_ id: TransferID) -> Bool {
        guard !self.digests.isEmpty else { return false }
        var text = id.rawValue
        return self.digests.contains(text.withUTF8 { Self.digest(UnsafeRawBufferPointer($0)) })
    }

    /// Hasher's SipHash, seeded per process: the same in the reading and the asking, which is all it needs.
    private static func digest(_ text: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: text)
        return hasher.finalize()
    }
}
