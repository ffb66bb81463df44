import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers

// A batch's requests stored by the slice: the 32 requests of a bulk insert that share their batch's values (as
// `SQLText.sharedInsert` binds them once) are one row of `slice`, the values they share once and each request's own
// values packed into a blob, instead of 32 rows of `transfer` and 32 batch entries; each transaction's completions of
// a slice's requests are one row of `sliceResult`, instead of an `UPDATE` of each request's row. A request's
// identifier is in `sliceEntry` (its slice, and its place there): the key that keeps a transfer in one place only.
//
// A sliced request becomes a row of `transfer` (it is promoted, `INSERT OR IGNORE` of the row it stands for) as soon
// as anything but its own manager's completion changes it: a claim that takes its lease over, a state, a validator, a
// checkpoint, a failure, a reopening, an insert of its identifier that may change it (one that would not, because
// another holds the lease, writes only its batch entry). From then on its row is the truth: readers take a row over
// a slice's entry and its completions. While the slice's lease lasts, no other process writes an entry out, so its
// manager records the completion in the slice without looking for a row.

/// Values packed one after the other, as a blob: an integer as its 8 bytes (little-endian), a text as its length (4
/// bytes) and its UTF-8, an optional as a byte (0 for none, 1 for a value) before the value.
struct PackedValues {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 0) {
        self.bytes.reserveCapacity(capacity)
    }

    mutating func append(_ value: Int64) {
        var bits = UInt64(bitPattern: value)
        for _ in 0..<8 {
            self.bytes.append(UInt8(truncatingIfNeeded: bits))
            bits >>= 8
        }
    }

    mutating func append(_ value: Int64?) {
        guard let value else { return self.bytes.append(0) }
        self.bytes.append(1)
        self.append(value)
    }

    mutating func append(_ value: Double?) {
        self.append(value.map { Int64(bitPattern: $0.bitPattern) })
    }

    mutating func append(_ text: String) {
        text.withUTF8Bytes { utf8 in
            var count = UInt32(truncatingIfNeeded: utf8.count)
            for _ in 0..<4 {
                self.bytes.append(UInt8(truncatingIfNeeded: count))
                count >>= 8
            }
            self.bytes.append(contentsOf: utf8)
        }
    }

    mutating func append(_ text: String?) {
        guard let text else { return self.bytes.append(0) }
        self.bytes.append(1)
        self.append(text)
    }
}

/// Reads what ``PackedValues`` packed, in the same order; a value cut short or a bad optional marker is an error (a
/// blob the store did not write).
struct PackedReader {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { self.offset == self.bytes.count }

    mutating func integer() throws -> Int64 {
        guard self.bytes.count - self.offset >= 8 else { throw Self.malformed }
        let bits = self.bytes.loadUnaligned(fromByteOffset: self.offset, as: UInt64.self)
        self.offset += 8
        return Int64(bitPattern: UInt64(littleEndian: bits))
    }

    mutating func optionalInteger() throws -> Int64? {
        try self.isPresent() ? self.integer() : nil
    }

    mutating func optionalDouble() throws -> Double? {
        try self.optionalInteger().map { Double(bitPattern: UInt64(bitPattern: $0)) }
    }

    mutating func text() throws -> String {
        String(decoding: try self.textBytes(), as: UTF8.self)
    }

    /// A text's bytes, passed over.
    private mutating func textBytes() throws -> UnsafeRawBufferPointer {
        guard self.bytes.count - self.offset >= 4 else { throw Self.malformed }
        let count = Int(UInt32(littleEndian: self.bytes.loadUnaligned(fromByteOffset: self.offset, as: UInt32.self)))
        guard self.bytes.count - self.offset - 4 >= count else { throw Self.malformed }
        self.offset += 4 + count
        return UnsafeRawBufferPointer(rebasing: self.bytes[(self.offset - count)..<self.offset])
    }

    mutating func optionalText() throws -> String? {
        try self.isPresent() ? self.text() : nil
    }

    /// Passes over an integer, a text, or an optional of either, without reading it.
    mutating func skipInteger() throws {
        guard self.bytes.count - self.offset >= 8 else { throw Self.malformed }
        self.offset += 8
    }

