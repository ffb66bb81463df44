import GRDB
import GRDBSQLite

extension TransferRow {
    /// The columns ``init(columnsOf:)`` reads, in its order.
    static let columns = """
        id, url, destinationKind, destinationPath, folder, nameComponents, usesContentDisposition, conflictPolicy,
        headers, checksum, expectedSize, computesSHA256, state, bytesOnDisk, totalSize, etag, lastModified, attempts,
        updatedAt, finalPath, finalSize, finalModified, sha256, errorCode, errorMessage, httpStatus, leaseOwner,
        leaseExpires, operation
        """

    /// The row a statement that selected ``columns`` (from its column `first`) stands on, read column by column with
    /// SQLite's calls rather than through `Codable`: a run over a list the store holds already reads a row per file.
    init(columnsOf handle: SQLiteStatement, from first: Int32 = 0) {
        var reader = ColumnReader(handle, from: first)
        self.init(
            id: reader.text(),
            url: reader.text(),
            destinationKind: reader.text(),
            destinationPath: reader.text(),
            folder: reader.text(),
            nameComponents: reader.text(),
            usesContentDisposition: reader.bool(),
            conflictPolicy: reader.text(),
            headers: reader.text(),
            checksum: reader.optionalText(),
            expectedSize: reader.optionalInteger(),
            computesSHA256: reader.bool(),
            state: reader.text(),
            bytesOnDisk: reader.integer(),
            totalSize: reader.optionalInteger(),
            etag: reader.optionalText(),
            lastModified: reader.optionalText(),
            attempts: Int(reader.integer()),
            updatedAt: reader.double(),
            finalPath: reader.optionalText(),
            finalSize: reader.optionalInteger(),
            finalModified: reader.optionalDouble(),
            sha256: reader.optionalText(),
            errorCode: reader.optionalText(),
            errorMessage: reader.optionalText(),
            httpStatus: reader.optionalInteger().map(Int.init),
            leaseOwner: reader.optionalText(),
            leaseExpires: reader.optionalDouble(),
            operation: reader.text()
        )
    }
}

/// Reads a statement's current row, one column after the other, with SQLite's conversions: a `NULL` where a value is
/// required reads as an empty text, 0 or false, as SQLite itself converts it.
struct ColumnReader {
    private let handle: SQLiteStatement
    private var index: Int32 = 0

    init(_ handle: SQLiteStatement, from first: Int32) {
        self.handle = handle
        self.index = first
    }

    private mutating func next() -> Int32 {
        defer { self.index += 1 }
        return self.index
    }

    mutating func text() -> String {
        let column = self.next()
        guard let bytes = sqlite3_column_text(self.handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(self.handle, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    mutating func optionalText() -> String? {
        sqlite3_column_type(self.handle, self.index) == SQLITE_NULL ? self.skip() : self.text()
    }

    mutating func integer() -> Int64 { sqlite3_column_int64(self.handle, self.next()) }

    mutating func optionalInteger() -> Int64? {
        sqlite3_column_type(self.handle, self.index) == SQLITE_NULL ? self.skip() : self.integer()
    }

    mutating func double() -> Double { sqlite3_column_double(self.handle, self.next()) }

    mutating func optionalDouble() -> Double? {
        sqlite3_column_type(self.handle, self.index) == SQLITE_NULL ? self.skip() : self.double()
    }

    mutating func bool() -> Bool { self.integer() != 0 }

    /// A blob's bytes (none for `NULL` or an empty blob), valid until the statement steps again or is reset.
    mutating func blob() -> UnsafeRawBufferPointer {
        let column = self.next()
        let count = Int(sqlite3_column_bytes(self.handle, column))
        guard count > 0, let bytes = sqlite3_column_blob(self.handle, column) else {
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
        return UnsafeRawBufferPointer(start: bytes, count: count)
    }

    /// Passes over a `NULL` column.
    private mutating func skip<T>() -> T? {
        self.index += 1
        return nil
    }
}
