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

extension TransferRow: PersistableRecord {
    package static let databaseTableName = "transfer"

    /// Every column, in the order of the table.
    static let columns = """
        id, url, destinationKind, destinationPath, folder, nameComponents, usesContentDisposition, conflictPolicy,
        headers, checksum, expectedSize, computesSHA256, state, bytesOnDisk, totalSize, etag, lastModified, attempts,
        updatedAt, finalPath, finalSize, finalModified, sha256, errorCode, errorMessage, httpStatus, leaseOwner,
        leaseExpires, operation
        """

    /// Reads a row selected with ``columns``, by name; a `NULL` where a value is required reads as SQLite converts it.
    package init(row: Row) {
        self.init(
            id: row["id"] ?? "",
            url: row["url"] ?? "",
            destinationKind: row["destinationKind"] ?? "",
            destinationPath: row["destinationPath"] ?? "",
            folder: row["folder"] ?? "",
            nameComponents: row["nameComponents"] ?? "[]",
            usesContentDisposition: row["usesContentDisposition"] ?? false,
            conflictPolicy: row["conflictPolicy"] ?? "",
            headers: row["headers"] ?? "[]",
            checksum: row["checksum"],
            expectedSize: row["expectedSize"],
            computesSHA256: row["computesSHA256"] ?? false,
            state: row["state"] ?? "",
            bytesOnDisk: row["bytesOnDisk"] ?? 0,
            totalSize: row["totalSize"],
            etag: row["etag"],
            lastModified: row["lastModified"],
            attempts: row["attempts"] ?? 0,
            updatedAt: row["updatedAt"] ?? 0,
            finalPath: row["finalPath"],
            finalSize: row["finalSize"],
            finalModified: row["finalModified"],
            sha256: row["sha256"],
            errorCode: row["errorCode"],
            errorMessage: row["errorMessage"],
            httpStatus: row["httpStatus"],
            leaseOwner: row["leaseOwner"],
            leaseExpires: row["leaseExpires"],
            operation: row["operation"] ?? StoredOperation.downloadJSON
        )
    }

    package func encode(to container: inout PersistenceContainer) {
        container["id"] = self.id
        container["url"] = self.url
        container["destinationKind"] = self.destinationKind
        container["destinationPath"] = self.destinationPath
        container["folder"] = self.folder
        container["nameComponents"] = self.nameComponents
        container["usesContentDisposition"] = self.usesContentDisposition
        container["conflictPolicy"] = self.conflictPolicy
        container["headers"] = self.headers
        container["checksum"] = self.checksum
        container["expectedSize"] = self.expectedSize
        container["computesSHA256"] = self.computesSHA256
        container["state"] = self.state
        container["bytesOnDisk"] = self.bytesOnDisk
        container["totalSize"] = self.totalSize
        container["etag"] = self.etag
        container["lastModified"] = self.lastModified
        container["attempts"] = self.attempts
        container["updatedAt"] = self.updatedAt
        container["finalPath"] = self.finalPath
        container["finalSize"] = self.finalSize
        container["finalModified"] = self.finalModified
        container["sha256"] = self.sha256
        container["errorCode"] = self.errorCode
        container["errorMessage"] = self.errorMessage
        container["httpStatus"] = self.httpStatus
        container["leaseOwner"] = self.leaseOwner
        container["leaseExpires"] = self.leaseExpires
        container["operation"] = self.operation
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
