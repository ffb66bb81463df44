import NIOCore
import NIOHTTP1

/// One request and its response on one of the client's connections. Started by ``HTTP1Client/execute(_:on:via:consumer:)``,
/// which returns it once the response's head has arrived; the body goes to its consumer; ``waitForEnd()`` returns
/// at the response's end. Ended by the connection's ``HTTP1ConnectionHandler``, on the connection's event loop.
public final class HTTP1Exchange: Sendable {
    /// The request's head.
    public let request: HTTPRequestHead
    /// Where the response goes.
    public let consumer: any HTTP1ResponseConsumer
    let channel: any Channel
    let head = Handoff<HTTPResponseHead>()
    private let end = Handoff<Void>()

    init(request: HTTPRequestHead, channel: any Channel, consumer: any HTTP1ResponseConsumer) {
        self.request = request
        self.channel = channel
        self.consumer = consumer
    }

    /// Returns when the response has ended; throws what ended it otherwise. Cancelling the waiting task cancels the
    /// exchange.
    public nonisolated(nonsending) func waitForEnd() async throws {
        try await self.value(of: self.end)
    }

    /// Stops the exchange: its connection closes, and ``waitForEnd()`` throws ``HTTP1ClientError/Code/cancelled``.
    public func cancel() {
        self.fail(reason: HTTP1ClientError(.cancelled))
    }

    /// Stops the exchange with `reason`: its connection closes, and ``waitForEnd()`` throws it.
    public func fail(reason: any Error) {
        self.channel.triggerUserOutboundEvent(
            HTTP1ConnectionHandler.Abort(exchange: self, reason: reason),
            promise: nil
        )
    }

    /// Waits for `handoff`; cancelling the waiting task cancels the exchange.
    nonisolated(nonsending) func value<T: Sendable>(of handoff: Handoff<T>) async throws -> T {
        try await withTaskCancellationHandler {
            try await handoff.value()
        } onCancel: {
            self.cancel()
        }
    }

    /// On the event loop: the response's head has arrived.
    func headReceived(_ head: HTTPResponseHead) {
        self.consumer.headReceived(head)
        self.head.succeed(head)
    }

    /// On the event loop: the response has ended.
    func finished() {
        self.end.succeed(())
    }

    /// On the event loop: the exchange failed with `error` (before its head or after it).
    func ended(with error: any Error) {
        self.consumer.failed(error)
        self.head.fail(error)
        self.end.fail(error)
    }

    /// On the event loop: the connection turned out closed before any of the response arrived; the client sends the
    /// request again on another connection, with another exchange. The consumer hears nothing.
    func endedStale() {
        self.head.fail(HTTP1ConnectionHandler.StaleConnection())
        self.end.fail(HTTP1ConnectionHandler.StaleConnection())
    }
}
