/// An error of ``HTTP1Client``: a code, and the error underneath when there is one.
public struct HTTP1ClientError: Error, Sendable, CustomStringConvertible {
    /// What went wrong; new codes may come, so this is a struct.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case connectTimeout, connectFailed, readTimeout, remoteConnectionClosed, cancelled, alreadyShutdown
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The connection did not open within the connect timeout.
        public static let connectTimeout = Code(.connectTimeout)
        /// The connection could not be opened (``HTTP1ClientError/underlying`` says why).
        public static let connectFailed = Code(.connectFailed)
        /// Nothing arrived from the server for the read timeout (our own waits do not count).
        public static let readTimeout = Code(.readTimeout)
        /// The server closed the connection before the response's end.
        public static let remoteConnectionClosed = Code(.remoteConnectionClosed)
        /// The caller stopped the exchange.
        public static let cancelled = Code(.cancelled)
        /// The client was shut down.
        public static let alreadyShutdown = Code(.alreadyShutdown)

        public var description: String { self.base.rawValue }
    }

    public let code: Code
    /// The error underneath, when there is one (SwiftNIO's, for ``Code/connectFailed``).
    public let underlying: (any Error)?

    public init(_ code: Code, underlying: (any Error)? = nil) {
        self.code = code
        self.underlying = underlying
    }

    public var description: String {
        "HTTP1ClientError.\(self.code)" + (self.underlying.map { ": \($0)" } ?? "")
    }
}
