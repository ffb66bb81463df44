import AsyncHTTPClient
import HaulHTTP1
import NIOCore
import NIOHTTP1

/// A download's response through the client's delegate API: the attempt's task awaits the head, checks it, and then
/// attaches a ``BodyWriter``, which the request's event loop feeds each chunk as it arrives, or gives the response
/// up. The body never crosses to the task: one hand-off for the head and one for the end.
///
/// What arrives while the task checks the head is kept (up to ``bufferLimit``, then the client stops reading) and
/// goes to the writer first, even when the connection has failed since: bytes that arrived before a cut are never
/// lost to the partial file. The connection reads no next chunk while the bandwidth limits ask to wait.
///
/// Two kinds of connection feed it: AsyncHTTPClient's (https, as its delegate) and Haul's own plain-http ones
/// (through `HaulHTTP1`'s client), through the same three calls: ``headReceived(_:)``, ``bodyPartReceived(_:)`` and
/// ``failed(_:)``.
final class ResponseStream: HTTPClientResponseDelegate, @unchecked Sendable {
    // @unchecked: everything but the head's handoff is touched on `eventLoop` only, where the client calls its
    // delegate (one call at a time) and where the task's calls are submitted.
    typealias Response = Void

    /// How many bytes are kept before the task attaches its writer; past it the client stops reading. One read of
    /// the largest size (``HTTPTransport/maximumReadSize(concurrency:limit:)``).
    static let bufferLimit = 1024 * 1024

    let eventLoop: any EventLoop
    /// The response's head, or the error that ended the request before it.
    let head = Handoff<HTTPResponseHead>()
    private var state = State.buffering([], bytes: 0, demand: nil)

    /// Where the body goes.
    private enum State {
        /// No writer yet: what arrived, its size, and the client's wait for the next chunk once it passed the limit.
        case buffering([ByteBuffer], bytes: Int, demand: EventLoopPromise<Void>?)
        /// Into the task's writer.
        case writing(BodyWriter)
        /// Into memory, up to a limit (an error page's explanation); the rest is read and dropped.
        case collecting([UInt8], limit: Int)
        /// Nowhere: read and dropped.
        case discarding
    }

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.headReceived(head)
        return self.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        self.bodyPartReceived(buffer) ?? self.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
        self.failed(error)
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {}

    /// On the event loop: the response's head has arrived.
    func headReceived(_ head: HTTPResponseHead) {
        self.head.succeed(head)
    }

    /// On the event loop: a part of the body has arrived. Returns when the connection may read the next, or `nil`
    /// when it may at once (no future to make and complete for each part of each file).
    func bodyPartReceived(_ buffer: ByteBuffer) -> EventLoopFuture<Void>? {
        switch self.state {
        case .writing(let writer):
            do {
                return self.afterWait(try writer.receive(buffer))
            } catch {
                return self.eventLoop.makeFailedFuture(error)
            }
        case .discarding:
            return nil
        case .collecting(var kept, let limit):
            kept += buffer.readableBytesView.prefix(limit - kept.count)
            self.state = .collecting(kept, limit: limit)
            return nil
        case .buffering(var parts, var bytes, let demand):
            parts.append(buffer)
            bytes += buffer.readableBytes
            guard bytes >= Self.bufferLimit else {
                self.state = .buffering(parts, bytes: bytes, demand: demand)
                return nil
            }
            let wait = self.eventLoop.makePromise(of: Void.self)
            self.state = .buffering(parts, bytes: bytes, demand: wait)
            return wait.futureResult
        }
    }

    /// On the event loop: the request failed. A head given already stays: an error after the head is the task's to
    /// find at the end (``ResponseRequest/waitForEnd()``).
    func failed(_ error: any Error) {
        self.head.fail(error)
    }

    /// A future that succeeds after `delay`; `nil` when there is nothing to wait for.
    private func afterWait(_ delay: Duration) -> EventLoopFuture<Void>? {
        guard delay > .zero else { return nil }
        return self.eventLoop.scheduleTask(in: .nanoseconds(delay.nanoseconds)) {}.futureResult
    }

    /// On the event loop: `writer` takes what arrived so far, then the rest as it comes. Returns the bandwidth limits'
    /// wait after what arrived so far (`nil`: none); throws the writer's error, with which the request has failed.
    private func attach(_ writer: BodyWriter, request: any ResponseRequest) throws -> EventLoopFuture<Void>? {
        guard case .buffering(let parts, _, let demand) = self.state else {
            preconditionFailure("a response's body was given a writer twice")
        }
        self.state = .writing(writer)
        var delay = Duration.zero
        do {
            for part in parts { delay = try writer.receive(part) }
        } catch {
            request.fail(reason: error)
            demand?.fail(error)
            throw error
        }
        guard let wait = self.afterWait(delay) else {
            demand?.succeed()
            return nil
        }
        demand?.completeWith(wait)
        return wait
    }

    /// On the event loop: the body is kept in memory from now on, up to `limit` bytes, what arrived already first.
    private func collect(upTo limit: Int) {
        guard case .buffering(let parts, _, let demand) = self.state else {
            preconditionFailure("a response's body was read twice")
        }
        var kept: [UInt8] = []
        for part in parts where kept.count < limit { kept += part.readableBytesView.prefix(limit - kept.count) }
        self.state = .collecting(kept, limit: limit)
        demand?.succeed()
    }

