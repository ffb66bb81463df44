import Foundation
import GRDB

/// Reads the second format that stores written by earlier releases may hold (migration "v6: slices"): a bulk
/// insert's 32 requests as one row of `slice`, their shared values once and each request's own values packed in a
/// blob, and each transaction's completions of a slice's requests as one row of `sliceResult`. Migration "v7" turns
/// every sliced request into the row of `transfer` it stands for, then drops the three tables; nothing else reads them.
enum LegacySlices {
    /// Writes out every sliced request that has no row of its own yet, with the batch entry its slice gave it, as
    /// the slice and its last completion say.
    static func expand(_ db: Database) throws {
        let slices = try Row.fetchAll(
            db,
            sql: """
                SELECT id, batchID, destinationKind, destinationPath, folder, usesContentDisposition, conflictPolicy,
                    headers, computesSHA256, operation, updatedAt, leaseOwner, leaseExpires, entries
                FROM slice ORDER BY id
                """
        )
        for slice in slices {
            let sliceID: Int64 = slice["id"]
            let batchID: Int = slice["batchID"]
            let completions = try Self.completions(ofSlice: sliceID, in: db)
            let entries = try Self.entries(slice["entries"] as Data? ?? Data())
            for (index, entry) in entries.enumerated() {
                var row = TransferRow(
                    id: entry.id,
                    url: entry.url,
                    destinationKind: slice["destinationKind"],
                    destinationPath: slice["destinationPath"],
                    folder: slice["folder"],
                    nameComponents: entry.nameComponents,
                    usesContentDisposition: slice["usesContentDisposition"],
                    conflictPolicy: slice["conflictPolicy"],
                    headers: slice["headers"],
                    checksum: entry.checksum,
                    expectedSize: entry.expectedSize,
                    computesSHA256: slice["computesSHA256"],
                    state: TransferState.waiting.description,
                    bytesOnDisk: entry.bytesOnDisk,
                    totalSize: entry.totalSize,
                    etag: entry.etag,
                    lastModified: entry.lastModified,
                    attempts: 0,
                    updatedAt: slice["updatedAt"],
                    leaseOwner: slice["leaseOwner"],
                    leaseExpires: slice["leaseExpires"],
                    operation: slice["operation"]
                )
                if let completion = completions[index] {
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
                // A request promoted to a row already is as its row says.
                try row.insert(db, onConflict: .ignore)
                // A batch resumed since has a batch entry at this position already: it wins.
                try db.execute(
                    sql: "INSERT OR IGNORE INTO batchEntry (batchID, position, transferID) VALUES (?, ?, ?)",
                    arguments: [batchID, entry.position, entry.id]
                )
            }
        }
    }

    /// One request of a slice: what its row has of its own.
    struct Entry {
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
    }

    /// A sliced request's completion, recorded before its file's rename.
    struct Completion {
        var finalPath: String
        var size: Int64
        var sha256: String?
        var modified: Double?
        var updatedAt: Double
        var leaseOwner: String?
        var leaseExpires: Double?
    }

    static func entries(_ blob: Data) throws -> [Entry] {
        var reader = PackedReader(blob)
        var entries: [Entry] = []
        while !reader.isAtEnd {
            entries.append(
                Entry(
                    position: Int(try reader.integer()),
                    id: try reader.text(),
                    url: try reader.text(),
                    nameComponents: try reader.text(),
                    checksum: try reader.optionalText(),
                    expectedSize: try reader.optionalInteger(),
                    bytesOnDisk: try reader.integer(),
                    totalSize: try reader.optionalInteger(),
                    etag: try reader.optionalText(),
                    lastModified: try reader.optionalText()
                )
            )
        }
        return entries
    }

    /// The last completion recorded for each entry of slice `slice`, by the entry's index.
    static func completions(ofSlice slice: Int64, in db: Database) throws -> [Int: Completion] {
        var completions: [Int: Completion] = [:]
        let rows = try Row.fetchAll(
            db,
            sql: "SELECT updatedAt, leaseOwner, leaseExpires, records FROM sliceResult WHERE slice = ? ORDER BY rowid",
            arguments: [slice]
        )
        for row in rows {
            var reader = PackedReader(row["records"] as Data? ?? Data())
            while !reader.isAtEnd {
                let entry = Int(try reader.integer())
                completions[entry] = Completion(
                    finalPath: try reader.text(),
                    size: try reader.integer(),
                    sha256: try reader.optionalText(),
                    modified: try reader.optionalInteger().map { Double(bitPattern: UInt64(bitPattern: $0)) },
                    updatedAt: row["updatedAt"],
                    leaseOwner: row["leaseOwner"],
                    leaseExpires: row["leaseExpires"]
                )
            }
        }
        return completions
    }

    /// Reads the packed values of a blob: an integer as its 8 bytes (little-endian), a text as its length (4 bytes)
    /// and its UTF-8, an optional as a byte (0 for none, 1 for a value) before the value.
    struct PackedReader {
        private let bytes: [UInt8]
        private var offset = 0

        init(_ data: Data) { self.bytes = [UInt8](data) }

        var isAtEnd: Bool { self.offset == self.bytes.count }

        mutating func integer() throws -> Int64 {
            guard self.bytes.count - self.offset >= 8 else { throw Self.malformed }
            var bits: UInt64 = 0
            for index in 0..<8 { bits |= UInt64(self.bytes[self.offset + index]) << (8 * UInt64(index)) }
            self.offset += 8
            return Int64(bitPattern: bits)
        }

        mutating func optionalInteger() throws -> Int64? {
            try self.isPresent() ? self.integer() : nil
        }

        mutating func text() throws -> String {
            guard self.bytes.count - self.offset >= 4 else { throw Self.malformed }
            var count = 0
            for index in 0..<4 { count |= Int(self.bytes[self.offset + index]) << (8 * index) }
            self.offset += 4
            guard self.bytes.count - self.offset >= count else { throw Self.malformed }
            defer { self.offset += count }
            return String(decoding: self.bytes[self.offset..<(self.offset + count)], as: UTF8.self)
        }

        mutating func optionalText() throws -> String? {
            try self.isPresent() ? self.text() : nil
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
}
