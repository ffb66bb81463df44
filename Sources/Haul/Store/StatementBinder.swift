import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers

/// Binds a prepared statement's parameters with SQLite's own calls, in order. The statements stay GRDB's (prepared
/// once, in its cache); only the binding and the step are done here, without a `DatabaseValue` per value.
struct StatementBinder {
    private let handle: SQLiteStatement
    /// Where text is copied for SQLite to read in place (`nil`: SQLite copies it).
    private let text: BoundText?
    private var index: Int32 = 1
    private var failure: Int32 = SQLITE_OK

    fileprivate init(_ handle: SQLiteStatement, text: BoundText?) {
        self.handle = handle
        self.text = text
    }

    /// How many parameters have been bound.
    fileprivate var count: Int32 { self.index - 1 }

    private mutating func check(_ code: Int32) {
        if code != SQLITE_OK && self.failure == SQLITE_OK { self.failure = code }
        self.index += 1
    }

    mutating func bind(_ value: String?) {
        guard let value else { return self.check(sqlite3_bind_null(self.handle, self.index)) }
        self.check(value.withUTF8Bytes(self.bindText))
    }

    /// Binds a transfer's identifier as its text, ``TransferID/rawValue``, without making that string.
    mutating func bind(_ id: TransferID) {
        self.check(id.withUTF8(self.bindText))
    }

    /// Binds `bytes` as text to the next parameter: copied into ``text`` when there is one, else by SQLite.
    private func bindText(_ bytes: UnsafeBufferPointer<UInt8>) -> Int32 {
        if let text = self.text {
            text.bind(bytes, to: self.handle, at: self.index)
        } else {
            Self.bindText(bytes, to: self.handle, at: self.index)
        }
    }

    /// Binds a copy of `bytes` (SQLite makes it) to parameter `index` of `handle`, with its length in bytes, not as a
    /// C string, which would end at a NUL character. SQLITE_TRANSIENT: SQLite copies the text, which lives only for
    /// this call. An empty string has no storage to point at.
    static func bindText(_ bytes: UnsafeBufferPointer<UInt8>, to handle: SQLiteStatement, at index: Int32) -> Int32 {
        guard let base = bytes.baseAddress, !bytes.isEmpty else {
            return sqlite3_bind_text(handle, index, "", 0, Self.transient)
        }
        return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
            sqlite3_bind_text(handle, index, $0, Int32(bytes.count), Self.transient)
        }
    }

    mutating func bind(_ value: Int64?) {
        guard let value else { return self.check(sqlite3_bind_null(self.handle, self.index)) }
        self.check(sqlite3_bind_int64(self.handle, self.index, value))
    }

    mutating func bind(_ value: Int?) { self.bind(value.map(Int64.init)) }

    mutating func bind(_ value: Double?) {
        guard let value else { return self.check(sqlite3_bind_null(self.handle, self.index)) }
        self.check(sqlite3_bind_double(self.handle, self.index, value))
    }

    mutating func bind(_ value: Bool) { self.bind(Int64(value ? 1 : 0)) }

    /// Binds `bytes` as a blob (SQLite copies it).
    mutating func bind(blob bytes: [UInt8]) {
        self.check(
            bytes.withUnsafeBytes { raw in
                sqlite3_bind_blob(
                    self.handle,
                    self.index,
                    raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1),
                    Int32(raw.count),
                    Self.transient
                )
            }
        )
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// The error of a binding that failed, or that bound fewer or more values than the statement has parameters.
    fileprivate func bindingError(sql: String) -> DatabaseError? {
        let expected = sqlite3_bind_parameter_count(self.handle)
        guard self.failure != SQLITE_OK || self.count != expected else { return nil }
        return DatabaseError(
            resultCode: ResultCode(rawValue: self.failure == SQLITE_OK ? SQLITE_RANGE : self.failure),
            message: "Bound \(self.count) of \(expected) parameters",
            sql: sql
        )
    }

    /// Binds with `bind`, runs the statement to its end, and resets it for its next use. Text bound through `text` is
    /// unbound before it returns (the copies are reused by the next statement).
    fileprivate static func run(
        _ statement: Statement,
        sql: String,
        text: BoundText? = nil,
        _ bind: (inout StatementBinder) -> Void
    ) throws {
        let handle = statement.sqliteStatement
        var binder = StatementBinder(handle, text: text)
        bind(&binder)
        defer {
            if let text, text.reset() { sqlite3_clear_bindings(handle) }
        }
        if let error = binder.bindingError(sql: sql) {
            sqlite3_reset(handle)
            throw error
        }
        var code = sqlite3_step(handle)
        while code == SQLITE_ROW { code = sqlite3_step(handle) }
        // After a failed step, sqlite3_reset returns the error; the message is the connection's.
        let message = code == SQLITE_DONE ? nil : String(cString: sqlite3_errmsg(sqlite3_db_handle(handle)))
        sqlite3_reset(handle)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
        }
    }
}