    /// On the event loop: what ``collect(upTo:)`` has kept.
    private var kept: [UInt8] {
        guard case .collecting(let kept, _) = self.state else { return [] }
        return kept
    }

    /// Runs `body` on the event loop: at once where the caller runs on it already (a transfer's task, whose executor
    /// is its connection's loop, as a rule), with no task submitted and no future to wait for it.
    nonisolated(nonsending) private func onEventLoop<T: Sendable>(
        _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        if self.eventLoop.inEventLoop { return try body() }
        return try await self.eventLoop.submit(body).get()
    }

    /// On the event loop: the body is dropped from now on.
    private func drop() {
        if case .buffering(_, _, let demand) = self.state { demand?.succeed() }
        self.state = .discarding
    }

    /// A response whose head has arrived. Every path must end it: ``receive(into:)``, ``discard()`` or
    /// ``abandon()``.
    struct Started: Sendable {
        let head: HTTPResponseHead
        let stream: ResponseStream
        let request: any ResponseRequest

        /// Feeds the body into `writer` on the event loop, what arrived already first; returns when the response
        /// has ended, throws what ended it otherwise (the writer's own error, or the client's). Cancelling the task
        /// cancels the request.
        nonisolated(nonsending) func receive(into writer: BodyWriter) async throws {
            let stream = self.stream
            let request = self.request
            let wait = try await stream.onEventLoop { try stream.attach(writer, request: request) }
            try await request.waitForEnd()
            // The end waits for the bandwidth limits' wait after the parts that arrived before the writer: a body that
            // arrived whole before it would otherwise pass unthrottled.
            if let wait { try await request.value(of: wait) }
        }

        /// Reads the whole body and returns its first `limit` bytes as text (an error page's explanation), so that the
        /// connection can serve the next request; `nil` when the response failed. Cancelling the task cancels the
        /// request.
        func text(upTo limit: Int) async -> String? {
            let stream = self.stream
            do {
                try await stream.onEventLoop { stream.collect(upTo: limit) }
                try await self.request.waitForEnd()
                return String(decoding: try await stream.onEventLoop { stream.kept }, as: UTF8.self)
            } catch {
                return nil
            }
        }

        /// Reads the body and drops it, so that the connection can serve the next request (a redirect's body).
        func discard() {
            let stream = self.stream
            stream.eventLoop.execute { stream.drop() }
        }

        /// Gives the response up without its body: the connection closes.
        func abandon() {
            self.request.cancel()
            self.discard()
        }
    }

    /// Sends `request` on AsyncHTTPClient's `client` and returns once the response's head has arrived; cancelling the
    /// task cancels the request.
    static func start(_ request: HTTPClient.Request, on client: HTTPClient) async throws -> Started {
        let eventLoop = client.eventLoopGroup.any()
        let stream = ResponseStream(eventLoop: eventLoop)
        let task = client.execute(request: request, delegate: stream, eventLoop: .delegate(on: eventLoop), logger: nil)
        // A request the client refuses outright (it is shutting down) fails its task without telling the delegate.
        task.futureResult.whenFailure { error in stream.failed(error) }
        let head = try await task.value(of: stream.head)
        return Started(head: head, stream: stream, request: task)
    }
}

/// What ends, fails or cancels the request behind a ``ResponseStream``: AsyncHTTPClient's task, or an exchange on one
/// of Haul's own connections (``HTTP1Exchange``).
protocol ResponseRequest: Sendable {
    /// Returns when the response has ended; throws what ended it otherwise. Cancelling the waiting task cancels the
    /// request.
    nonisolated(nonsending) func waitForEnd() async throws
    /// Stops the request: its connection closes, and ``waitForEnd()`` throws `HTTPClientError.cancelled`.
    func cancel()
    /// Stops the request with `reason`: its connection closes, and ``waitForEnd()`` throws it.
    func fail(reason: any Error)
}

extension HTTPClient.Task: ResponseRequest where Response == Void {
    nonisolated(nonsending) func waitForEnd() async throws {
        try await self.value(of: self.futureResult)
    }
}

extension ResponseRequest {
    /// Waits for `future` (the response's head, its end, what its body left); cancelling the waiting task cancels
    /// the request.
    ///
    /// On the caller's executor (`nonisolated(nonsending)`), as are the other async functions a transfer's task runs
    /// through (``Download``, ``HTTPTransport``, ``PlainHTTPTransport``): a plain `nonisolated` async function switches to
    /// the generic executor as it starts and after each call, and with the task's executor preference set (its event
    /// loop) each switch takes the task's lock to find that preference. 27 switches per small file went to 10,
    /// `future.get()` replaced by the continuation it wraps (one more function that switched).
    nonisolated(nonsending) func value<T: Sendable>(of future: EventLoopFuture<T>) async throws -> T {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { continuation in
                future.whenComplete { continuation.resume(with: $0) }
            }
        } onCancel: {
            self.cancel()
        }
    }

    /// Waits for `handoff`'s result (the response's head, its end); cancelling the waiting task cancels the request.
    nonisolated(nonsending) func value<T: Sendable>(of handoff: Handoff<T>) async throws -> T {
        try await withTaskCancellationHandler {
            try await handoff.value()
        } onCancel: {
            self.cancel()
        }
    }
}
