import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// An HTTP/1.1 server on loopback for tests: it serves deterministic bodies, honours `Range` and `If-Range` like a
/// correct origin, injects faults on request, and records every request it receives.
///
/// It also takes uploads and deletions as a WebDAV server would: `PUT` stores the body at the path (served by later
/// `GET`s), a `multipart/form-data` `POST` stores its file field, `DELETE` removes what is stored (204) or answers
/// 404. Faults for these come from ``setUploadFaults(_:at:)``: a status, a `Retry-After`, or a connection closed
/// after receiving some of the body.
///
/// ```swift
/// try await FaultInjectingServer.withServer(resources: ["/a": .init(body: bytes)]) { server in
///     ... download server.url("/a") ...
///     #expect(server.requests.map(\.range) == [nil])
/// }
/// ```
public final class FaultInjectingServer: Sendable {
    /// Something the server should do wrong for one response.
    public enum Fault: Sendable, Hashable {
        /// Close the connection after sending this many body bytes.
        case closeConnection(afterBytes: Int)
        /// Answer with this status and a short text body instead of the resource.
        case status(Int)
        /// Answer with this status and this text as a `text/plain` explanation.
        case explainedStatus(Int, String)
        /// Answer with this status and a `Retry-After` header with this value.
        case retryAfter(status: Int, value: String)
        /// Ignore `Range` and send the whole body with 200.
        case ignoreRange
        /// Answer a range request with a `Content-Range` that starts this many bytes off the requested offset.
        case shiftContentRange(by: Int)
        /// Answer a range request with a `Content-Range` whose complete length is this many bytes off.
        case wrongCompleteLength(by: Int)
        /// Answer a range request with 206 but a different ETag (new content, `If-Range` ignored).
        case changeETag
        /// Send this many body bytes, then nothing more, keeping the connection open. For an upload: stop reading
        /// the request body after this many bytes, keeping the connection open.
        case stall(afterBytes: Int)
        /// Answer with a redirect to this location (absolute or relative).
        case redirect(status: Int, location: String)
        /// Answer with a redirect to this location, with these fields too (a `Set-Cookie`, as a login's callback
        /// sets a session before it sends the client back).
        case redirectWithFields(status: Int, location: String, fields: [String: String])
        /// Send the body with chunked encoding and close the connection after this many bytes, before the last chunk.
        case cutChunkedBody(afterBytes: Int)
        /// Send the body with chunked encoding, and after this many bytes send nothing more (no last chunk), keeping
        /// the connection open.
        case stallChunked(afterBytes: Int)
        /// Answer a range request with 416 and `Content-Range: bytes */N`.
        case rangeNotSatisfiable(completeLength: Int)
        /// Read the request and answer nothing, keeping the connection open.
        case noAnswer
        /// Read the request and close the connection without answering (a kept-alive connection the server dropped
        /// as the request arrived).
        case closeWithoutAnswer
        /// Send a response head with a header this many bytes long.
        case hugeHeader(bytes: Int)
        /// Send two different `Content-Length` headers.
        case conflictingContentLength
        /// Announce this `Content-Length`, send the resource's body, and close the connection (a file larger than
        /// what arrives: say larger than the client's disk).
        case announceLength(Int)
        /// Add these response headers (for example `Content-Encoding: gzip`).
        case addHeaders([String: String])
        /// Announce the body's length, send the body and then this text, in one write, keeping the connection open (a
        /// server whose `Content-Length` is short of what it sends).
        case sendMoreThanAnnounced(String)
        /// Serve these bytes instead of the resource's, under the same validators and length, and close after
        /// `closeAfterBytes` (a server that changed the file without changing its ETag).
        case oldBody([UInt8], closeAfterBytes: Int)
    }