    mutating func skipText() throws {
        _ = try self.textBytes()
    }

    mutating func skipOptionalInteger() throws {
        if try self.isPresent() { try self.skipInteger() }
    }

    mutating func skipOptionalText() throws {
        if try self.isPresent() { try self.skipText() }
    }

    private mutating func isPresent() throws -> Bool {
        guard self.offset < self.bytes.count else { throw Self.malformed }
        defer { self.offset += 1 }
        switch self.bytes[self.offset] {
        case 0: return false
        case 1: return true
        default: throw Self.malformed
        }
    }

    static var malformed: DatabaseError {
        DatabaseError(resultCode: .SQLITE_CORRUPT, message: "A slice of the store's requests is malformed")
    }
}

/// One request of a slice: what its row has of its own (the rest, its slice's).
struct SliceEntry: Equatable, Sendable {
    var position: Int
    var id: String
    var url: String
    var nameComponents: String
    var checksum: String?
    var expectedSize: Int64?
    var bytesOnDisk: Int64
    var totalSize: Int64?
    var etag: String?
    var lastModified: String?

    init(from reader: inout PackedReader) throws {
        self.position = Int(try reader.integer())
        self.id = try reader.text()
        self.url = try reader.text()
        self.nameComponents = try reader.text()
        self.checksum = try reader.optionalText()
        self.expectedSize = try reader.optionalInteger()
        self.bytesOnDisk = try reader.integer()
        self.totalSize = try reader.optionalInteger()
        self.etag = try reader.optionalText()
        self.lastModified = try reader.optionalText()
    }

    /// Reads an entry's bytes on disk and total size, passing over the rest (and over a whole entry).
    static func sizes(from reader: inout PackedReader) throws -> (bytesOnDisk: Int64, totalSize: Int64?) {
        try reader.skipInteger()
        try reader.skipText()
        try reader.skipText()
        try reader.skipText()
        try reader.skipOptionalText()
        try reader.skipOptionalInteger()
        let sizes = (try reader.integer(), try reader.optionalInteger())
        try reader.skipOptionalText()
        try reader.skipOptionalText()
        return sizes
    }

    /// Packs `item`'s own values, read where they are (a row passed as a value is a copy: a retain and a release
    /// of each of its strings).
    static func pack(_ item: InsertedRow, into values: inout PackedValues) {
        values.append(Int64(item.position))
        values.append(item.row.id)
        values.append(item.row.url)
        values.append(item.row.nameComponents)
        values.append(item.row.checksum)
        values.append(item.row.expectedSize)
        values.append(item.row.bytesOnDisk)
        values.append(item.row.totalSize)
        values.append(item.row.etag)
        values.append(item.row.lastModified)
    }
}

/// A sliced request's completion, recorded before its file's rename as a publishing record is: see
/// ``StoreOperation/publishing(_:finalPath:size:sha256:modified:)``.
struct SliceCompletion: Equatable, Sendable {
    /// The request's place in its slice.
    var entry: Int
    var finalPath: String
    var size: Int64
    var sha256: String?
    var modified: Double?
    /// The transaction's time and manager, and the lease it keeps until the rename is done.
    var updatedAt: Double = 0
    var leaseOwner: String? = nil
    var leaseExpires: Double? = nil

    func pack(into values: inout PackedValues) {
        values.append(Int64(self.entry))
        values.append(self.finalPath)
        values.append(self.size)
        values.append(self.sha256)
        values.append(self.modified)
    }

    init(entry: Int, finalPath: String, size: Int64, sha256: String?, modified: Double?) {
        self.entry = entry
        self.finalPath = finalPath
        self.size = size
        self.sha256 = sha256
        self.modified = modified
    }

    /// Reads a packed completion's entry and size, passing over the rest.
    static func size(from reader: inout PackedReader) throws -> (entry: Int, size: Int64) {
        let entry = Int(try reader.integer())
        try reader.skipText()
        let size = try reader.integer()
        try reader.skipOptionalText()
        try reader.skipOptionalInteger()
        return (entry, size)
    }