extension Database {
    /// The error for a statement of `sql` that SQLite failed with `code`, with the connection's message.
    func failure(_ code: Int32, sql: String) -> DatabaseError {
        let message = String(cString: sqlite3_errmsg(self.sqliteConnection))
        return DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
    }

    /// Runs a statement of `sql`, prepared once (through GRDB's statement cache) and bound by `bind`.
    ///
    /// - Throws: `DatabaseError` when a value cannot be bound, when `bind` binds fewer or more values than the
    ///   statement has parameters, or when SQLite fails the statement (a constraint, a full disk).
    func run(_ sql: String, _ bind: (inout StatementBinder) -> Void) throws {
        try StatementBinder.run(self.cachedStatement(sql: sql), sql: sql, bind)
    }

    /// Runs one of the store's statements as the `run` above does, the statement found again through `statements`.
    func run(_ sql: StoreSQL, _ statements: inout StoreStatements, _ bind: (inout StatementBinder) -> Void) throws {
        try StatementBinder.run(statements.statement(sql, in: self), sql: sql.text, text: statements.text, bind)
    }

    /// Runs one of the store's statements that changes transfer `id`'s row for manager `owner`, as `run` does; when
    /// it changed nothing because a slice still holds the transfer (no row was written for it yet), writes the row
    /// out (``TransferStore/promote(_:in:statements:by:)``) and runs it again on that row.
    func run(
        _ sql: StoreSQL,
        changing id: TransferID,
        as owner: String,
        _ statements: inout StoreStatements,
        _ bind: (inout StatementBinder) -> Void
    ) throws {
        try self.run(sql, &statements, bind)
        guard self.changesCount == 0, try statements.holdsSlices(self),
            try TransferStore.promote(id.rawValue, in: self, statements: &statements, by: owner)
        else { return }
        try self.run(sql, &statements, bind)
    }

    /// Runs one of the store's statements that selects one integer, bound by `bind`, and returns it.
    func count(
        _ sql: StoreSQL,
        _ statements: inout StoreStatements,
        _ bind: (inout StatementBinder) -> Void
    ) throws
        -> Int64
    {
        let statement = try statements.statement(sql, in: self)
        let handle = statement.sqliteStatement
        var binder = StatementBinder(handle, text: nil)
        bind(&binder)
        defer { sqlite3_reset(handle) }
        if let error = binder.bindingError(sql: sql.text) { throw error }
        let code = sqlite3_step(handle)
        guard code == SQLITE_ROW else { throw self.failure(code, sql: sql.text) }
        return sqlite3_column_int64(handle, 0)
    }
}

