import Foundation
import GRDB

/// One row of the `transfer` table.
struct TransferRow: Codable, Sendable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "transfer"

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
    var finalPath: String?
    var finalSize: Int64?
    var finalModified: Double?
    var sha256: String?
    var errorCode: String?
    var errorMessage: String?
    var httpStatus: Int?
    var updatedAt: Double
}

extension TransferRow {
    /// The request this row records (without the secret headers, which are never stored).
    var request: TransferRequest? {
        guard let url = URL(string: self.url) else { return nil }
        let path = URL(filePath: self.destinationPath, directoryHint: self.destinationKind == "file" ? .notDirectory : .isDirectory)
        let headers = ((try? JSONDecoder().decode([[String]].self, from: Data(self.headers.utf8))) ?? [])
            .compactMap { $0.count == 2 ? (name: $0[0], value: $0[1]) : nil }
        return TransferRequest(
            url: url, destination: self.destinationKind == "file" ? .file(path) : .folder(path), id: TransferID(self.id),
            expectedByteCount: self.expectedSize, checksum: self.checksum.flatMap(Checksum.init(parsing:)),
            headers: headers, conflictPolicy: ConflictPolicy(name: self.conflictPolicy),
            computesSHA256: self.computesSHA256)
    }
}

/// A change to the store, queued by the manager and written in batches by ``StoreWriter``.
enum StoreOperation: Sendable {
    case insertItem(batchID: BatchID, position: Int, row: TransferRow)
    case state(TransferID, TransferState, attempts: Int)
    case validator(TransferID, etag: String?, lastModified: String?, totalSize: Int64?)
    case checkpoint(TransferID, bytesOnDisk: Int64)
    case completed(TransferID, CompletedFile, modified: Double?)
    /// The file is about to be renamed to `finalPath`: recorded before the rename, so that a process killed right
    /// after it still knows, on the next run, that the file there is this transfer's.
    case publishing(TransferID, finalPath: String, size: Int64)
    case failed(TransferID, HaulError, attempts: Int)

    func apply(_ db: Database) throws {
        let now = Date().timeIntervalSince1970
        switch self {
        case .insertItem(let batchID, let position, let row):
            try db.execute(
                sql: """
                    INSERT INTO transfer (id, url, destinationKind, destinationPath, folder, nameComponents,
                        usesContentDisposition, conflictPolicy, headers, checksum, expectedSize, computesSHA256, state,
                        bytesOnDisk, totalSize, etag, lastModified, attempts, updatedAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)
                    ON CONFLICT(id) DO UPDATE SET state = excluded.state, headers = excluded.headers,
                        checksum = excluded.checksum, expectedSize = excluded.expectedSize,
                        errorCode = NULL, errorMessage = NULL, httpStatus = NULL, updatedAt = excluded.updatedAt
                    """,
                arguments: [
                    row.id, row.url, row.destinationKind, row.destinationPath, row.folder, row.nameComponents,
                    row.usesContentDisposition, row.conflictPolicy, row.headers, row.checksum, row.expectedSize,
                    row.computesSHA256, row.state, row.bytesOnDisk, row.totalSize, row.etag, row.lastModified, now,
                ])
            try db.execute(
                sql: "INSERT OR REPLACE INTO batchItem (batchID, position, transferID) VALUES (?, ?, ?)",
                arguments: [batchID.rawValue, position, row.id])
        case .state(let id, let state, let attempts):
            try db.execute(
                sql: "UPDATE transfer SET state = ?, attempts = MAX(attempts, ?), updatedAt = ? WHERE id = ?",
                arguments: [state.description, attempts, now, id.rawValue])
        case .validator(let id, let etag, let lastModified, let totalSize):
            try db.execute(
                sql: "UPDATE transfer SET etag = ?, lastModified = ?, totalSize = ?, updatedAt = ? WHERE id = ?",
                arguments: [etag, lastModified, totalSize, now, id.rawValue])
        case .checkpoint(let id, let bytes):
            try db.execute(
                sql: "UPDATE transfer SET bytesOnDisk = ?, updatedAt = ? WHERE id = ?",
                arguments: [bytes, now, id.rawValue])
        case .completed(let id, let file, let modified):
            try db.execute(
                sql: """
                    UPDATE transfer SET state = 'completed', bytesOnDisk = ?, totalSize = ?, finalPath = ?,
                        finalSize = ?, finalModified = ?, sha256 = ?, errorCode = NULL, errorMessage = NULL,
                        httpStatus = NULL, updatedAt = ? WHERE id = ?
                    """,
                arguments: [
                    file.byteCount, file.byteCount, file.path.path, file.byteCount, modified, file.sha256, now, id.rawValue,
                ])
        case .publishing(let id, let finalPath, let size):
            try db.execute(
                sql: "UPDATE transfer SET finalPath = ?, finalSize = ?, finalModified = NULL, updatedAt = ? WHERE id = ?",
                arguments: [finalPath, size, now, id.rawValue])
        case .failed(let id, let error, let attempts):
            try db.execute(
                sql: """
                    UPDATE transfer SET state = 'failed', errorCode = ?, errorMessage = ?, httpStatus = ?,
                        attempts = MAX(attempts, ?), updatedAt = ? WHERE id = ?
                    """,
                arguments: [error.code.description, error.message, error.httpStatus, attempts, now, id.rawValue])
        }
    }
}
