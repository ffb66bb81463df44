import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// One GET on one of Haul's own plain-http connections: the request's head, the ``ResponseStream`` its response goes
/// to, and the response's end, handed to the task that waits for it. Started by writing it into its channel
/// (``ConnectionPool``); ended by the channel's ``HTTP1ConnectionHandler``, on the channel's event loop.
final class HTTP1Exchange: ResponseRequest {
    let request: HTTPRequestHead
    let stream: ResponseStream
    let channel: any Channel
    private let end = Handoff<Void>()

    init(request: HTTPRequestHead, channel: any Channel) {
        self.request = request
        self.channel = channel
        self.stream = ResponseStream(eventLoop: channel.eventLoop)
    }

    nonisolated(nonsending) func waitForEnd() async throws {
        try await self.value(of: self.end)
    }

    func cancel() {
        self.fail(reason: HTTPClientError.cancelled)
    }

    func fail(reason: any Error) {
        self.channel.triggerUserOutboundEvent(
            HTTP1ConnectionHandler.Abort(exchange: self, reason: reason),
            promise: nil
        )
    }

    /// On the event loop: the response has ended.
    func finished() {
        self.end.succeed(())
    }

    /// On the event loop: the exchange failed with `error` (before its head or after it).
    func ended(with error: any Error) {
        self.stream.failed(error)
        self.end.fail(error)
    }
}

/// The handler at the end of each of Haul's plain-http connections (after a read timeout and Haul's response decoder,
/// whose parts it takes directly): it sends an exchange's request, hands the response to the exchange's
/// ``ResponseStream`` as it arrives, reads no further while the stream asks to wait (the bandwidth limits, a body not
/// yet given a writer), and at the end gives the connection back to its ``ConnectionPool`` or closes it. What it
/// decides, it asks of ``HTTP1Connection/StateMachine``.
final class HTTP1ConnectionHandler: ChannelDuplexHandler, HTTP1ResponsePartSink {
    /// Nothing: the response's parts come from the decoder directly (``received(_:)``), not through the pipeline.
    typealias InboundIn = Never
    typealias OutboundIn = HTTP1Exchange
    typealias OutboundOut = IOData

    /// The caller's request to stop an exchange (``HTTP1Exchange/fail(reason:)``), as a user event on the channel.
    struct Abort: Sendable {
        let exchange: HTTP1Exchange
        let reason: any Error
    }

    /// The connection closed before any of the response arrived, after it had served other exchanges, or before the
    /// request could be written: the pool sends the request again on another connection.
    struct StaleConnection: Error {}

    private var machine = HTTP1Connection.StateMachine()
    private var exchange: HTTP1Exchange?
    private let pool: ConnectionPool
    private let origin: ConnectionPool.Origin
    /// Body parts handed to the stream whose "read on" has not come yet; while any is out, reads wait.
    private var bodyPartsWaiting = 0
    /// A read the channel asked for while reads wait.
    private var readPending = false
    /// The response's end, arrived while body parts wait: the exchange ends when they are through (as
    /// AsyncHTTPClient's delegate contract has it), so that the bandwidth limits' last wait is served.
    private var endPending = false
    /// The read timeout, which counts the server's silence only: time spent in our own waits (while body parts
    /// wait) does not count, and after one the server has the whole timeout again.
    private let idleTimeout: TimeAmount
    /// When our last wait ended, and whether any of the response has arrived since.
    private var waitEndedAt: NIODeadline?
    private var receivedSinceWait = false

    /// Writes each request's head; here rather than as a handler of its own, so a request is not wrapped in `NIOAny`.
    private let encoder = HTTP1RequestEncoder()
    /// This handler's place in its pipeline, for the parts its connection's decoder hands over directly
    /// (``HTTP1ResponsePartSink``); `nil` outside a pipeline.
    private var context: ChannelHandlerContext?

    init(pool: ConnectionPool, origin: ConnectionPool.Origin, idleTimeout: TimeAmount) {
        self.pool = pool
        self.origin = origin
        self.idleTimeout = idleTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = self.unwrapOutboundIn(data)
        promise?.succeed()
        switch self.machine.requestStarted() {
        case .sendRequest:
            self.exchange = exchange
            self.waitEndedAt = nil
            // The head is the whole request (a GET). No promise: a write that fails closes the channel, and its
            // close ends the exchange (``channelInactive(context:)``).
            let head = self.encoder.encode(exchange.request, allocator: context.channel.allocator)
            context.writeAndFlush(self.wrapOutboundOut(.byteBuffer(head)), promise: nil)
        case .refuseRequest:
            exchange.ended(with: StaleConnection())
        case .none, .deliver, .finishExchange, .failExchange, .close:
            preconditionFailure("A request's start was answered with \(self.machine)")
        }
    }

