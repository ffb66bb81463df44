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

    private struct State: Sendable {
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

    // MARK: The handler

    private final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        private let state: NIOLockedValueBox<State>
        /// Which accepted connection this is, counted from 1.
        private let connection: Int
        private var head: HTTPRequestHead?
        private var responding = false
        /// For an upload or a deletion: the body so far, the fault chosen for it, and its index in `requests`.
        private var upload: (body: [UInt8], fault: Fault?, index: Int)?

        init(state: NIOLockedValueBox<State>, connection: Int) {
            self.state = state
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch self.unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                if [.PUT, .POST, .DELETE].contains(head.method) { self.upload = self.beginUpload(head) }
            case .body(let buffer):
                guard var upload = self.upload else { return }
                upload.body += buffer.readableBytesView
                self.upload = upload
                let count = upload.body.count
                self.state.withLockedValue { $0.requests[upload.index].bodyByteCount = count }
                if case .closeConnection(let afterBytes) = upload.fault, count >= afterBytes {
                    self.upload = nil
                    self.head = nil
                    context.close(promise: nil)
                }
                if case .stall(let afterBytes) = upload.fault, count >= afterBytes {
                    // Read nothing more: the client's socket buffers fill and its writes stop.
                    context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
                }
            case .end:
                guard let head = self.head else { return }
                self.head = nil
                if let upload = self.upload {
                    self.upload = nil
                    self.finishUpload(head, upload.body, fault: upload.fault, context: context)
                } else {
                    self.respond(to: head, context: context)
                }
            }
        }

        private func beginUpload(_ head: HTTPRequestHead) -> (body: [UInt8], fault: Fault?, index: Int) {
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            return self.state.withLockedValue { state in
                state.requests.append(
                    RecordedRequest(
                        method: head.method.rawValue,
                        path: head.uri,
                        headers: headers,
                        receivedAt: .now,
                        connection: self.connection
                    )
                )
                state.inFlight += 1
                state.maximumInFlight = max(state.maximumInFlight, state.inFlight)
                let key = Self.key(head.uri)
                let count = state.uploadRequestCounts[key, default: 0]
                state.uploadRequestCounts[key] = count + 1
                let faults = state.uploadFaults[key] ?? []
                self.responding = true
                return ([], count < faults.count ? faults[count] : nil, state.requests.count - 1)
            }
        }

        private func finishUpload(
            _ head: HTTPRequestHead,
            _ body: [UInt8],
            fault: Fault?,
            context: ChannelHandlerContext
        ) {
            if self.sendInjectedStatus(fault, context: context) { return }
            let key = Self.key(head.uri)
            let contentType = head.headers.first(name: "content-type")
            switch head.method {
            case .DELETE:
                let existed = self.state.withLockedValue { state -> Bool in
                    let existed = state.uploads.removeValue(forKey: key) != nil
                    return state.resources.removeValue(forKey: key) != nil || existed
                }
                self.sendText(status: existed ? .noContent : .notFound, existed ? "" : "not found\n", context: context)
            case .POST:
                guard let contentType, let form = Self.multipartFile(body, contentType: contentType) else {
                    self.sendText(status: .badRequest, "expected multipart/form-data with one file\n", context: context)
                    return
                }
                self.state.withLockedValue {
                    $0.uploads[key] = Upload(
                        body: form.body,
                        field: form.field,
                        fileName: form.fileName,
                        contentType: contentType
                    )
                }
                self.sendText(status: .created, "created\n", context: context)
            default:
                let existed = self.state.withLockedValue { state -> Bool in
                    defer { state.uploads[key] = Upload(body: body, contentType: contentType) }
                    return state.uploads[key] != nil
                }
                self.sendText(status: existed ? .noContent : .created, existed ? "" : "created\n", context: context)
            }
        }

        /// Answers with the status a `.status` or `.retryAfter` fault asks for; `false` for other faults.
        private func sendInjectedStatus(_ fault: Fault?, context: ChannelHandlerContext) -> Bool {
            switch fault {
            case .status(let code):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "injected status \(code)\n",
                    context: context
                )
                return true
            case .explainedStatus(let code, let text):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    text,
                    headers: ["Content-Type": "text/plain; charset=utf-8"],
                    context: context
                )
                return true
            case .retryAfter(let code, let value):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "slow down\n",
                    headers: ["Retry-After": value],
                    context: context
                )
                return true
            default:
                return false
            }
        }

        /// The path without its query: resources are found by path alone (a signature, a token, do not change the
        /// file).
        static func key(_ uri: String) -> String {
            String(uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
        }

        /// The one file field of a `multipart/form-data` body: its name, file name and bytes.
        static func multipartFile(
            _ body: [UInt8],
            contentType: String
        ) -> (field: String, fileName: String?, body: [UInt8])? {
            guard contentType.lowercased().hasPrefix("multipart/form-data"),
                let boundaryRange = contentType.range(of: "boundary=")
            else { return nil }
            let boundary = String(contentType[boundaryRange.upperBound...]).trimmingCharacters(
                in: .init(charactersIn: "\"")
            )
            let opening = Array("--\(boundary)\r\n".utf8)
            let closing = Array("\r\n--\(boundary)--\r\n".utf8)
            guard body.starts(with: opening), body.count >= opening.count + closing.count,
                Array(body.suffix(closing.count)) == closing
            else { return nil }
            let separator = Array("\r\n\r\n".utf8)
            let inner = Array(body[opening.count..<(body.count - closing.count)])
            guard
                let split = (0...(inner.count - separator.count)).first(where: {
                    inner[$0..<$0 + separator.count].elementsEqual(separator)
                })
            else { return nil }
            let partHeaders = String(decoding: inner[..<split], as: UTF8.self)
            func parameter(_ name: String) -> String? {
                guard let range = partHeaders.range(of: "\(name)=\"") else { return nil }
                let rest = partHeaders[range.upperBound...]
                return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
            }
            guard let field = parameter(" name") ?? parameter(";name") else { return nil }
            return (field, parameter("filename"), Array(inner[(split + separator.count)...]))
        }

        func channelInactive(context: ChannelHandlerContext) {
            if self.responding {
                self.responding = false
                self.state.withLockedValue { $0.inFlight -= 1 }
            }
            context.fireChannelInactive()
        }

        private func respond(to head: HTTPRequestHead, context: ChannelHandlerContext) {
            let path = head.uri
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            let (resource, fault): (Resource?, Fault?) = self.state.withLockedValue { state in
                state.requests.append(
                    RecordedRequest(
                        method: head.method.rawValue,
                        path: path,
                        headers: headers,
                        receivedAt: .now,
                        connection: self.connection
                    )
                )
                state.inFlight += 1
                state.maximumInFlight = max(state.maximumInFlight, state.inFlight)
                // Resources are found by path alone: a query (a signature, a token) does not change the file.
                let key = String(path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
                let count = state.requestCounts[key, default: 0]
                state.requestCounts[key] = count + 1
                let resource = state.resources[key] ?? state.uploads[key].map { Resource(body: $0.body) }
                let fault = resource.flatMap { count < $0.faults.count ? $0.faults[count] : nil }
                return (resource, fault)
            }
            self.responding = true

            guard var resource else {
                self.sendText(status: .notFound, "not found\n", context: context)
                return
            }
            if self.sendInjectedStatus(fault, context: context) { return }
            switch fault {
            case .noAnswer:
                return  // Nothing, until the client gives up.
            case .closeWithoutAnswer:
                context.close(promise: nil)
                return
            case .rangeNotSatisfiable(let length) where headers["range"] != nil:
                self.sendText(
                    status: .rangeNotSatisfiable,
                    "",
                    headers: ["Content-Range": "bytes */\(length)"],
                    context: context
                )
                return
            case .hugeHeader(let bytes):
                self.sendText(
                    status: .ok,
                    "x",
                    headers: ["X-Huge": String(repeating: "a", count: bytes)],
                    context: context
                )
                return
            case .conflictingContentLength:
                var conflicting = HTTPHeaders()
                conflicting.add(name: "Content-Length", value: "5")
                conflicting.add(name: "Content-Length", value: "7")
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: conflicting))),
                    promise: nil
                )
                context.write(
                    self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: "1234567")))),
                    promise: nil
                )
                self.finishResponse(context: context)
                return
            case .announceLength(let length):
                var announced = HTTPHeaders()
                announced.add(name: "Content-Length", value: String(length))
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: announced))),
                    promise: nil
                )
                let body = context.channel.allocator.buffer(bytes: resource.body)
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
                if self.responding {
                    self.responding = false
                    self.state.withLockedValue { $0.inFlight -= 1 }
                }
                context.close(promise: nil)
                return
            case .sendMoreThanAnnounced(let extra):
                var announced = HTTPHeaders()
                announced.add(name: "Content-Length", value: String(resource.body.count))
                context.write(
                    self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: announced))),
                    promise: nil
                )
                let body = context.channel.allocator.buffer(bytes: resource.body + Array(extra.utf8))
                context.write(self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
                self.finishResponse(context: context)
                return
            case .redirect(let code, let location):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "",
                    headers: ["Location": location],
                    context: context
                )
                return
            case .redirectWithFields(let code, let location, let fields):
                self.sendText(
                    status: HTTPResponseStatus(statusCode: code),
                    "",
                    headers: fields.merging(["Location": location]) { $1 },
                    context: context
                )
                return
            default:
                break
            }
            if case .oldBody(let bytes, _) = fault { resource.body = bytes }
            let total = resource.body.count
            var start = 0
            var status = HTTPResponseStatus.ok
            var responseHeaders = HTTPHeaders()
            if let etag = resource.etag { responseHeaders.add(name: "ETag", value: etag) }
            if let lastModified = resource.lastModified {
                responseHeaders.add(name: "Last-Modified", value: lastModified)
            }
            if let disposition = resource.contentDisposition {
                responseHeaders.add(name: "Content-Disposition", value: disposition)
            }
            responseHeaders.add(name: "Accept-Ranges", value: "bytes")
            responseHeaders.add(name: "Date", value: Self.httpDate(Date()))
            if case .addHeaders(let extra) = fault {
                for (name, value) in extra { responseHeaders.add(name: name, value: value) }
            }
            if fault == .changeETag {
                responseHeaders.replaceOrAdd(name: "ETag", value: "\"changed-\(resource.body.count)\"")
            }
            let ignoresIfRange =
                fault.map {
                    switch $0 {
                    case .changeETag, .shiftContentRange, .wrongCompleteLength: true
                    default: false
                    }
                } == true
            if fault != .ignoreRange, let range = headers["range"], let first = Self.rangeStart(range) {
                let ifRangeMatches =
                    ignoresIfRange
                    || (headers["if-range"].map { $0 == resource.etag || $0 == resource.lastModified } ?? true)
                if ifRangeMatches {
                    if first >= total {
                        responseHeaders.add(name: "Content-Range", value: "bytes */\(total)")
                        self.sendText(status: .rangeNotSatisfiable, "", headers: responseHeaders, context: context)
                        return
                    }
                    start = first
                    status = .partialContent
                    var announced = first
                    if case .shiftContentRange(let shift) = fault { announced = max(0, min(total - 1, first + shift)) }
                    var announcedTotal = total
                    if case .wrongCompleteLength(let delta) = fault { announcedTotal = total + delta }
                    responseHeaders.add(
                        name: "Content-Range",
                        value: "bytes \(announced)-\(total - 1)/\(announcedTotal)"
                    )
                }
            }
            var closeAfter: Int?
            var stallAfter: Int?
            switch fault {
            case .closeConnection(let afterBytes), .oldBody(_, let afterBytes):
                closeAfter = afterBytes
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            case .cutChunkedBody(let afterBytes):
                closeAfter = afterBytes
                responseHeaders.add(name: "Transfer-Encoding", value: "chunked")
            case .stall(let afterBytes):
                stallAfter = afterBytes
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            case .stallChunked(let afterBytes):
                stallAfter = afterBytes
                responseHeaders.add(name: "Transfer-Encoding", value: "chunked")
            default:
                responseHeaders.add(name: "Content-Length", value: String(total - start))
            }
            context.write(
                self.wrapOutboundOut(
                    .head(HTTPResponseHead(version: .http1_1, status: status, headers: responseHeaders))
                ),
                promise: nil
            )
            if let stallAfter {
                let end = min(total, start + stallAfter)
                let buffer = context.channel.allocator.buffer(bytes: resource.body[start..<end])
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                self.state.withLockedValue { $0.servedBodyBytes += end - start }
                return  // Nothing more until the client gives up.
            }
            self.writeBody(resource, from: start, sent: 0, closeAfter: closeAfter, context: context)
        }

        private func writeBody(
            _ resource: Resource,
            from offset: Int,
            sent: Int,
            closeAfter: Int?,
            context: ChannelHandlerContext
        ) {
            guard context.channel.isActive else { return }
            var end = min(resource.body.count, offset + resource.chunkSize)
            if let closeAfter { end = min(end, offset + max(0, closeAfter - sent)) }
            if end > offset {
                let buffer = context.channel.allocator.buffer(bytes: resource.body[offset..<end])
                context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                self.state.withLockedValue { $0.servedBodyBytes += end - offset }
            }
            let sentNow = sent + (end - offset)
            if let closeAfter, sentNow >= closeAfter, end < resource.body.count || resource.chunkDelay != nil {
                context.flush()
                if let delay = resource.chunkDelay {
                    // Let the client read what was sent before it sees the connection close.
                    context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(delay.nanosecondsValue)) {
                        context.close(promise: nil)
                    }
                } else {
                    context.close(promise: nil)
                }
                return
            }
            if end >= resource.body.count {
                self.finishResponse(context: context)
                return
            }
            if let delay = resource.chunkDelay {
                context.flush()
                let loop = context.eventLoop.assumeIsolated()
                loop.scheduleTask(in: .nanoseconds(delay.nanosecondsValue)) {
                    self.writeBody(resource, from: end, sent: sentNow, closeAfter: closeAfter, context: context)
                }
            } else {
                self.writeBody(resource, from: end, sent: sentNow, closeAfter: closeAfter, context: context)
            }
        }

        private func sendText(
            status: HTTPResponseStatus,
            _ text: String,
            headers: [String: String],
            context: ChannelHandlerContext
        ) {
            var httpHeaders = HTTPHeaders()
            for (name, value) in headers { httpHeaders.add(name: name, value: value) }
            self.sendText(status: status, text, headers: httpHeaders, context: context)
        }

        private func sendText(
            status: HTTPResponseStatus,
            _ text: String,
            headers: HTTPHeaders = HTTPHeaders(),
            context: ChannelHandlerContext
        ) {
            var headers = headers
            headers.replaceOrAdd(name: "Content-Length", value: String(text.utf8.count))
            context.write(
                self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
                promise: nil
            )
            if !text.isEmpty {
                context.write(
                    self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: text)))),
                    promise: nil
                )
            }
            self.finishResponse(context: context)
        }

        private func finishResponse(context: ChannelHandlerContext) {
            if self.responding {
                self.responding = false
                self.state.withLockedValue { $0.inFlight -= 1 }
            }
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        }

        static func httpDate(_ date: Date) -> String {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
            return formatter.string(from: date)
        }

        /// The first byte of `bytes=N-` or `bytes=N-M` (M is ignored: the server sends to the end).
        static func rangeStart(_ header: String) -> Int? {
            guard header.hasPrefix("bytes="), !header.contains(",") else { return nil }
            let spec = header.dropFirst(6)
            guard let dash = spec.firstIndex(of: "-") else { return nil }
            return Int(spec[..<dash])
        }
    }
}

extension Duration {
    var nanosecondsValue: Int64 {
        Int64(self.components.seconds) * 1_000_000_000 + self.components.attoseconds / 1_000_000_000
    }
}
