import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a manager tells which of the requests submitted to it the store may hold (see
/// ``TransferManager/lookUp(_:)``): by looking for each one's row, or by the digests of the store's identifiers.
enum StoredIDs: Sendable {
    /// Not asked yet.
    case unknown
    /// Each request's row is looked for, until as many requests have been as the store held rows when first asked
    /// (`rowsAtMost`): from then on, reading every identifier once costs no more than the look-ups did.
    case lookingUp(rowsAtMost: Int, lookedUp: Int)
    /// The store's identifiers when read (none for a store just created): only those, and the transfers the manager
    /// has met since, are looked for.
    case read(TransferIDDigests)

    /// For `count` more requests: the digests to ask, or `nil` when each request is to be looked for. A store just
    /// created (`holdsNoTransfers`) is never read; otherwise `rowsAtMost` is asked once, at the first requests, and
    /// `read` once, when the requests looked for would outnumber the rows.
    mutating func digests(
        for count: Int,
        holdsNoTransfers: Bool,
        rowsAtMost: () -> Int,
        read: () -> TransferIDDigests
    ) -> TransferIDDigests? {
        if case .unknown = self {
            self = holdsNoTransfers ? .read(TransferIDDigests()) : .lookingUp(rowsAtMost: rowsAtMost(), lookedUp: 0)
        }
        switch self {
        case .lookingUp(let rows, let lookedUp) where lookedUp + count <= rows:
            self = .lookingUp(rowsAtMost: rows, lookedUp: lookedUp + count)
            return nil
        case .unknown, .lookingUp:
            let digests = read()
            self = .read(digests)
            return digests
        case .read(let digests):
            return digests
        }
    }
}

/// What the store knew of a request when it was submitted: read before the manager's lock is taken, because it
/// takes a database read and a `stat` or two.
struct Persisted: Sendable {
    var row: TransferRow
    /// The finished file, when the store says the transfer completed and the file is still there, unchanged
    /// (same size and modification time): a downloaded file, or an uploaded file that has not changed since.
    var completedFile: CompletedFile?
    /// The size of the partial file on disk: the truth for where a download resumes.
    var partialBytes: Int64
    /// The lease left on the row by a process that is gone (killed): released before anything else is recorded.
    var staleLeaseOwner: String?

    /// Looks requests up in the store, their rows read in one transaction: for each, what ``lookUp(_:row:memo:)``
    /// finds, or `nil` when the store cannot be read.
    static func lookUp(_ requests: [TransferRequest], in store: TransferStore) -> [Persisted?] {
        guard let rows = try? store.rows(requests.map(\.id)) else {
            return Array(repeating: nil, count: requests.count)
        }
        var memo = Memo()
        return zip(requests, rows).map { request, row in
            row.flatMap { Self.lookUp(request, row: $0, memo: &memo) }
        }
    }

    /// What the store's `row` says of `request`: `nil` when the row is for another URL, destination or operation (a
    /// caller-chosen identifier reused).
    static func lookUp(_ request: TransferRequest, row: TransferRow, memo: inout Memo) -> Persisted? {
        guard row.url == request.url.absoluteString,
            row.destinationPath == request.destination.storedPath,
            memo.operation(row.operation) == StoredOperation(request.operation)
        else { return nil }
        var completed: CompletedFile?
        if row.state == TransferState.completed.description, let finalPath = row.finalPath,
            let (size, modified) = Self.sizeAndModification(finalPath), size == row.finalSize,
            modified == row.finalModified
        {
            completed = CompletedFile(
                path: URL(filePath: finalPath),
                byteCount: size,
                sha256: row.sha256,
                modificationTime: modified
            )
        }
        var partialBytes: Int64 = 0
        var partExists = false
        // A completed file that is there unchanged needs no partial file: one `stat` a row, not three, on a run over
        // files the store holds already.
        if completed == nil, let components = JSONText.strings(row.nameComponents), !components.isEmpty {
            let part = Download.partPath(
                id: request.id,
                folderPath: row.folder,
                nameComponents: components
            )
            var status = stat()
            partExists = lstat(part, &status) == 0
            if partExists, (status.st_mode & S_IFMT) == S_IFREG { partialBytes = Int64(status.st_size) }
        }
        // Killed between the rename and the record of completion: the partial file is gone, and the file the
        // store says it was being published to is there with its size.
        if completed == nil, request.isDownload, row.state != TransferState.completed.description, !partExists,
            let finalPath = row.finalPath,
            let (size, modified) = Self.sizeAndModification(finalPath), size == row.finalSize
        {
            completed = CompletedFile(
                path: URL(filePath: finalPath),
                byteCount: size,
                sha256: row.sha256,
                modificationTime: modified
            )
        }
        let stale = row.leaseOwner.flatMap { memo.isAlive($0) ? nil : $0 }
        return Persisted(row: row, completedFile: completed, partialBytes: partialBytes, staleLeaseOwner: stale)
    }

    /// Puts what the store knew into a new record: the same file names (so the partial file is found again, and a
    /// UUID-prefixed name stays the same), and the validators to resume with.
    func restore(into record: inout TransferManager.Record) {
        if let components = JSONText.strings(self.row.nameComponents), !components.isEmpty {
            record.nameComponents = components
            record.folder = URL(filePath: self.row.folder, directoryHint: .isDirectory)
        }
        let validator = Download.Validator(
            etag: self.row.etag,
            lastModified: self.row.lastModified,
            completeLength: self.row.totalSize
        )
        if validator.ifRangeValue != nil { record.validator = validator }
        record.receivedBytes = self.partialBytes
        record.expectedBytes = self.row.totalSize ?? record.request.expectedByteCount
    }

    /// What the rows of one look-up share, worked out once: their operations (one or two texts in a batch) and their
    /// lease holders (a completed row keeps the lease of the process that published it; a run over a batch's files
    /// asked whether that process lives once, not once a row with a `gethostname` and a `kill` each).
    struct Memo {
        private var operations: [String: StoredOperation?] = [:]
        private var owners: [String: Bool] = [:]

        /// The operation `text` records, or `nil` when it is not one.
        mutating func operation(_ text: String) -> StoredOperation? {
            if let known = self.operations[text] { return known }
            let operation = StoredOperation(json: text)
            self.operations[text] = operation
            return operation
        }

        /// ``LeaseOwner/isAlive(_:)``.
        mutating func isAlive(_ owner: String) -> Bool {
            if let known = self.owners[owner] { return known }
            let alive = LeaseOwner.isAlive(owner)
            self.owners[owner] = alive
            return alive
        }
    }

    /// A regular file's size and modification time (seconds since 1970), not following links.
    static func sizeAndModification(_ path: String) -> (Int64, Double)? {
        var status = stat()
        guard lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (Int64(status.st_size), status.modificationTime)
    }
}

extension stat {
    /// The modification time in seconds since 1970, nanoseconds kept.
    var modificationTime: Double {
        #if canImport(Darwin)
        Double(self.st_mtimespec.tv_sec) + Double(self.st_mtimespec.tv_nsec) / 1e9
        #else
        Double(self.st_mtim.tv_sec) + Double(self.st_mtim.tv_nsec) / 1e9
        #endif
    }
}

extension TransferRequest.Destination {
    /// The folder's or the file's URL.
    var url: URL {
        switch self {
        case .folder(let url), .file(let url): url
        }
    }

    /// The destination's path as the store records it.
    var storedPath: String { self.url.standardizedFilePath }
}

/// A one-entry cache of a path computed from a URL: the transfers of a batch share their folder, and each `URL.path`
/// (or its standardized form) costs a microsecond or two. Each cache is used with one computation only.
struct LastPath: Sendable {
    private var last: (url: URL, path: String)?

    /// `compute(url)`, or what it gave last time for an equal URL.
    mutating func path(of url: URL, _ compute: (URL) -> String) -> String {
        if let last, last.url == url { return last.path }
        let path = compute(url)
        self.last = (url, path)
        return path
    }
}