    init(from reader: inout PackedReader, updatedAt: Double, leaseOwner: String?, leaseExpires: Double?) throws {
        self.entry = Int(try reader.integer())
        self.finalPath = try reader.text()
        self.size = try reader.integer()
        self.sha256 = try reader.optionalText()
        self.modified = try reader.optionalDouble()
        self.updatedAt = updatedAt
        self.leaseOwner = leaseOwner
        self.leaseExpires = leaseExpires
    }
}

/// A row of `slice`, its entries unpacked, with the last completion recorded for each entry that has one.
struct StoredSlice: Sendable {
    let id: Int64
    let batchID: Int
    let destinationKind: String
    let destinationPath: String
    let folder: String
    let usesContentDisposition: Bool
    let conflictPolicy: String
    let headers: String
    let computesSHA256: Bool
    let operation: String
    let updatedAt: Double
    let leaseOwner: String?
    let leaseExpires: Double?
    let entries: [SliceEntry]
    /// By entry: the last completion recorded.
    var completions: [Int: SliceCompletion] = [:]

    /// The columns ``init(columnsOf:)`` reads, in its order.
    static let columns = """
        id, batchID, destinationKind, destinationPath, folder, usesContentDisposition, conflictPolicy, headers,
        computesSHA256, operation, updatedAt, leaseOwner, leaseExpires, entries
        """

    /// The slice a statement that selected ``columns`` stands on; without its entries unless `decodingEntries`.
    init(columnsOf handle: SQLiteStatement, decodingEntries: Bool = true) throws {
        var reader = ColumnReader(handle, from: 0)
        self.id = reader.integer()
        self.batchID = Int(reader.integer())
        self.destinationKind = reader.text()
        self.destinationPath = reader.text()
        self.folder = reader.text()
        self.usesContentDisposition = reader.bool()
        self.conflictPolicy = reader.text()
        self.headers = reader.text()
        self.computesSHA256 = reader.bool()
        self.operation = reader.text()
        self.updatedAt = reader.double()
        self.leaseOwner = reader.optionalText()
        self.leaseExpires = reader.optionalDouble()
        var entries: [SliceEntry] = []
        if decodingEntries {
            var packed = PackedReader(reader.blob())
            while !packed.isAtEnd { entries.append(try SliceEntry(from: &packed)) }
        }
        self.entries = entries
    }

    /// The row entry `index` stands for: waiting, under the slice's lease, as its insert would have left it, or
    /// completed as its last completion says.
    func row(_ index: Int) -> TransferRow {
        self.row(for: self.entries[index], completion: self.completions[index])
    }

    /// The row `entry` of this slice stands for, with its last completion if it has one.
    func row(for entry: SliceEntry, completion: SliceCompletion?) -> TransferRow {
        var row = TransferRow(
            id: entry.id,
            url: entry.url,
            destinationKind: self.destinationKind,
            destinationPath: self.destinationPath,
            folder: self.folder,
            nameComponents: entry.nameComponents,
            usesContentDisposition: self.usesContentDisposition,
            conflictPolicy: self.conflictPolicy,
            headers: self.headers,
            checksum: entry.checksum,
            expectedSize: entry.expectedSize,
            computesSHA256: self.computesSHA256,
            state: TransferState.waiting.description,
            bytesOnDisk: entry.bytesOnDisk,
            totalSize: entry.totalSize,
            etag: entry.etag,
            lastModified: entry.lastModified,
            attempts: 0,
            updatedAt: self.updatedAt,
            leaseOwner: self.leaseOwner,
            leaseExpires: self.leaseExpires,
            operation: self.operation
        )
        if let completion {
            row.state = TransferState.completed.description
            row.bytesOnDisk = completion.size
            row.totalSize = completion.size
            row.finalPath = completion.finalPath
            row.finalSize = completion.size
            row.finalModified = completion.modified
            row.sha256 = completion.sha256
            row.updatedAt = completion.updatedAt
            row.leaseOwner = completion.leaseOwner
            row.leaseExpires = completion.leaseExpires
        }
        return row
    }
}

/// An entry's place: its slice, and its index there.
struct SlicePlace: Hashable, Sendable {
    let slice: Int64
    let entry: Int
}