/// The store's statements one transaction has used, found again by their number rather than by hashing their text.
/// Made for one transaction and used on its thread only: the statements are its connection's.
struct StoreStatements {
    private var statements = [Statement?](repeating: nil, count: SQLText.count)
    /// Where the statements' text is copied while each runs.
    let text = BoundText()
    /// The requests this process sliced and still finds there (the store's ``TransferStore/ownSliceEntries``), or
    /// `nil`: then every completion is recorded as a row's, its row written out first if a slice holds it.
    let ownSliceEntries: NIOLockedValueBox<[TransferID: OwnSliceEntry]>?
    /// The requests this transaction sliced (forgotten again if it is rolled back: ``rolledBack()``).
    private var slicedIDs: [TransferID] = []
    /// Completions of sliced requests to write, by slice, and the manager that records them.
    private var completions: [Int64: PackedValues] = [:]
    private var completionOwner: String? = nil
    /// Whether the store holds sliced requests, once asked in this transaction.
    private var knownToHoldSlices: Bool? = nil

    init(ownSliceEntries: NIOLockedValueBox<[TransferID: OwnSliceEntry]>? = nil) {
        self.ownSliceEntries = ownSliceEntries
    }

    /// The prepared statement for `sql` on `db`.
    mutating func statement(_ sql: StoreSQL, in db: Database) throws -> Statement {
        if let statement = self.statements[sql.number] { return statement }
        let statement = try db.cachedStatement(sql: sql.text)
        self.statements[sql.number] = statement
        return statement
    }

    /// Whether the store holds any sliced request (asked once a transaction: this transaction's own slices count).
    mutating func holdsSlices(_ db: Database) throws -> Bool {
        if let known = self.knownToHoldSlices { return known }
        let holds = try TransferStore.holdsSlices(db)
        self.knownToHoldSlices = holds
        return holds
    }

    /// Notes that `chunk`'s inserts went into slice `slice` at `now`, each at its place, for `owner`: in
    /// ``ownSliceEntries`` at once (a claim in the same transaction may write one out already, see
    /// ``forgetOwnSliceEntry(_:)``), and in ``slicedIDs`` until the transaction has committed.
    mutating func sliced(_ chunk: ArraySlice<StoreOperation>, into slice: Int64, owner: String, at now: Double) {
        self.knownToHoldSlices = true
        guard let known = self.ownSliceEntries else { return }
        var sliced: [(TransferID, OwnSliceEntry)] = []
        sliced.reserveCapacity(chunk.count)
        for (entry, index) in chunk.indices.enumerated() {
            guard case .insert(let item) = chunk[index] else { continue }
            sliced.append(
                (item.id, OwnSliceEntry(slice: slice, entry: entry, owner: owner, insertedAt: now, inserted: item))
            )
        }
        known.withLockedValue { known in
            for (id, entry) in sliced { known[id] = entry }
        }
        self.slicedIDs += sliced.map(\.0)
    }

    /// Where `owner` sliced `id`, if it did and nothing in this process wrote the transfer's row out since (taken
    /// out: its completion goes there once). Another process may have once the slice's lease has expired: the caller
    /// then checks that no row exists.
    func takeOwnSliceEntry(_ id: TransferID, owner: String) -> OwnSliceEntry? {
        self.ownSliceEntries?.withLockedValue { entries in
            guard let entry = entries[id], entry.owner == owner else { return nil }
            entries[id] = nil
            return entry
        }
    }

    /// Where this process sliced `id`, if it did and still finds it there.
    func ownSliceEntry(_ id: TransferID) -> OwnSliceEntry? {
        self.ownSliceEntries?.withLockedValue { $0[id] }
    }

    /// Forgets that this process sliced `id`: its row is being written out.
    /// - Returns: where it was, if this process sliced it.
    @discardableResult
    func forgetOwnSliceEntry(_ id: TransferID) -> OwnSliceEntry? {
        self.ownSliceEntries?.withLockedValue { $0.removeValue(forKey: id) }
    }

    /// Forgets the requests this transaction sliced: it was rolled back.
    func rolledBack() {
        guard let known = self.ownSliceEntries, !self.slicedIDs.isEmpty else { return }
        known.withLockedValue { known in
            for id in self.slicedIDs { known[id] = nil }
        }
    }

    /// Queues a completion of a request in slice `slice`, recorded by `owner`, for ``writeCompletions(_:)``.
    mutating func record(_ completion: SliceCompletion, inSlice slice: Int64, owner: String) {
        self.completionOwner = owner
        completion.pack(into: &self.completions[slice, default: PackedValues(capacity: 16 * 64)])
    }

