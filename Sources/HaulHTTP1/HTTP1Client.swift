import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A keep-alive HTTP/1.1 client on SwiftNIO for plain-http GETs: one exchange at a time per connection
/// (``HTTP1ConnectionHandler``), SwiftNIO's codec, connections kept per endpoint between exchanges.
///
/// What it does: the connect timeout; the read timeout (a response silent for ``Configuration/idleTimeout``, before
/// its head or during its body, fails with ``HTTP1ClientError/Code/readTimeout``; the consumer's own waits do not
/// count; an idle connection closes after as long); reads that grow on fast bodies up to
/// ``Configuration/readSizeLimit``; a request sent again once on a new connection when a kept-alive one turns out
/// closed before any of the response arrived (the requests are GETs: nothing happened on the server).
public final class HTTP1Client: Sendable {
    /// Where a connection goes: a host (lower-cased; an IPv6 address without its brackets) and a port.
    public struct Endpoint: Hashable, Sendable {
        public let host: String
        public let port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    /// How the client connects and reads.
    public struct Configuration: Sendable {
        /// How long a connection may take to open.
        public var connectTimeout: TimeAmount = .seconds(10)
        /// How long a response may be silent, and how long an idle connection is kept.
        public var idleTimeout: TimeAmount = .seconds(60)
        /// The most a connection reads at once. 256 KiB: small enough to stay in the processor's cache for the copy
        /// that follows each read.
        public var readSizeLimit = 256 * 1024
        /// How many idle connections are kept over all endpoints; past it the one idle the longest closes.
        public var maximumIdleConnections = 4

        public init() {}
    }

    private let group: any EventLoopGroup
    private let configuration: Configuration
    /// Whether SwiftNIO's sockets run on the group's loops (not on Network.framework's, on Apple platforms).
    public let isAvailable: Bool
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// The connections between exchanges, by endpoint; the last one given back is taken first.
        var idle: [Endpoint: [Idle]] = [:]
        var idleCount = 0
        /// Orders the idle connections by when they were given back.
        var nextSequence = 0
        var isShutDown = false

        /// Removes and returns the connection idle the longest.
        mutating func removeOldest() -> (any Channel)? {
            var oldest: (endpoint: Endpoint, index: Int, sequence: Int)?
            for (endpoint, connections) in self.idle {
                for (index, connection) in connections.enumerated()
                where connection.sequence < oldest?.sequence ?? .max {
                    oldest = (endpoint, index, connection.sequence)
                }
            }
            guard let oldest else { return nil }
            return self.remove(at: oldest.index, of: oldest.endpoint)
        }

        mutating func remove(at index: Int, of endpoint: Endpoint) -> any Channel {
            let channel = self.idle[endpoint]![index].channel
            self.idle[endpoint]!.remove(at: index)
            if self.idle[endpoint]!.isEmpty { self.idle[endpoint] = nil }
            self.idleCount -= 1
            return channel
        }
    }

    /// A connection between exchanges.
    private struct Idle {
        let channel: any Channel
        let sequence: Int
    }

    public init(group: any EventLoopGroup, configuration: Configuration) {
        self.group = group
        self.configuration = configuration
        self.isAvailable = ClientBootstrap(validatingGroup: group) != nil
    }

