import Foundation

/// A file that was downloaded, verified and published; or, for an upload, the file that was sent; or, for a deletion,
/// the URL that was deleted.
public struct CompletedFile: Hashable, Sendable {
    /// Where the file is now (a download); the file that was sent (an upload of a file); the URL (a deletion, or an
    /// upload of in-memory data).
    public var path: URL {
        get {
            switch self.location {
            case .url(let url): url
            case .inFolder(let folder, let relativePath):
                folder.appending(path: relativePath, directoryHint: .notDirectory)
            }
        }
        set { self.location = .url(newValue) }
    }
    /// ``path`` as a file path (its `path`), made without building a `URL`: a program printing a line per file
    /// spends a few microseconds less on each.
    public var filePath: String {
        switch self.location {
        case .url(let url): return url.path
        case .inFolder(let folder, let relativePath):
            let folderPath = folder.path
            return folderPath.hasSuffix("/") ? folderPath + relativePath : folderPath + "/" + relativePath
        }
    }
    /// Its size in bytes (0 for a deletion).
    public var byteCount: Int64
    /// Its SHA-256 in lower-case hex, when a SHA-256 checksum was given or hashing was asked for.
    public var sha256: String?
    /// Its modification time when it was published (seconds since 1970): how a later run tells it is unchanged.
    var modificationTime: Double?
    /// Whether the store recorded this completion before the file was renamed into place (a download's publishing
    /// record), so that it needs no record of its own afterwards. Not part of the value (equality, hashing).
    var isRecordedInStore = false

    /// How ``path`` is kept: a downloaded file keeps its folder (one `URL` shared by every file in it) and its name, so
    /// that a report of many files does not hold a parsed `URL` for each.
    private enum Location: Sendable {
        case url(URL)
        case inFolder(URL, String)
    }

    private var location: Location

    /// Creates a value (for tests and adapters; the manager makes its own).
    public init(path: URL, byteCount: Int64, sha256: String?) {
        self.init(path: path, byteCount: byteCount, sha256: sha256, modificationTime: nil)
    }

    init(path: URL, byteCount: Int64, sha256: String?, modificationTime: Double?) {
        self.location = .url(path)
        self.byteCount = byteCount
        self.sha256 = sha256
        self.modificationTime = modificationTime
    }

    /// A file at `relativePath` (components joined by `/`) in `folder`.
    init(folder: URL, relativePath: String, byteCount: Int64, sha256: String?, modificationTime: Double?) {
        self.location = .inFolder(folder, relativePath)
        self.byteCount = byteCount
        self.sha256 = sha256
        self.modificationTime = modificationTime
    }

    public static func == (lhs: CompletedFile, rhs: CompletedFile) -> Bool {
        lhs.byteCount == rhs.byteCount && lhs.sha256 == rhs.sha256 && lhs.modificationTime == rhs.modificationTime
            && lhs.path == rhs.path
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.path)
        hasher.combine(self.byteCount)
        hasher.combine(self.sha256)
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
        public var url: URL {
            get { URL(string: self.urlText) ?? URL(filePath: self.urlText) }
            set { self.urlText = newValue.absoluteString }
        }
        /// The URL as text: a report of 100,000 items keeps 100,000 of them, and a parsed `URL` takes about 430
        /// bytes, its text about 100.
        var urlText: String
        /// How it ended.
        public var result: TransferResult
        /// How many requests it took (retries included; 0 when it never started).
        public var attempts: Int
        /// Why its partial file was discarded and the download started again from zero, each time it was.
        public var restarts: [String]

        /// Creates a line (for tests and adapters; the manager makes its own).
        public init(id: TransferID, url: URL, result: TransferResult, attempts: Int = 0, restarts: [String] = []) {
            self.init(id: id, urlText: url.absoluteString, result: result, attempts: attempts, restarts: restarts)
        }

        init(id: TransferID, urlText: String, result: TransferResult, attempts: Int, restarts: [String]) {
            self.id = id
            self.urlText = urlText
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

    /// How many items ended each way, and the bytes of the completed ones.
    public struct Tally: Sendable, Equatable {
        public var completed = 0
        public var failed = 0
        public var cancelled = 0
        public var skipped = 0
        /// The sum of the completed files' sizes, each file once: a URL listed twice in a batch is one transfer, and
        /// two completed items, but its bytes were fetched and stored once.
        public var completedBytes: Int64 = 0
    }

    /// The counts by result, in one pass over the items (``completed`` and the others each build an array).
    public var tally: Tally {
        var tally = Tally()
        var counted = Set<TransferID>(minimumCapacity: self.items.count)
        for item in self.items {
            switch item.result {
            case .completed(let file):
                tally.completed += 1
                if counted.insert(item.id).inserted { tally.completedBytes += file.byteCount }
            case .failed: tally.failed += 1
            case .cancelled: tally.cancelled += 1
            case .skipped: tally.skipped += 1
            }
        }
        return tally
    }

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