    /// A file the server serves at a path.
    public struct Resource: Sendable {
        /// The body.
        public var body: [UInt8]
        /// The ETag header, if any (a strong one by default, from the body's length and seed).
        public var etag: String?
        /// The Last-Modified header, if any.
        public var lastModified: String?
        /// A Content-Disposition header to send, if any.
        public var contentDisposition: String?
        /// Bytes per write: the body goes out in chunks of this size.
        public var chunkSize: Int
        /// A pause between chunks, to keep a transfer in flight long enough to observe or interrupt it.
        public var chunkDelay: Duration?
        /// Faults for successive requests to this path: the first request gets the first fault, and so on; `nil`
        /// entries answer correctly. Requests beyond the list answer correctly.
        public var faults: [Fault?]

        /// Creates a resource.
        public init(
            body: [UInt8],
            etag: String? = nil,
            lastModified: String? = "Wed, 21 Oct 2015 07:28:00 GMT",
            contentDisposition: String? = nil,
            chunkSize: Int = 64 * 1024,
            chunkDelay: Duration? = nil,
            faults: [Fault?] = []
        ) {
            self.body = body
            self.etag = etag ?? "\"\(body.count)-\(FaultInjectingServer.fingerprint(body))\""
            self.lastModified = lastModified
            self.contentDisposition = contentDisposition
            self.chunkSize = max(1, chunkSize)
            self.chunkDelay = chunkDelay
            self.faults = faults
        }
    }

    /// One request as the server received it.
    public struct RecordedRequest: Sendable, Hashable {
        /// `GET`, `PUT`, ...
        public var method: String
        /// The path, with its query.
        public var path: String
        /// The headers, names lower-cased, in the order received.
        public var headers: [String: String]
        /// The `Range` header, if sent.
        public var range: String? { self.headers["range"] }
        /// When the request arrived.
        public var receivedAt: ContinuousClock.Instant
        /// The `If-Range` header, if sent.
        public var ifRange: String? { self.headers["if-range"] }
        /// How many body bytes the request carried (for uploads), as far as the server read it.
        public var bodyByteCount = 0
        /// The connection it came on: 1 for the first connection the server accepted, 2 for the second, ...
        public var connection = 0
    }

    /// A file received by an upload.
    public struct Upload: Sendable, Hashable {
        /// The bytes of the file (for a multipart `POST`, of its file field).
        public var body: [UInt8]
        /// The multipart field's name and file name, for a multipart `POST`.
        public var field: String?
        public var fileName: String?
        /// The request's `Content-Type`.
        public var contentType: String?
    }

    struct State: Sendable {
        var resources: [String: Resource]
        var requestCounts: [String: Int] = [:]
        var requests: [RecordedRequest] = []
        var inFlight = 0
        var maximumInFlight = 0
        /// How many connections the server has accepted (each request records which one it came on).
        var acceptedConnections = 0
        var servedBodyBytes = 0
        var uploads: [String: Upload] = [:]
        var uploadFaults: [String: [Fault?]] = [:]
        var uploadRequestCounts: [String: Int] = [:]
    }

    private let state: NIOLockedValueBox<State>
    private let channel: any Channel
    /// The port the server listens on.
    public let port: Int
    /// The address the server listens on.
    public let host: String

    /// The scheme of the server's URLs: `https` when it serves TLS.
    public let scheme: String

    private init(state: NIOLockedValueBox<State>, channel: any Channel, host: String, scheme: String) {
        self.state = state
        self.channel = channel
        self.host = host
        self.scheme = scheme
        self.port = channel.localAddress!.port!
    }

