import Foundation

/// A file that was downloaded, verified and published; or, for an upload, the file that was sent; or, for a deletion,
/// the URL that was deleted.
public struct CompletedFile: Hashable, Sendable {
    /// Where the file is now (a download); the file that was sent (an upload of a file); the URL (a deletion, or an
    /// upload of in-memory data).
    public var path: URL
    /// Its size in bytes (0 for a deletion).
    public var byteCount: Int64
    /// Its SHA-256 in lower-case hex, when a SHA-256 checksum was given or hashing was asked for.
    public var sha256: String?
    /// Its modification time when it was published (seconds since 1970): how a later run tells it is unchanged.
    var modificationTime: Double?

    /// Creates a value (for tests and adapters; the manager makes its own).
    public init(path: URL, byteCount: Int64, sha256: String?) {
        self.init(path: path, byteCount: byteCount, sha256: sha256, modificationTime: nil)
    }

    init(path: URL, byteCount: Int64, sha256: String?, modificationTime: Double?) {
        self.path = path
        self.byteCount = byteCount
        self.sha256 = sha256
        self.modificationTime = modificationTime
    }
}

/// How one transfer ended.
public enum TransferResult: Sendable {
    /// Downloaded and in place.
    case completed(CompletedFile)
    /// Stopped by an error.
    case failed(HaulError)
    /// Cancelled before it completed.
    case cancelled
    /// Not downloaded because the destination existed and the conflict policy said to skip; the path is the file
    /// that was kept.
    case skipped(existing: URL)

    /// The state this result leaves the transfer in.
    public var state: TransferState {
        switch self {
        case .completed: .completed
        case .failed: .failed
        case .cancelled: .cancelled
        case .skipped: .skipped
        }
    }
}

/// The end of a batch: every transfer in it, in the order it was added, with its result.
public struct BatchReport: Sendable {
    /// One transfer's line in the report.
    public struct Item: Sendable {
        /// The transfer's identifier.
        public var id: TransferID
        /// The URL it was fetched from.
        public var url: URL
        /// How it ended.
        public var result: TransferResult
        /// How many requests it took (retries included; 0 when it never started).
        public var attempts: Int
        /// Why its partial file was discarded and the download started again from zero, each time it was.
        public var restarts: [String]

        /// Creates a line (for tests and adapters; the manager makes its own).
        public init(id: TransferID, url: URL, result: TransferResult, attempts: Int = 0, restarts: [String] = []) {
            self.id = id
            self.url = url
            self.result = result
            self.attempts = attempts
            self.restarts = restarts
        }
    }

    /// Creates a report (for tests, adapters, and merging the reports of several batches).
    public init(batchID: BatchID, items: [Item]) {
        self.batchID = batchID
        self.items = items
    }

    /// The batch this reports on.
    public var batchID: BatchID
    /// Every transfer of the batch, in the order it was added.
    public var items: [Item]

    /// The transfers that completed, with their files.
    public var completed: [(item: Item, file: CompletedFile)] {
        self.items.compactMap { item in
            if case .completed(let file) = item.result { return (item, file) }
            return nil
        }
    }

    /// The transfers that failed, with their errors.
    public var failed: [(item: Item, error: HaulError)] {
        self.items.compactMap { item in
            if case .failed(let error) = item.result { return (item, error) }
            return nil
        }
    }

    /// The transfers that were cancelled.
    public var cancelled: [Item] { self.items.filter { $0.result.state == .cancelled } }

    /// The transfers that were skipped.
    public var skipped: [Item] { self.items.filter { $0.result.state == .skipped } }

    /// SDL-0029's error map: each failed transfer's identifier and its error.
    public var errors: [TransferID: HaulError] {
        Dictionary(self.failed.map { ($0.item.id, $0.error) }, uniquingKeysWith: { first, _ in first })
    }

    /// Whether every transfer completed or was skipped.
    public var isSuccess: Bool {
        self.items.allSatisfy { $0.result.state == .completed || $0.result.state == .skipped }
    }
}