/// Where a request this process sliced is (for its completion, recorded in its slice while it stays there).
struct OwnSliceEntry: Sendable {
    let slice: Int64
    let entry: Int
    /// The manager that sliced it: only its own completions go to the slice.
    let owner: String
    /// When it was sliced, and when the slice's lease expires.
    let insertedAt: Double
    var leaseExpires: Double { self.insertedAt + TransferStore.insertLeaseDuration }
    /// The insert it was sliced from: its row, written out from here (no completion is recorded for an entry this
    /// process still finds here; one that is goes elsewhere).
    let inserted: InsertedRow?

    /// The row the entry stands for: the insert's, waiting, leased to `owner` from `insertedAt`.
    var row: TransferRow? {
        guard var row = self.inserted?.row else { return nil }
        row.state = TransferState.waiting.description
        row.attempts = 0
        row.updatedAt = self.insertedAt
        row.leaseOwner = self.owner
        row.leaseExpires = self.leaseExpires
        return row
    }
}

extension TransferStore {
    /// Whether the store holds any sliced request.
    static func holdsSlices(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM sliceEntry)") ?? false
    }

    /// The slices whose identifiers are `ids` (each once), with their completions.
    static func slices(_ ids: some Sequence<Int64>, in db: Database) throws -> [Int64: StoredSlice] {
        var slices: [Int64: StoredSlice] = [:]
        let sql = "SELECT \(StoredSlice.columns) FROM slice WHERE id = ?"
        let statement = try db.cachedStatement(sql: sql)
        try withExtendedLifetime(statement) {
            let handle = statement.sqliteStatement
            for id in ids where slices[id] == nil {
                defer { sqlite3_reset(handle) }
                var code = sqlite3_bind_int64(handle, 1, id)
                if code == SQLITE_OK { code = sqlite3_step(handle) }
                switch code {
                case SQLITE_ROW: slices[id] = try StoredSlice(columnsOf: handle)
                case SQLITE_DONE: continue
                default: throw db.failure(code, sql: sql)
                }
            }
        }
        try Self.addCompletions(to: &slices, in: db)
        return slices
    }

    /// The slices of batch `batchID`, in the order of their positions, with their completions.
    static func slices(ofBatch batchID: Int, in db: Database) throws -> [StoredSlice] {
        let ids = try Int64.fetchAll(
            db,
            sql: "SELECT id FROM slice WHERE batchID = ? ORDER BY position",
            arguments: [batchID]
        )
        let slices = try Self.slices(ids, in: db)
        return ids.compactMap { slices[$0] }
    }

    /// Reads the completions of `slices`.
    private static func addCompletions(to slices: inout [Int64: StoredSlice], in db: Database) throws {
        // By the keys' copy: the values change as the completions are read.
        for id in Array(slices.keys) {
            let completions = try Self.completions(ofSlice: id, in: db)
            guard completions.keys.allSatisfy(slices[id]!.entries.indices.contains) else {
                throw PackedReader.malformed
            }
            slices[id]!.completions = completions
        }
    }

    /// The completions recorded for slice `slice`, by entry: the last one of each.
    private static func completions(ofSlice slice: Int64, in db: Database) throws -> [Int: SliceCompletion] {
        let sql = "SELECT updatedAt, leaseOwner, leaseExpires, records FROM sliceResult WHERE slice = ? ORDER BY rowid"
        let statement = try db.cachedStatement(sql: sql)
        return try withExtendedLifetime(statement) {
            let handle = statement.sqliteStatement
            defer { sqlite3_reset(handle) }
            var completions: [Int: SliceCompletion] = [:]
            var code = sqlite3_bind_int64(handle, 1, slice)
            if code == SQLITE_OK { code = sqlite3_step(handle) }
            while code == SQLITE_ROW {
                var columns = ColumnReader(handle, from: 0)
                let (updatedAt, owner, expires) = (columns.double(), columns.optionalText(), columns.optionalDouble())
                var records = PackedReader(columns.blob())
                while !records.isAtEnd {
                    let completion = try SliceCompletion(
                        from: &records,
                        updatedAt: updatedAt,
                        leaseOwner: owner,
                        leaseExpires: expires
                    )
                    completions[completion.entry] = completion
                }
                code = sqlite3_step(handle)
            }
            guard code == SQLITE_DONE else { throw db.failure(code, sql: sql) }
            return completions
        }
    }

    /// Where each of `ids` is sliced (`nil` for one no slice holds).
    static func slicePlaces(_ ids: [String], in db: Database) throws -> [(slice: Int64, entry: Int)?] {
        let sql = "SELECT slice, entry FROM sliceEntry WHERE id = ?"
        let statement = try db.cachedStatement(sql: sql)
        return try withExtendedLifetime(statement) {
            let handle = statement.sqliteStatement
            return try ids.map { id in
                defer { sqlite3_reset(handle) }
                var code = id.withUTF8Bytes { StatementBinder.bindText($0, to: handle, at: 1) }
                if code == SQLITE_OK { code = sqlite3_step(handle) }
                switch code {
                case SQLITE_ROW: return (sqlite3_column_int64(handle, 0), Int(sqlite3_column_int64(handle, 1)))
                case SQLITE_DONE: return nil
                default: throw db.failure(code, sql: sql)
                }
            }
        }
    }

    /// The rows that the slices' entries for `ids` stand for (`nil` for an identifier no slice holds), whether or not
    /// a row of `transfer` has been written for one since.
    static func slicedRows(_ ids: [String], in db: Database) throws -> [TransferRow?] {
        let places = try Self.slicePlaces(ids, in: db)
        if ids.count == 1 {
            // One entry: read it alone (the others of its slice passed over).
            return [try places[0].flatMap { try Self.slicedRow(at: $0, id: ids[0], in: db) }]
        }
        let slices = try Self.slices(places.compactMap { $0?.slice }, in: db)
        return zip(ids, places).map { id, place in
            guard let place, let slice = slices[place.slice], slice.entries.indices.contains(place.entry),
                slice.entries[place.entry].id == id
            else { return nil }
            return slice.row(place.entry)
        }
    }

    /// The row that entry `place.entry` of slice `place.slice` stands for, when it is `id`'s.
    static func slicedRow(at place: (slice: Int64, entry: Int), id: String, in db: Database) throws -> TransferRow? {
        let sql = "SELECT \(StoredSlice.columns) FROM slice WHERE id = ?"
        let statement = try db.cachedStatement(sql: sql)
        let found = try withExtendedLifetime(statement) { () throws -> (StoredSlice, SliceEntry)? in
            let handle = statement.sqliteStatement
            defer { sqlite3_reset(handle) }
            var code = sqlite3_bind_int64(handle, 1, place.slice)
            if code == SQLITE_OK { code = sqlite3_step(handle) }
            guard code == SQLITE_ROW else {
                if code == SQLITE_DONE { return nil }
                throw db.failure(code, sql: sql)
            }
            let slice = try StoredSlice(columnsOf: handle, decodingEntries: false)
            var columns = ColumnReader(handle, from: 13)
            var reader = PackedReader(columns.blob())
            for _ in 0..<place.entry { _ = try SliceEntry.sizes(from: &reader) }
            return (slice, try SliceEntry(from: &reader))
        }
        guard let (slice, entry) = found, entry.id == id else { return nil }
        return slice.row(for: entry, completion: try Self.completions(ofSlice: place.slice, in: db)[place.entry])
    }

    /// Writes out the row that a slice's entry for `id` stands for (its completion included), unless a row of
    /// `transfer` has it already, for manager `owner`'s change to it: from then on the row is the transfer's, and
    /// changes as any row does. Not while another manager that is alive holds its lease. The completions `statements`
    /// holds are written first (one of them may be this entry's).
    /// - Returns: whether it wrote a row.
    @discardableResult
    static func promote(
        _ id: String,
        in db: Database,
        statements: inout StoreStatements,
        by owner: String
    ) throws -> Bool {
        try statements.writeCompletions(db)
        // Sliced by this very manager: its row is the insert's (read from the store, for anyone else).
        let own = statements.ownSliceEntry(TransferID(id))
        let row = try own?.owner == owner ? own?.row : Self.slicedRows([id], in: db)[0]
        guard let row else { return false }
        // Held by another manager that is alive, it stays in its slice: a change of this manager's would change
        // nothing on its row either, and that manager records its completion in the slice without looking for a row
        // while its lease lasts.
        if let holder = row.leaseOwner, holder != owner, (row.leaseExpires ?? 0) >= Date().timeIntervalSince1970,
            LeaseOwner.isAlive(holder)
        {
            return false
        }
        statements.forgetOwnSliceEntry(TransferID(id))
        try db.run(SQLText.promote, &statements) { bind in bind.all(of: row) }
        return db.changesCount > 0
    }

    /// Removes the slices of batch `batchID`, their entries and their completions, once the batch is forgotten.
    /// An entry another batch lists as its own (a completed transfer submitted again) is written out as a row first.
    static func forgetSlices(ofBatch batchID: Int, in db: Database) throws {
        let slices = try Self.slices(ofBatch: batchID, in: db)
        guard !slices.isEmpty else { return }
        let elsewhere = Set(
            try String.fetchAll(db, sql: "SELECT transferID FROM batchEntry WHERE batchID != ?", arguments: [batchID])
        )
        var statements = StoreStatements()
        for slice in slices {
            for index in slice.entries.indices {
                let id = slice.entries[index].id
                if elsewhere.contains(id) {
                    try db.run(SQLText.promote, &statements) { bind in bind.all(of: slice.row(index)) }
                }
                try db.execute(sql: "DELETE FROM sliceEntry WHERE id = ?", arguments: [id])
            }
            try db.execute(sql: "DELETE FROM sliceResult WHERE slice = ?", arguments: [slice.id])
            try db.execute(sql: "DELETE FROM slice WHERE id = ?", arguments: [slice.id])
        }
    }
}

