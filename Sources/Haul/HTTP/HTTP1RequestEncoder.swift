import NIOCore
import NIOHTTP1

/// Writes the requests of Haul's own connections: a GET's head as one buffer of its exact size, which is the whole
/// request. These connections carry downloads only (uploads and deletions go through AsyncHTTPClient), so a request
/// has no body and no framing fields. The connection's ``HTTP1ConnectionHandler`` calls it and writes the buffer.
final class HTTP1RequestEncoder {
    /// The last head's buffer: once the socket has written it, nothing else holds it, and the next head is written
    /// into it in place (a connection sends one request at a time). Used on the channel's event loop only, never
    /// while in use (no run-time exclusivity check).
    @exclusivity(unchecked) private var buffer: ByteBuffer?

    /// `METHOD target HTTP/x.y`, a line per field, and the empty line, each ending in CR LF.
    func encode(_ head: HTTPRequestHead, allocator: ByteBufferAllocator) -> ByteBuffer {
        let method = head.method.rawValue
        let version = head.version == .http1_1 ? "HTTP/1.1" : "HTTP/\(head.version.major).\(head.version.minor)"
        var size = method.utf8.count + 1 + head.uri.utf8.count + 1 + version.utf8.count + 2 + 2
        for (name, value) in head.headers { size += name.utf8.count + 2 + value.utf8.count + 2 }
        // Taken out, so that only a write still under way may hold it besides: in place when the socket is done
        // with it, a new one otherwise (the buffer copies on write).
        var buffer = self.buffer.take() ?? allocator.buffer(capacity: size)
        buffer.clear(minimumCapacity: size)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { bytes in
            // A cursor passed along rather than a count captured by helper functions, which would be checked for exclusive
            // access on every use.
            let start = bytes.baseAddress!
            var cursor = start
            cursor = Self.put(method, at: cursor)
            cursor = Self.put(UInt8(ascii: " "), at: cursor)
            cursor = Self.put(head.uri, at: cursor)
            cursor = Self.put(UInt8(ascii: " "), at: cursor)
            cursor = Self.put(version, at: cursor)
            cursor = Self.putLineEnd(at: cursor)
            for (name, value) in head.headers {
                cursor = Self.put(name, at: cursor)
                cursor = Self.put(UInt8(ascii: ":"), at: cursor)
                cursor = Self.put(UInt8(ascii: " "), at: cursor)
                cursor = Self.put(value, at: cursor)
                cursor = Self.putLineEnd(at: cursor)
            }
            cursor = Self.putLineEnd(at: cursor)
            let written = cursor - start
            assert(written == size, "the head's size was counted before it was written")
            return written
        }
        self.buffer = buffer
        return buffer
    }

    /// Copies `text`'s bytes to `cursor` and returns the address after them.
    private static func put(_ text: String, at cursor: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        var text = text
        return text.withUTF8 { utf8 in
            guard let base = utf8.baseAddress else { return cursor }
            cursor.copyMemory(from: base, byteCount: utf8.count)
            return cursor + utf8.count
        }
    }

    /// Stores `byte` at `cursor` and returns the address after it.
    private static func put(_ byte: UInt8, at cursor: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        cursor.storeBytes(of: byte, as: UInt8.self)
        return cursor + 1
    }

    /// Stores CR LF at `cursor` and returns the address after them.
    private static func putLineEnd(at cursor: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer {
        self.put(UInt8(ascii: "\n"), at: self.put(UInt8(ascii: "\r"), at: cursor))
    }
}
