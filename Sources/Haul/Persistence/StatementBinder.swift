import GRDB
import GRDBSQLite

/// Binds a prepared statement's parameters with SQLite's own calls, in order.
///
/// The store's writer runs a handful of statements per file. Through GRDB's `StatementArguments` every value became
/// an existential, then a `DatabaseValue`, then a binding: on a list of small files that cost the writer's thread
/// about 120 of its 585 samples, close to SQLite's own 163 (see docs/benchmarks.md). The statements stay GRDB's
/// (prepared once, in its cache); only the binding and the step are done here.
struct StatementBinder {
    private let handle: SQLiteStatement
    private var index: Int32 = 1
    private var failure: Int32 = SQLITE_OK

    fileprivate init(_ handle: SQLiteStatement) { self.handle = handle }

    /// How many parameters have been bound.
    fileprivate var count: Int32 { self.index - 1 }

    private mutating func check(_ code: Int32) {
        if code != SQLITE_OK && self.failure == SQLITE_OK { self.failure = code }
        self.index += 1
    }

    mutating func bind(_ value: String?) {
        guard let value else { return self.check(sqlite3_bind_null(self.handle, self.index)) }
        self.check(Self.bindText(value, to: self.handle, at: self.index))
    }

    /// Binds `value` to parameter `index` of `handle`, with its length in bytes, not as a C string, which would end at
    /// a NUL character. SQLITE_TRANSIENT: SQLite copies the text, which lives only for this call. An empty string has
    /// no storage to point at.
    static func bindText(_ value: String, to handle: SQLiteStatement, at index: Int32) -> Int32 {
        var value = value
        return value.withUTF8 { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else {
                return sqlite3_bind_text(handle, index, "", 0, Self.transient)
            }
            return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) {
                sqlite3_bind_text(handle, index, $0, Int32(bytes.count), Self.transient)
            }
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

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Binds with `bind`, runs the statement to its end, and resets it for its next use.
    fileprivate static func run(_ statement: Statement, sql: String, _ bind: (inout StatementBinder) -> Void) throws {
        let handle = statement.sqliteStatement
        var binder = StatementBinder(handle)
        bind(&binder)
        guard binder.failure == SQLITE_OK, binder.count == sqlite3_bind_parameter_count(handle) else {
            sqlite3_reset(handle)
            throw DatabaseError(
                resultCode: ResultCode(rawValue: binder.failure == SQLITE_OK ? SQLITE_RANGE : binder.failure),
                message: "Bound \(binder.count) of \(sqlite3_bind_parameter_count(handle)) parameters",
                sql: sql
            )
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
        try StatementBinder.run(statements.statement(sql, in: self), sql: sql.text, bind)
    }
}

/// The store's statements one transaction has used, found again by their number. GRDB's cache finds a statement by
/// its text, hashing all of it at each use: a publishing record's about 2,600 instructions, a bulk insert's 28,000;
/// on 2,000 small files, 9.5 million of the 125 million instructions of the writer's transactions (`callgrind`). Made
/// for one transaction and used on its thread only: the statements are its connection's.
struct StoreStatements {
    private var statements = [Statement?](repeating: nil, count: SQLText.count)

    /// The prepared statement for `sql` on `db`.
    mutating func statement(_ sql: StoreSQL, in db: Database) throws -> Statement {
        if let statement = self.statements[sql.number] { return statement }
        let statement = try db.cachedStatement(sql: sql.text)
        self.statements[sql.number] = statement
        return statement
    }
}