    func received(_ part: HTTPClientResponsePart) {
        guard let context = self.context else { return }
        self.receivedSinceWait = true
        switch part {
        case .head(let head):
            let action = self.machine.headReceived(keepAlive: HTTP1ResponseDecoder.keepsAlive(head))
            if action == .deliver {
                self.exchange?.stream.headReceived(head)
            } else {
                self.perform(action, context: context, error: nil)
            }
        case .body(let buffer):
            let action = self.machine.bodyReceived()
            guard action == .deliver, let exchange = self.exchange else {
                return self.perform(action, context: context, error: nil)
            }
            guard let wait = exchange.stream.bodyPartReceived(buffer) else { return }
            self.bodyPartsWaiting += 1
            wait.assumeIsolated().whenComplete { result in
                self.bodyPartsWaiting -= 1
                if self.bodyPartsWaiting == 0 {
                    self.waitEndedAt = .now()
                    self.receivedSinceWait = false
                }
                if case .failure(let error) = result, self.exchange === exchange {
                    return self.perform(self.machine.errorOccurred(), context: context, error: error)
                }
                guard self.bodyPartsWaiting == 0, self.exchange === exchange else { return }
                if self.endPending {
                    self.endPending = false
                    self.perform(
                        self.machine.endReceived(isActive: context.channel.isActive),
                        context: context,
                        error: nil
                    )
                }
                // Also after the end: the connection may serve the next exchange, and without the read the channel
                // asked for while the last part waited, it would never read that exchange's response.
                if self.readPending, self.machine.state != .closed {
                    self.readPending = false
                    context.read()
                }
            }
        case .end:
            if self.bodyPartsWaiting > 0 {
                self.endPending = true
            } else {
                self.perform(self.machine.endReceived(isActive: context.channel.isActive), context: context, error: nil)
            }
        }
    }

    func read(context: ChannelHandlerContext) {
        if self.bodyPartsWaiting > 0 {
            self.readPending = true
        } else {
            context.read()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if self.endPending {
            // The whole response arrived: it ends now, its waits cut short.
            self.endPending = false
            self.perform(self.machine.endReceived(isActive: false), context: context, error: nil)
        }
        self.perform(self.machine.connectionClosed(), context: context, error: nil)
        self.pool.remove(context.channel, of: self.origin)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.perform(self.machine.errorOccurred(), context: context, error: error)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
            self.readIdle(context: context)
        } else if event is HTTP1ResponseHandler.BytesAfterResponse {
            // The server sent more than its last response said: the connection is not used again. An exchange the
            // pool gave it meanwhile has had no answer yet: it is sent again on another connection.
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// No byte has been read for the read timeout: a timeout, unless the reads were held by our own wait.
    private func readIdle(context: ChannelHandlerContext) {
        // Reads are held while body parts wait: the silence is ours, not the server's.
        guard self.bodyPartsWaiting == 0 else { return }
        if let waitEnded = self.waitEndedAt, !self.receivedSinceWait, waitEnded + self.idleTimeout > .now() {
            // The silence began in our wait: the server has the whole timeout from the wait's end.
            let exchange = self.exchange
            context.eventLoop.assumeIsolated().scheduleTask(deadline: waitEnded + self.idleTimeout) {
                guard self.exchange === exchange, self.bodyPartsWaiting == 0, !self.receivedSinceWait else { return }
                self.perform(self.machine.readTimedOut(), context: context, error: nil)
            }
            return
        }
        self.perform(self.machine.readTimedOut(), context: context, error: nil)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let abort = event as? Abort else {
            return context.triggerUserOutboundEvent(event, promise: promise)
        }
        promise?.succeed()
        // Late: an exchange that ended already, whose connection may carry another by now.
        guard abort.exchange === self.exchange else { return }
        self.perform(self.machine.errorOccurred(), context: context, error: abort.reason)
    }

    private func perform(
        _ action: HTTP1Connection.StateMachine.Action,
        context: ChannelHandlerContext,
        error: (any Error)?
    ) {
        switch action {
        case .none, .deliver, .sendRequest, .refuseRequest:
            break
        case .finishExchange(let reuse):
            let exchange = self.exchange
            self.exchange = nil
            self.endPending = false
            if reuse {
                self.pool.checkIn(context.channel, of: self.origin)
            } else {
                context.close(promise: nil)
            }
            exchange?.finished()
        case .failExchange(let failure):
            let exchange = self.exchange
            self.exchange = nil
            self.endPending = false
            context.close(promise: nil)
            exchange?.ended(with: Self.error(for: failure, error))
        case .close:
            context.close(promise: nil)
        }
    }

    /// The error an exchange fails with: AsyncHTTPClient's for the same failure, so that ``HTTPTransport`` maps both
    /// kinds of connection alike.
    private static func error(for failure: HTTP1Connection.StateMachine.Failure, _ error: (any Error)?) -> any Error {
        switch failure {
        case .closedBeforeResponseOnReusedConnection: StaleConnection()
        case .closedBeforeEnd: HTTPClientError.remoteConnectionClosed
        case .timedOut: HTTPClientError.readTimeout
        case .error: error ?? HTTPClientError.remoteConnectionClosed
        }
    }
}
