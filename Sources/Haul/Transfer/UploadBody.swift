import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// The body of an upload as an asynchronous sequence of buffers of at most 256 KiB, read from disk (or memory) only
/// when the HTTP client asks for the next one: memory stays constant whatever the file's size, and a slow server
/// slows the reading.
///
/// It counts the payload bytes it hands over into the attempt's ``ProgressCell``, never below `base` (the most an
/// earlier attempt sent), so progress does not go backwards when a retry sends the file again from the start.
struct UploadBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// A piece of the body.
    enum Part: Sendable {
        /// Framing, such as multipart boundaries: not counted as progress.
        case framing([UInt8])
        /// Part of the payload, from a file.
        case file(SourceFile)
        /// Part of the payload, from memory.
        case data(Data)

        var isFraming: Bool {
            if case .framing = self { true } else { false }
        }

        var byteCount: Int64 {
            switch self {
            case .framing(let bytes): Int64(bytes.count)
            case .file(let file): file.size
            case .data(let data): Int64(data.count)
            }
        }
    }

    static let chunkSize = 256 * 1024

    let parts: [Part]
    let progress: ProgressCell
    let base: Int64
    /// The attempt's plan, for its bandwidth limits.
    let plan: Download.Plan
    let watch = StallWatch()

    /// The body's length in bytes, framing included.
    var length: Int64 { self.parts.reduce(0) { $0 + $1.byteCount } }

    func makeAsyncIterator() -> Iterator {
        Iterator(body: self)
    }

    struct Iterator: AsyncIteratorProtocol {
        let body: UploadBody
        private var partIndex = 0
        private var offset: Int64 = 0
        private var sentPayload: Int64 = 0
        private let allocator = ByteBufferAllocator()

        init(body: UploadBody) { self.body = body }

        mutating func next() async throws -> ByteBuffer? {
            self.body.watch.producing()
            while self.partIndex < self.body.parts.count {
                let part = self.body.parts[self.partIndex]
                let remaining = part.byteCount - self.offset
                guard remaining > 0 else {
                    self.partIndex += 1
                    self.offset = 0
                    continue
                }
                let count = Int(Swift.min(remaining, Int64(UploadBody.chunkSize)))
                var buffer: ByteBuffer
                switch part {
                case .framing(let bytes):
                    buffer = self.allocator.buffer(bytes: bytes[Int(self.offset)...])
                case .data(let data):
                    let start = data.startIndex + Int(self.offset)
                    buffer = self.allocator.buffer(bytes: data[start..<start + count])
                case .file(let file):
                    buffer = self.allocator.buffer(capacity: count)
                    let offset = self.offset
                    _ = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
                        try file.read(into: UnsafeMutableRawBufferPointer(rebasing: pointer[..<count]), at: offset)
                    }
                }
                self.offset += Int64(buffer.readableBytes)
                if !part.isFraming {
                    self.sentPayload += Int64(buffer.readableBytes)
                    self.body.progress.store(Swift.max(self.body.base, self.sentPayload))
                    try await self.body.plan.throttle(buffer.readableBytes)
                }
                self.body.watch.handedOver(at: .now)
                return buffer
            }
            self.body.watch.finished()
            return nil
        }
    }

    /// Tells a server that stopped taking the body (its window closed, nothing read for the idle timeout) from an
    /// upload that is merely slow because of its own bandwidth limit: only the time between handing a buffer to the
    /// client and the client asking for the next one counts as waiting for the server.
    final class StallWatch: Sendable {
        private let handedOverAt = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

        func producing() { self.handedOverAt.withLockedValue { $0 = nil } }
        func handedOver(at now: ContinuousClock.Instant) { self.handedOverAt.withLockedValue { $0 = now } }
        func finished() { self.handedOverAt.withLockedValue { $0 = nil } }

        /// Returns (throws) only when the server has taken nothing for `idle`; runs until cancelled otherwise.
        func failWhenStalled(idle: Duration) async throws {
            while true {
                try await Task.sleep(for: Swift.max(idle / 4, .milliseconds(10)))
                if let since = self.handedOverAt.withLockedValue({ $0 }), ContinuousClock.now - since > idle {
                    throw HaulError(.timedOut, "The server took no bytes of the upload for \(idle)")
                }
            }
        }
    }
}
