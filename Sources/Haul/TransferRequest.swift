import Foundation
import NIOConcurrencyHelpers

/// One transfer to carry out: a file to download (where from, where to, and what to expect of it), or, made with
/// ``upload(file:to:method:id:headers:contentType:)`` or ``delete(_:id:headers:treatsNotFoundAsSuccess:)``, a file to
/// upload or a remote file to delete.
public struct TransferRequest: Sendable {
    /// Where a downloaded file goes.
    public enum Destination: Sendable, Hashable {
        /// Into this folder, under a name chosen by the ``NamingPolicy``.
        case folder(URL)
        /// At exactly this path.
        case file(URL)
    }

    /// The file's URL: `http` or `https`.
    public var url: URL
    /// Where the file goes. For an upload of a file, the file sent; not used by deletions and uploads of data.
    public var destination: Destination
    /// The transfer's identifier; by default derived from ``url`` and ``destination``.
    public var id: TransferID
    /// The size the file must have, if known. A mismatch fails the transfer with ``HaulError/Code/sizeMismatch``.
    public var expectedByteCount: Int64?
    /// A checksum the file must match before it is published.
    public var checksum: Checksum?
    /// Extra request headers, sent with every attempt.
    public var headers: [(name: String, value: String)]
    /// How a file in a ``Destination/folder(_:)`` is named; `nil` uses the manager's default.
    public var naming: NamingPolicy?
    /// What to do when the final file exists; `nil` uses the manager's default.
    public var conflictPolicy: ConflictPolicy?
    /// Whether to compute the file's SHA-256 for the report even when no checksum was given. Costs CPU.
    public var computesSHA256: Bool
    /// What the transfer does: ``Operation/download`` unless made by one of the upload or delete factories.
    public var operation: Operation
    /// Which waiting transfers start first: higher priorities before lower ones, and in the order they were
    /// submitted within a priority. 0 by default; any `Int`. Change it while the transfer waits with
    /// ``TransferManager/setPriority(_:of:)``.
    public var priority: Int = 0
    /// This transfer's own bandwidth limit in bytes per second, on top of the manager's; `nil` for none. Change it
    /// while the transfer runs with ``TransferManager/setBandwidthLimit(_:of:)``.
    public var bandwidthLimit: Int64?

    /// Creates a download request.
    ///
    /// - Parameters:
    ///   - url: the file's URL (`http` or `https`).
    ///   - destination: a folder (the name comes from the naming policy) or a file path.
    ///   - id: an identifier of your choosing; by default one derived from the URL and the destination.
    public init(
        url: URL,
        destination: Destination,
        id: TransferID? = nil,
        expectedByteCount: Int64? = nil,
        checksum: Checksum? = nil,
        headers: [(name: String, value: String)] = [],
        naming: NamingPolicy? = nil,
        conflictPolicy: ConflictPolicy? = nil,
        computesSHA256: Bool = false,
        operation: Operation = .download
    ) {
        self.url = url
        self.destination = destination
        self.id = id ?? TransferID.derived(url: url.absoluteString, destination: destination.path)
        self.expectedByteCount = expectedByteCount
        self.checksum = checksum
        self.headers = headers
        self.naming = naming
        self.conflictPolicy = conflictPolicy
        self.computesSHA256 = computesSHA256
        self.operation = operation
    }

    /// A request for `url` into `folder`.
    public init(url: URL, into folder: URL) {
        self.init(url: url, destination: .folder(folder))
    }
}

extension TransferRequest.Destination {
    /// The destination's path, as used in the derived identifier. The last folder's and the last file's are kept: the
    /// requests of a list share their folder.
    var path: String {
        switch self {
        case .folder(let url):
            Self.lastPaths.withLockedValue { $0.folder.path(of: url) { "folder:" + $0.standardizedFilePath } }
        case .file(let url):
            Self.lastPaths.withLockedValue { $0.file.path(of: url) { "file:" + $0.standardizedFilePath } }
        }
    }

    /// The last folder and the last file whose ``path`` was asked (for every thread: requests are made on any).
    private static let lastPaths = NIOLockedValueBox((folder: LastPath(), file: LastPath()))
}

extension URL {
    /// `standardizedFileURL.path`, without making a second URL when an absolute path has nothing to standardise (no
    /// `.` or `..` component, no doubled slash): the usual case, and one call per request submitted.
    var standardizedFilePath: String {
        let path = self.path
        // Looked for byte by byte: `String.contains(_:)` with a string goes through Foundation's `NSString` search.
        var isStandard = path.utf8.first == UInt8(ascii: "/")
        var previous: UInt8 = 0
        for byte in path.utf8 {
            if previous == UInt8(ascii: "/"), byte == UInt8(ascii: ".") || byte == UInt8(ascii: "/") {
                isStandard = false
                break
            }
            previous = byte
        }
        return isStandard ? path : self.standardizedFileURL.path
    }
}

/// What to do when a downloaded file's final path already holds a file.
public struct ConflictPolicy: Hashable, Sendable, CustomStringConvertible {
    private enum Base: String, Hashable, Sendable { case rename, overwrite, skip, fail }
    private let base: Base

    /// Publish under the first free name of `name.1.ext`, `name.2.ext`, ... (the default, as browsers do).
    public static let rename = ConflictPolicy(base: .rename)
    /// Replace the existing file atomically.
    public static let overwrite = ConflictPolicy(base: .overwrite)
    /// Keep the existing file and report the transfer as skipped, without downloading it.
    public static let skip = ConflictPolicy(base: .skip)
    /// Keep the existing file and fail the transfer with ``HaulError/Code/fileExists``.
    public static let fail = ConflictPolicy(base: .fail)

    /// The policy named `rename`, `overwrite`, `skip` or `fail`.
    public init?(name: String) {
        guard let base = Base(rawValue: name) else { return nil }
        self.base = base
    }

    private init(base: Base) { self.base = base }

    public var description: String { self.base.rawValue }
}
