import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Haul's own connections for plain-http downloads: SwiftNIO's HTTP/1.1 codec on keep-alive connections, one
/// exchange at a time each (``HTTP1ConnectionHandler``), kept per origin between downloads. https, uploads and
/// deletions go through AsyncHTTPClient (``HTTPTransport``). It exists because AsyncHTTPClient's per-request path
/// costs more than fetching a small file does (docs/performance.md).
///
/// What it does as the client did for downloads: the connect timeout; the read timeout (a response silent for
/// ``TransferManager/Configuration/idleTimeout``, before its head or during its body, fails with the client's
/// `readTimeout`; an idle connection in the pool closes after as long); reads that grow on fast bodies, here to
/// 256 KiB (``readSizeLimit``); a request sent again once on a new connection when a kept-alive
/// one turns out closed before any of the response arrived (a GET changes nothing on the server); the client's errors
/// for the same failures. Redirects are ``HTTPTransport``'s.
final class ConnectionPool: Sendable {
    /// Where a connection goes: the host (lower-cased) and port of an http URL.
    struct Origin: Hashable, Sendable {
        /// Lower-cased; an IPv6 address without its brackets.
        let host: String
        let port: Int

        init(_ url: URL) {
            var host = (url.host ?? "").lowercased()
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.host = host
            self.port = url.port ?? 80
        }
    }

    /// The origin of the last URL asked about, or `nil` when these connections do not take it (``origin(of:)``).
    private let lastOrigin = NIOLockedValueBox(LastAuthority<Origin?>())

    private let group: any EventLoopGroup
    /// Whether SwiftNIO's sockets run on the group's loops. On Apple platforms AsyncHTTPClient's group is
    /// Network.framework's (`NIOTSEventLoopGroup`), on which they cannot: there plain http, too, goes through the
    /// client (and Network.framework keeps its say over the device's networks).
    let isAvailable: Bool
    private let connectTimeout: TimeAmount
    private let idleTimeout: TimeAmount
    private let readSize: Int
    /// The most one of these connections reads at once: 256 KiB, small enough to stay in the processor's cache for
    /// the copy into the page cache that follows each read.
    static let readSizeLimit = 256 * 1024
    /// How many idle connections are kept over all origins: as many as transfers may run at once. A longer list of
    /// hosts would otherwise keep a socket open to each for the idle timeout (a thousand hosts, a thousand file
    /// descriptors); past it the connection idle the longest closes.
    private let maximumIdle: Int
    /// The proxies, when plain-http requests go through one (``TransferManager/Configuration/proxies``); `nil` when
    /// every connection goes directly to its origin.
    private let proxies: ProxySettings?
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// The connections between exchanges, by origin; the last one given back is taken first.
        var idle: [Origin: [Idle]] = [:]
        var idleCount = 0
        /// Orders the idle connections by when they were given back.
        var nextSequence = 0
        var isShutDown = false

        /// Removes and returns the connection idle the longest.
        mutating func removeOldest() -> (any Channel)? {
            var oldest: (origin: Origin, index: Int, sequence: Int)?
            for (origin, connections) in self.idle {
                for (index, connection) in connections.enumerated()
                where connection.sequence < oldest?.sequence ?? .max {
                    oldest = (origin, index, connection.sequence)
                }
            }
            guard let oldest else { return nil }
            return self.remove(at: oldest.index, of: oldest.origin)
        }

