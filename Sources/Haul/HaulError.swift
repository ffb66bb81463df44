/// An error that stopped a transfer, or an operation on a manager or a batch.
///
/// Haul has one error type. Its ``code`` classifies the failure (so it can be a metric label or a JSON
/// `error.code`), its ``message`` says what went wrong in words, ``httpStatus`` holds the status when a server
/// answered, and ``underlying`` holds the error from a lower layer (the HTTP client, the file system), if any.
public struct HaulError: Error, Sendable, CustomStringConvertible {
    /// A broad classification of a failure.
    ///
    /// New codes can arrive in minor releases, so this is a struct and not an enum: switch over it with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case invalidRequest
            case duplicateTransfer
            case batchFinished
            case managerShutDown
            case connectionFailed
            case timedOut
            case httpStatus
            case rangeNotHonored
            case incompleteBody
            case invalidResponse
            case sizeMismatch
            case checksumMismatch
            case fileExists
            case fileSystem
            case fileTooLarge
            case redirectRefused
            case leasedElsewhere
            case validationFailed
            case tooManyRedirects
            case cancelled
            case notFound
            case tlsHandshakeFailed
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// A request that cannot be carried out as given: an unsupported URL scheme, a missing host, an unsafe name.
        public static let invalidRequest = Code(.invalidRequest)
        /// A transfer with this identifier but another URL or destination is already known to the manager.
        public static let duplicateTransfer = Code(.duplicateTransfer)
        /// A transfer was added to a batch that had already finished.
        public static let batchFinished = Code(.batchFinished)
        /// The manager's scope has ended; it accepts no more work.
        public static let managerShutDown = Code(.managerShutDown)
        /// The connection could not be made or was lost (refused, reset, DNS failure).
        public static let connectionFailed = Code(.connectionFailed)
        /// A connect, read or idle timeout expired.
        public static let timedOut = Code(.timedOut)
        /// The server answered with a status that does not deliver the file (see ``HaulError/httpStatus``).
        public static let httpStatus = Code(.httpStatus)
        /// The server ignored or contradicted the `Range` of a resumed request.
        public static let rangeNotHonored = Code(.rangeNotHonored)
        /// The body ended before the length the server announced.
        public static let incompleteBody = Code(.incompleteBody)
        /// The server's response is malformed: headers beyond the size cap, conflicting or invalid `Content-Length`,
        /// a broken chunked encoding.
        public static let invalidResponse = Code(.invalidResponse)
        /// The file's size differs from the size the request expected or the server announced.
        public static let sizeMismatch = Code(.sizeMismatch)
        /// The file's digest differs from the checksum given with the request.
        public static let checksumMismatch = Code(.checksumMismatch)
        /// The destination file exists and the conflict policy is ``ConflictPolicy/fail``.
        public static let fileExists = Code(.fileExists)
        /// Reading or writing a local file failed (permissions, no space left, a missing folder).
        public static let fileSystem = Code(.fileSystem)
        /// The file is larger than the configured maximum file size.
        public static let fileTooLarge = Code(.fileTooLarge)
        /// A redirect was not followed: to a scheme other than http and https, or from https to http.
        public static let redirectRefused = Code(.redirectRefused)
        /// More redirects than the configured maximum, or a redirect loop.
        public static let tooManyRedirects = Code(.tooManyRedirects)
        /// Another process (or manager) sharing the store is downloading this transfer now; retried later.
        public static let leasedElsewhere = Code(.leasedElsewhere)
        /// The file validator hook rejected the file; it was not published.
        public static let validationFailed = Code(.validationFailed)
        /// The transfer was cancelled.
        public static let cancelled = Code(.cancelled)
        /// A deletion's target does not exist: the server answered `404 Not Found`.
        public static let notFound = Code(.notFound)
        /// The TLS handshake of an https connection failed: the server's certificate is not trusted (an unknown
        /// authority, another host's name, expired), or the two sides share no protocol version. Not retried: trust
        /// the server's authority (``TransferManager/Configuration/additionalTrustedCertificates``) or fix the server.
        public static let tlsHandshakeFailed = Code(.tlsHandshakeFailed)

        /// The code's stable name, as used in JSON output: `httpStatus`, `checksumMismatch`, ...
        public var description: String { self.base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What went wrong, in words, for a person to read.
    public var message: String
    /// The HTTP status of the response that caused the failure, if a server answered.
    public var httpStatus: Int?
    /// The lower-level error that caused this one, if any.
    public var underlying: (any Error)?
    /// How long the server asked us to wait (`Retry-After`), if it did.
    public var retryAfter: Duration?

    /// Creates an error.
    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.underlying = underlying
    }

    public var description: String {
        var text = "\(self.code): \(self.message)"
        if let underlying = self.underlying { text += " (\(underlying))" }
        return text
    }
}
