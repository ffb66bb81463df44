import NIOCore
import NIOHTTP1

/// The handler at the end of each of the client's connections, after a read timeout and SwiftNIO's HTTP/1.1 codec:
/// it sends an exchange's request, hands the response to the exchange as it arrives, reads no further while the
/// consumer asks to wait, and at the end gives the connection back to its ``HTTP1Client`` or closes it. What it
/// decides, it asks of ``HTTP1Connection/StateMachine``.
final class HTTP1ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTP1Exchange
    typealias OutboundOut = HTTPClientRequestPart

    /// The caller's request to stop an exchange (``HTTP1Exchange/fail(reason:)``), as a user event on the channel.
    struct Abort: Sendable {
        let exchange: HTTP1Exchange
        let reason: any Error
    }

    /// The connection closed before any of the response arrived, after it had served other exchanges, or before the
    /// request could be written: the client sends the request again on another connection.
    struct StaleConnection: Error {}

    private var machine = HTTP1Connection.StateMachine()
    private var exchange: HTTP1Exchange?
    private let client: HTTP1Client
    private let endpoint: HTTP1Client.Endpoint
    /// Body parts handed to the consumer whose "read on" has not come yet; while any is out, reads wait.
    private var bodyPartsWaiting = 0
    /// A read the channel asked for while reads wait.
    private var readPending = false
    /// The response's end, arrived while body parts wait: the exchange ends when they are through, so that the
    /// consumer's last wait (a bandwidth limit's) is served.
    private var endPending = false
    /// The read timeout, which counts the server's silence only: time spent in our own waits (while body parts
    /// wait) does not count, and after one the server has the whole timeout again.
    private let idleTimeout: TimeAmount
    /// When our last wait ended, and whether any of the response has arrived since.
    private var waitEndedAt: NIODeadline?
    private var receivedSinceWait = false

    init(client: HTTP1Client, endpoint: HTTP1Client.Endpoint, idleTimeout: TimeAmount) {
        self.client = client
        self.endpoint = endpoint
        self.idleTimeout = idleTimeout
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = self.unwrapOutboundIn(data)
        promise?.succeed()
        switch self.machine.requestStarted() {
        case .sendRequest:
            self.exchange = exchange
            self.waitEndedAt = nil
            // No promise: a write that fails closes the channel, and its close ends the exchange.
            context.write(self.wrapOutboundOut(.head(exchange.request)), promise: nil)
            context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: nil)
        case .refuseRequest:
            exchange.endedStale()
        case .none, .deliver, .finishExchange, .failExchange, .close:
            preconditionFailure("A request's start was answered with \(self.machine)")
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.receivedSinceWait = true
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            let action = self.machine.headReceived(keepAlive: head.isKeepAlive)
            if action == .deliver {
                self.exchange?.headReceived(head)
            } else {
                self.perform(action, context: context, error: nil)
            }
        case .body(let buffer):
            let action = self.machine.bodyReceived()
            guard action == .deliver, let exchange = self.exchange else {
                return self.perform(action, context: context, error: nil)
            }
            guard let wait = exchange.consumer.bodyPartReceived(buffer) else { return }
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
        self.client.remove(context.channel, of: self.endpoint)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError {
            self.perform(self.machine.responseUnreadable(), context: context, error: error)
        } else {
            self.perform(self.machine.errorOccurred(), context: context, error: error)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
            self.readIdle(context: context)
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
                self.client.checkIn(context.channel, of: self.endpoint)
            } else {
                context.close(promise: nil)
            }
            exchange?.finished()
        case .failExchange(let failure):
            let exchange = self.exchange
            self.exchange = nil
            self.endPending = false
            context.close(promise: nil)
            switch failure {
            case .closedBeforeResponseOnReusedConnection: exchange?.endedStale()
            case .closedBeforeEnd: exchange?.ended(with: HTTP1ClientError(.remoteConnectionClosed))
            case .timedOut: exchange?.ended(with: HTTP1ClientError(.readTimeout))
            case .error: exchange?.ended(with: error ?? HTTP1ClientError(.remoteConnectionClosed))
            }
        case .close:
            context.close(promise: nil)
        }
    }
}