extension StoreOperation {
    /// Writes `chunk`, a run of ``bulkInsertRows``[0] inserts into one batch that ``sharedInsert(_:)`` found sharing
    /// their values, as one slice, when none of its identifiers is in the store already (as a row or in a slice):
    /// each is then leased to `owner` as an insert leases a new row. With any of them there, it writes nothing (the
    /// rows are inserted as rows, so that the insert meets the row as it always has).
    /// - Returns: whether it wrote the slice.
    static func insertSlice(
        _ chunk: ArraySlice<StoreOperation>,
        first: InsertedRow,
        _ db: Database,
        owner: String,
        now: Double,
        statements: inout StoreStatements
    ) throws -> Bool {
        guard chunk.count == SQLText.sliceSize else { return false }
        // One slice is one batch's. By index: iterating copied each operation out of the array.
        for index in chunk.indices {
            guard case .insert(let item) = chunk[index], item.batchID == first.batchID else { return false }
        }
        let known = try db.count(SQLText.sliceProbe, &statements) { bind in
            for index in chunk.indices {
                guard case .insert(let item) = chunk[index] else { continue }
                bind.bind(item.id)
            }
        }
        guard known == 0 else { return false }
        var entries = PackedValues(capacity: chunk.count * 160)
        for index in chunk.indices {
            guard case .insert(let item) = chunk[index] else { continue }
            SliceEntry.pack(item, into: &entries)
        }
        try db.run(SQLText.sliceInsert, &statements) { bind in
            bind.bind(first.batchID.rawValue)
            bind.bind(first.position)
            bind.bind(first.row.destinationKind)
            bind.bind(first.row.destinationPath)
            bind.bind(first.row.folder)
            bind.bind(first.row.usesContentDisposition)
            bind.bind(first.row.conflictPolicy)
            bind.bind(first.row.headers)
            bind.bind(first.row.computesSHA256)
            bind.bind(first.row.operation)
            bind.bind(now)
            bind.bind(owner)
            bind.bind(now + TransferStore.insertLeaseDuration)
            bind.bind(blob: entries.bytes)
        }
        let slice = db.lastInsertedRowID
        try db.run(SQLText.sliceEntries, &statements) { bind in
            bind.bind(slice)
            for index in chunk.indices {
                guard case .insert(let item) = chunk[index] else { continue }
                bind.bind(item.id)
            }
        }
        statements.sliced(chunk, into: slice, owner: owner, at: now)
        return true
    }
}
