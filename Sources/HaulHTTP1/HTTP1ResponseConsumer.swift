import NIOCore
import NIOHTTP1

/// Where a response's parts go, on the connection's event loop, in order: its head, the parts of its body, and an
/// error if one ends it. Each exchange has its own consumer.
public protocol HTTP1ResponseConsumer: AnyObject, Sendable {
    /// The response's head has arrived.
    func headReceived(_ head: HTTPResponseHead)
    /// A part of the body has arrived. Returns when the connection may read the next one (reads wait until then,
    /// and the read timeout does not count the wait), or `nil` when it may at once.
    func bodyPartReceived(_ buffer: ByteBuffer) -> EventLoopFuture<Void>?
    /// The exchange failed with `error`, before its head or after it.
    func failed(_ error: any Error)
}