    /// Starts a server on `host` (loopback) and an ephemeral port, runs `body`, and stops the server. With `tls`, it
    /// speaks https with ``TestCertificates``' server certificate (its ``url(_:)``s are https).
    public static func withServer<Result>(
        host: String = "127.0.0.1",
        resources: [String: Resource] = [:],
        tls: Bool = false,
        _ body: (FaultInjectingServer) async throws -> Result
    ) async throws -> Result {
        let state = NIOLockedValueBox(State(resources: resources))
        let tlsContext = tls ? try NIOSSLContext(configuration: TestCertificates.serverConfiguration()) : nil
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                let connection = state.withLockedValue {
                    $0.acceptedConnections += 1
                    return $0.acceptedConnections
                }
                return channel.eventLoop.makeCompletedFuture {
                    if let tlsContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tlsContext))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(RequestHandler(state: state, connection: connection))
                }
            }
            .bind(host: host, port: 0).get()
        let server = FaultInjectingServer(state: state, channel: channel, host: host, scheme: tls ? "https" : "http")
        do {
            let result = try await body(server)
            try? await channel.close()
            return result
        } catch {
            try? await channel.close()
            throw error
        }
    }

    /// The URL of a path on this server.
    public func url(_ path: String) -> URL {
        URL(string: "\(self.scheme)://\(self.host):\(self.port)\(path)")!
    }

    /// Serves `resource` at `path` from now on.
    public func setResource(_ resource: Resource?, at path: String) {
        self.state.withLockedValue { $0.resources[path] = resource }
    }

    /// Faults for successive `PUT`, `POST` and `DELETE` requests to `path`: ``Fault/status(_:)``,
    /// ``Fault/retryAfter(status:value:)``, ``Fault/closeConnection(afterBytes:)`` (closes after receiving that
    /// many body bytes, without answering) or ``Fault/stall(afterBytes:)`` (stops reading the body); `nil` entries
    /// answer correctly.
    public func setUploadFaults(_ faults: [Fault?], at path: String) {
        self.state.withLockedValue { $0.uploadFaults[path] = faults }
    }

    /// What uploads stored at each path (without deleted ones).
    public var uploads: [String: Upload] { self.state.withLockedValue { $0.uploads } }

    /// Stores a file as if it had been uploaded (a target for deletions).
    public func setUpload(_ body: [UInt8], at path: String) {
        self.state.withLockedValue { $0.uploads[path] = Upload(body: body) }
    }

    /// Every request received so far, in order.
    public var requests: [RecordedRequest] { self.state.withLockedValue { $0.requests } }

    /// The most requests that were in flight at once.
    public var maximumConcurrentRequests: Int { self.state.withLockedValue { $0.maximumInFlight } }

    /// Body bytes sent so far, over all responses.
    public var servedBodyBytes: Int { self.state.withLockedValue { $0.servedBodyBytes } }

    /// `count` deterministic pseudo-random bytes for `seed`.
    public static func body(size count: Int, seed: UInt64) -> [UInt8] {
        var x = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var bytes = [UInt8](repeating: 0, count: count)
        var index = 0
        while index < count {
            x ^= x << 13
            x ^= x >> 7
            x ^= x << 17
            var word = x
            for _ in 0..<8 where index < count {
                bytes[index] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                index += 1
            }
        }
        return bytes
    }

    /// A short fingerprint of bytes, for default ETags.
    static func fingerprint(_ bytes: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }

    /// A port on 127.0.0.1 where nothing listens (bound, then closed): a free port for a server about to start (nginx).
    /// For a test that needs a refused connection, ``withRefusingPort(_:)``: a port closed at once may be handed to
    /// the next server that binds port 0.
    public static func refusingPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress!.port!
        try await channel.close()
        return port
    }

    /// Runs `body` with a port on 127.0.0.1 that refuses connections for as long as `body` runs: a socket is bound to
    /// it without listening, so no other server can take the port meanwhile. (With a port merely closed, a test
    /// expecting a refusal once reached another test's server, which then saw a request it never expected.)
    public static func withRefusingPort<Result>(_ body: (Int) async throws -> Result) async throws -> Result {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw RefusingPortError(errno: errno) }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(descriptor, generic, length) == 0 && getsockname(descriptor, generic, &length) == 0
            }
        }
        guard bound else { throw RefusingPortError(errno: errno) }
        return try await body(Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A refusing port could not be reserved.
    public struct RefusingPortError: Error {
        public var errno: Int32
    }
}

extension Duration {
    var nanosecondsValue: Int64 {
        Int64(self.components.seconds) * 1_000_000_000 + self.components.attoseconds / 1_000_000_000
    }
}