        mutating func remove(at index: Int, of origin: Origin) -> any Channel {
            let channel = self.idle[origin]![index].channel
            self.idle[origin]!.remove(at: index)
            if self.idle[origin]!.isEmpty { self.idle[origin] = nil }
            self.idleCount -= 1
            return channel
        }
    }

    /// A connection between exchanges.
    private struct Idle {
        let channel: any Channel
        let sequence: Int
    }

    init(group: any EventLoopGroup, configuration: TransferManager.Configuration) {
        self.group = group
        self.isAvailable = ClientBootstrap(validatingGroup: group) != nil
        self.connectTimeout = .nanoseconds(configuration.connectTimeout.nanoseconds)
        self.idleTimeout = .nanoseconds(configuration.idleTimeout.nanoseconds)
        self.readSize = HTTPTransport.maximumReadSize(
            concurrency: configuration.maximumConcurrentTransfers,
            limit: Self.readSizeLimit
        )
        self.maximumIdle = max(configuration.maximumConcurrentTransfers, 1)
        self.proxies = configuration.proxies.http == nil ? nil : configuration.proxies
    }

    /// Whether a URL goes through these connections: http with a host and no credentials in the URL, when the pool
    /// is available (``isAvailable``).
    func handles(_ url: URL) -> Bool {
        self.isAvailable && self.origin(of: url) != nil
    }

    /// The origin of a URL of the kind these connections take (``handles(_:)-swift.type.method``), `nil` for any other
    /// URL; worked out once for a run of URLs with the same scheme and authority.
    func origin(of url: URL) -> Origin? {
        self.lastOrigin.withLockedValue { $0.value(of: url) { Self.handles($0) ? Origin($0) : nil } }
    }

    /// Whether a URL is of the kind these connections take: http with a host and no credentials in the URL (which
    /// AsyncHTTPClient turns into an `Authorization` header).
    static func handles(_ url: URL) -> Bool {
        url.scheme?.lowercased() == "http" && url.user == nil && url.password == nil && !(url.host ?? "").isEmpty
    }

    /// Sends a GET of `url` (whose ``origin(of:)`` is `origin`) with `headers` (and a `Host` header, unless they have
    /// one), and returns once the response's head has arrived; the body goes to a ``BodyWriter`` on the connection's
    /// event loop. Cancelling the task cancels the request.
    nonisolated(nonsending) func start(
        _ url: URL,
        origin: Origin,
        headers: [(name: String, value: String)]
    ) async throws -> ResponseStream.Started {
        // Its connections go to the proxy when it has one (each carries requests for this origin only).
        let proxy = self.proxies?.proxy(scheme: "http", host: origin.host)
        let request = try Self.requestHead(url, origin: origin, headers: headers, proxy: proxy)
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? self.group.next()
        var sentAgain = false
        while true {
            try Task.checkCancellation()
            let idle = try self.checkOut(origin, preferring: loop)
            let channel: any Channel
            if let idle { channel = idle } else { channel = try await self.connect(origin, via: proxy, on: loop) }
            let exchange = HTTP1Exchange(request: request, channel: channel)
            Self.send(exchange)
            do {
                let head = try await exchange.value(of: exchange.stream.head)
                return ResponseStream.Started(head: head, stream: exchange.stream, request: exchange)
            } catch is HTTP1ConnectionHandler.StaleConnection {
                guard !sentAgain else { throw HTTPClientError.remoteConnectionClosed }
                sentAgain = true
            }
        }
    }

    /// Writes `exchange` into its channel, whose handler sends it. The channel may have closed since it was checked
    /// out: then the exchange ends as stale, and the request goes on another connection.
    private static func send(_ exchange: HTTP1Exchange) {
        let channel = exchange.channel
        guard channel.eventLoop.inEventLoop else {
            let written = channel.eventLoop.makePromise(of: Void.self)
            channel.pipeline.writeAndFlush(exchange, promise: written)
            written.futureResult.whenFailure { _ in
                // The channel closed before its handler saw the request.
                exchange.ended(with: HTTP1ConnectionHandler.StaleConnection())
            }
            return
        }
        // On the channel's event loop (the task's executor's, as usual): an open channel's handler takes the write
        // before this call returns, so it needs no promise (and the generic write, no runtime casts).
        guard channel.isActive else { return exchange.ended(with: HTTP1ConnectionHandler.StaleConnection()) }
        channel.pipeline.syncOperations.writeAndFlush(NIOAny(exchange), promise: nil)
    }

    /// The request's head: the URL's path and query as they were written, `Host` first. Through a proxy, the target
    /// is the whole URL (`http://host:port/path?query`, RFC 9112's absolute form) and the proxy's credentials follow
    /// as `Proxy-Authorization` (unless the headers give one).
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` when the target or a field could not be sent as it is: a request
    ///   is checked here, once, as it is made (``RequestCheck``), not again by SwiftNIO's validator in the pipeline.
    static func requestHead(
        _ url: URL,
        origin: Origin,
        headers: [(name: String, value: String)],
        proxy: Proxy? = nil
    ) throws(HaulError) -> HTTPRequestHead {
        var target = url.path(percentEncoded: true)
        if target.isEmpty { target = "/" }
        if let query = url.query(percentEncoded: true) { target += "?" + query }
        guard RequestCheck.isValidTarget(target) else {
            throw HaulError(.invalidRequest, "The URL's path or query cannot be sent as it is: \(url.absoluteString)")
        }
        try RequestCheck.checkFields(headers)
        // Gathered, then handed over at once: every name here is a checked token already.
        var fields: [(String, String)] = []
        fields.reserveCapacity(headers.count + 1)
        let namesHost = headers.contains { field in
            var name = field.name
            return name.withUTF8 { RequestCheck.equalsIgnoringCase(UnsafeRawBufferPointer($0), "host") }
        }
        // A byte search: `contains(":")` resolved to Foundation's, which bridged the host to `NSString` on every
        // request (1 % of the event loops' CPU on 2,000 small files).
        let host = origin.host.utf8.contains(UInt8(ascii: ":")) ? "[\(origin.host)]" : origin.host
        let authority = origin.port == 80 ? host : "\(host):\(origin.port)"
        if !namesHost { fields.append(("Host", authority)) }
        for (name, value) in headers { fields.append((name, value)) }
        if let proxy {
            target = "http://" + authority + target
            let namesAuthorization = headers.contains { $0.name.lowercased() == "proxy-authorization" }
            if !namesAuthorization, let authorization = proxy.authorization {
                fields.append(("Proxy-Authorization", authorization))
            }
        }
        return HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: HTTPHeaders(fields))
    }

    /// An open idle connection to `origin`, one on `loop` if there is one; `nil` when none is idle.
    private func checkOut(_ origin: Origin, preferring loop: any EventLoop) throws -> (any Channel)? {
        try self.state.withLockedValue { state in
            guard !state.isShutDown else { throw HTTPClientError.alreadyShutdown }
            while let connections = state.idle[origin] {
                let index = connections.lastIndex { $0.channel.eventLoop === loop } ?? connections.count - 1
                let channel = state.remove(at: index, of: origin)
                // One that closed since is dropped (its handler removes it too, when its close is seen).
                if channel.isActive { return channel }
            }
            return nil
        }
    }

    /// A new connection for `origin` on `loop`: to the origin, or to `proxy`. Cancelling the task ends the wait (a
    /// connection made after that closes).
    nonisolated(nonsending) private func connect(
        _ origin: Origin,
        via proxy: Proxy?,
        on loop: any EventLoop
    ) async throws -> any Channel {
        let readSize = self.readSize
        let idleTimeout = self.idleTimeout
        // Never nil where the pool is available (``isAvailable``): `loop` is one of its group's.
        guard let bootstrap = ClientBootstrap(validatingGroup: loop) else { throw HTTPClientError.alreadyShutdown }
        let configured =
            bootstrap
            .connectTimeout(self.connectTimeout)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            // As AsyncHTTPClient's connections are set up (``HTTPTransport/makeClient(_:)``): reads grow on fast
            // bodies (to ``readSizeLimit``), one per wake-up.
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: readSize)
            )
            .channelOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    // Haul's request encoder (in the connection's handler) and response decoder, and no validator:
                    // ``requestHead(_:origin:headers:)`` checks each request as it is made. The decoder hands its parts to the
                    // connection's handler directly (``HTTP1ResponsePartSink``), so the read timeout watches the bytes as they are
                    // read, ahead of it.
                    let connection = HTTP1ConnectionHandler(pool: self, origin: origin, idleTimeout: idleTimeout)
                    try pipeline.addHandler(IdleStateHandler(readTimeout: idleTimeout))
                    try pipeline.addHandler(HTTP1ResponseHandler(oneRequestAtATime: true, sink: connection))
                    try pipeline.addHandler(connection)
                }
            }
        let connecting = configured.connect(host: proxy?.host ?? origin.host, port: proxy?.port ?? origin.port)
        let connected = loop.makePromise(of: (any Channel).self)
        connecting.cascade(to: connected)
        do {
            return try await withTaskCancellationHandler {
                try await connected.futureResult.get()
            } onCancel: {
                connected.fail(CancellationError())
                connecting.whenSuccess { $0.close(promise: nil) }
            }
        } catch ChannelError.connectTimeout {
            if let proxy { throw HaulError(.timedOut, "Timed out connecting to the proxy \(proxy.authority)") }
            throw HTTPClientError.connectTimeout
        } catch {
            // Named as the proxy's: the URL's server was never asked.
            guard let proxy, !(error is CancellationError) else { throw error }
            throw HaulError(
                .connectionFailed,
                "The proxy \(proxy.authority): \(ConnectionFailure.message(for: error, receivedBody: false))",
                underlying: error
            )
        }
    }

    /// Called by a connection's handler when its exchange ended and the connection may carry another.
    func checkIn(_ channel: any Channel, of origin: Origin) {
        let closing: (any Channel)? = self.state.withLockedValue { state in
            guard !state.isShutDown else { return channel }
            let evicted = state.idleCount >= self.maximumIdle ? state.removeOldest() : nil
            state.idle[origin, default: []].append(Idle(channel: channel, sequence: state.nextSequence))
            state.nextSequence += 1
            state.idleCount += 1
            return evicted
        }
        closing?.close(promise: nil)
    }

    /// Called by a connection's handler when its connection has closed.
    func remove(_ channel: any Channel, of origin: Origin) {
        self.state.withLockedValue { state in
            guard let index = state.idle[origin]?.firstIndex(where: { $0.channel === channel }) else { return }
            _ = state.remove(at: index, of: origin)
        }
    }

    /// Closes the idle connections; later requests fail. Exchanges under way go on to their end (the manager has
    /// ended its transfers when it shuts the pool down).
    func shutDown() {
        let channels = self.state.withLockedValue { state in
            state.isShutDown = true
            defer {
                state.idle = [:]
                state.idleCount = 0
            }
            return state.idle.values.joined().map(\.channel)
        }
        for channel in channels { channel.close(promise: nil) }
    }
}