    /// Sends `request` to `endpoint` (connecting to `proxy` instead when given: the request's target is then the
    /// whole URL) and returns once the response's head has arrived: the head, the exchange, and the consumer made
    /// for the connection's event loop, where the body goes. Cancelling the task cancels the exchange.
    public nonisolated(nonsending) func execute<Consumer: HTTP1ResponseConsumer>(
        _ request: HTTPRequestHead,
        on endpoint: Endpoint,
        via proxy: Endpoint? = nil,
        consumer makeConsumer: (any EventLoop) -> Consumer
    ) async throws -> (head: HTTPResponseHead, exchange: HTTP1Exchange, consumer: Consumer) {
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? self.group.next()
        var sentAgain = false
        while true {
            try Task.checkCancellation()
            let idle = try self.checkOut(endpoint, preferring: loop)
            let channel: any Channel
            if let idle { channel = idle } else { channel = try await self.connect(endpoint, via: proxy, on: loop) }
            let consumer = makeConsumer(channel.eventLoop)
            let exchange = HTTP1Exchange(request: request, channel: channel, consumer: consumer)
            Self.send(exchange)
            do {
                let head = try await exchange.value(of: exchange.head)
                return (head, exchange, consumer)
            } catch is HTTP1ConnectionHandler.StaleConnection {
                guard !sentAgain else { throw HTTP1ClientError(.remoteConnectionClosed) }
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
            written.futureResult.whenFailure { _ in exchange.endedStale() }
            return
        }
        guard channel.isActive else { return exchange.endedStale() }
        channel.pipeline.syncOperations.writeAndFlush(NIOAny(exchange), promise: nil)
    }

    /// An open idle connection to `endpoint`, one on `loop` if there is one; `nil` when none is idle.
    private func checkOut(_ endpoint: Endpoint, preferring loop: any EventLoop) throws -> (any Channel)? {
        try self.state.withLockedValue { state in
            guard !state.isShutDown else { throw HTTP1ClientError(.alreadyShutdown) }
            while let connections = state.idle[endpoint] {
                let index = connections.lastIndex { $0.channel.eventLoop === loop } ?? connections.count - 1
                let channel = state.remove(at: index, of: endpoint)
                // One that closed since is dropped (its handler removes it too, when its close is seen).
                if channel.isActive { return channel }
            }
            return nil
        }
    }

    /// A new connection for `endpoint` on `loop`: to the endpoint, or to `proxy`. Cancelling the task ends the wait
    /// (a connection made after that closes). Throws ``HTTP1ClientError/Code/connectTimeout`` or
    /// ``HTTP1ClientError/Code/connectFailed``.
    nonisolated(nonsending) private func connect(
        _ endpoint: Endpoint,
        via proxy: Endpoint?,
        on loop: any EventLoop
    ) async throws -> any Channel {
        let idleTimeout = self.configuration.idleTimeout
        // Never nil where the client is available (``isAvailable``): `loop` is one of its group's.
        guard let bootstrap = ClientBootstrap(validatingGroup: loop) else {
            throw HTTP1ClientError(.alreadyShutdown)
        }
        let configured =
            bootstrap
            .connectTimeout(self.configuration.connectTimeout)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            // Reads grow on fast bodies, one per wake-up.
            .channelOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(
                    minimum: 64,
                    initial: 2048,
                    maximum: self.configuration.readSizeLimit
                )
            )
            .channelOption(ChannelOptions.maxMessagesPerRead, value: 1)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    // The read timeout watches the bytes as they are read, ahead of the codec. The caller checks
                    // each request's fields as it makes them: no validator of SwiftNIO's in the pipeline.
                    try pipeline.addHandler(IdleStateHandler(readTimeout: idleTimeout))
                    try pipeline.addHTTPClientHandlers(enableOutboundHeaderValidation: false)
                    try pipeline.addHandler(
                        HTTP1ConnectionHandler(client: self, endpoint: endpoint, idleTimeout: idleTimeout)
                    )
                }
            }
        let address = proxy ?? endpoint
        let connecting = configured.connect(host: address.host, port: address.port)
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
            throw HTTP1ClientError(.connectTimeout)
        } catch let error as CancellationError {
            throw error
        } catch {
            throw HTTP1ClientError(.connectFailed, underlying: error)
        }
    }

    /// Called by a connection's handler when its exchange ended and the connection may carry another.
    func checkIn(_ channel: any Channel, of endpoint: Endpoint) {
        let closing: (any Channel)? = self.state.withLockedValue { state in
            guard !state.isShutDown else { return channel }
            let evicted =
                state.idleCount >= max(self.configuration.maximumIdleConnections, 1) ? state.removeOldest() : nil
            state.idle[endpoint, default: []].append(Idle(channel: channel, sequence: state.nextSequence))
            state.nextSequence += 1
            state.idleCount += 1
            return evicted
        }
        closing?.close(promise: nil)
    }

    /// Called by a connection's handler when its connection has closed.
    func remove(_ channel: any Channel, of endpoint: Endpoint) {
        self.state.withLockedValue { state in
            guard let index = state.idle[endpoint]?.firstIndex(where: { $0.channel === channel }) else { return }
            _ = state.remove(at: index, of: endpoint)
        }
    }

    /// Closes the idle connections; later requests fail. Exchanges under way go on to their end.
    public func shutDown() {
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