    /// Writes the queued completions, one row of `sliceResult` for each slice they are in, with the transaction's
    /// time and the lease that a publishing record keeps
    /// (``StoreOperation/publishing(_:finalPath:size:sha256:modified:)``).
    mutating func writeCompletions(_ db: Database) throws {
        guard !self.completions.isEmpty, let owner = self.completionOwner else { return }
        let completions = self.completions
        self.completions = [:]
        let now = Date().timeIntervalSince1970
        for (slice, records) in completions {
            try db.run(SQLText.sliceResult, &self) { bind in
                bind.bind(slice)
                bind.bind(now)
                bind.bind(owner)
                bind.bind(now + TransferStore.leaseDuration)
                bind.bind(blob: records.bytes)
            }
        }
    }
}

/// Copies of the text one statement binds, for SQLite to read in place (`SQLITE_STATIC`) until the statement has run,
/// kept in blocks that are reused, so a statement's texts cost a copy each and no allocation.
///
/// A block is never moved or freed while a statement may read it: a text that does not fit in what is left of one
/// goes into the next, and one larger than a block is left to SQLite to copy.
///
/// Used on one thread at a time (a transaction's, through ``StoreStatements``).
final class BoundText {
    /// Each block's size: a bulk insert of 32 rows binds about 10 KiB of text.
    static let blockSize = 16 * 1024

    @exclusivity(unchecked) private var blocks: [UnsafeMutableRawPointer] = []
    /// The block being filled, and how much of it is used.
    @exclusivity(unchecked) private var current = 0
    @exclusivity(unchecked) private var used = 0
    /// Whether anything was copied since the last ``reset()``.
    @exclusivity(unchecked) private var holdsCopies = false

    deinit {
        for block in self.blocks { block.deallocate() }
    }

    /// Binds a copy of `bytes` to parameter `index` of `handle`, as `SQLITE_STATIC`: the copy lasts until
    /// ``reset()``. Text larger than a block is bound as `SQLITE_TRANSIENT` (SQLite copies it).
    func bind(_ bytes: UnsafeBufferPointer<UInt8>, to handle: SQLiteStatement, at index: Int32) -> Int32 {
        let count = bytes.count
        guard count <= Self.blockSize else { return StatementBinder.bindText(bytes, to: handle, at: index) }
        if self.blocks.isEmpty {
            self.blocks.append(.allocate(byteCount: Self.blockSize, alignment: 1))
        } else if self.used + count > Self.blockSize {
            // The next block, kept from an earlier statement or new.
            self.current += 1
            self.used = 0
            if self.current == self.blocks.count {
                self.blocks.append(.allocate(byteCount: Self.blockSize, alignment: 1))
            }
        }
        let start = self.blocks[self.current] + self.used
        if let base = bytes.baseAddress { start.copyMemory(from: base, byteCount: count) }
        self.used += count
        self.holdsCopies = true
        return sqlite3_bind_text(handle, index, start.assumingMemoryBound(to: CChar.self), Int32(count), nil)
    }

    /// Makes every block free for the next statement's copies (none may be read any more).
    /// - Returns: whether any copy was made since the last reset (the statement's text bindings then point at them).
    func reset() -> Bool {
        defer {
            self.current = 0
            self.used = 0
            self.holdsCopies = false
        }
        return self.holdsCopies
    }
}

extension String {
    /// Calls `body` with the string's UTF-8 bytes, read in place when the string stores them contiguously (every
    /// string Haul makes) and copied otherwise. `withUTF8` needs a mutable copy of the string: a reference counted
    /// once more and once less on each call, and the store's writer binds strings that other threads made and count
    /// (on 2,000 small files, about 30,000 bindings).
    func withUTF8Bytes<R>(_ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = self.utf8.withContiguousStorageIfAvailable(body) { return result }
        var copy = self
        return copy.withUTF8(body)
    }
}
