import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Decodes the responses on Haul's own connections (plain HTTP/1.1, GET requests only) into SwiftNIO's response parts:
/// a head, the body as slices of what was read (never copied), and an end. A head is read once it is complete, line
/// by line, straight into the fields.
///
/// What it accepts and refuses, after RFC 9112:
/// - lines end in CRLF or a bare LF; a field line that starts with a space or a tab continues the one before
///   (obsolete folding, joined with a space); a field name is a token, followed at once by its colon; a value holds
///   no control character but the tab (`invalidHeaderToken`);
/// - a head larger than ``maximumHeadSize`` is refused (`headerOverflow`), as SwiftNIO's decoder refuses one;
/// - informational responses (1xx but 101) are skipped; 101 is refused (nothing here asks to switch protocols);
/// - the body's length: none for 204 and 304; `Transfer-Encoding` ending in `chunked` frames it in chunks, any other
///   coding runs to the connection's close; else `Content-Length` (every value the same number: otherwise
///   `unexpectedContentLength` or `invalidContentLength`); else the body runs to the connection's close;
/// - a connection closed before the end of a response that has a length is `invalidEOFState`, as with SwiftNIO's.
///
/// Chunk extensions and trailer fields are read and dropped (nothing downstream uses them).
struct HTTP1ResponseDecoder: ByteToMessageDecoder {
    /// Nothing: the parts go to ``sink``, not on through the pipeline.
    typealias InboundOut = Never

    /// The largest head accepted: SwiftNIO's own limit.
    static let maximumHeadSize = 80 * 1024
    /// The longest chunk-size line accepted (the size and its extensions).
    static let maximumChunkLineSize = 4 * 1024

    /// Where the decoder is in the stream of responses.
    enum State: Equatable {
        /// Waiting for (the rest of) a head.
        case head
        /// In a body of known length, with this many bytes still to come.
        case fixed(remaining: Int)
        /// In a chunked body.
        case chunked(Chunk)
        /// In a body that ends when the connection closes.
        case untilClose
        /// The connection's input ended.
        case closed
    }

    /// Where the decoder is in a chunked body.
    enum Chunk: Equatable {
        /// Waiting for a chunk's size line.
        case size
        /// In a chunk's data, with this many bytes still to come.
        case data(remaining: Int)
        /// Waiting for the line end after a chunk's data.
        case dataEnd
        /// Reading the trailer section after the last chunk, until its empty line.
        case trailers
    }

    private(set) var state = State.head
    /// How many bytes of a head not yet whole were searched for its end already: a head that trickles in is searched
    /// once in all, not once per read from its start.
    private var searched = 0
    /// Where the parts go (``HTTP1ResponsePartSink``), not on through the pipeline.
    let sink: any HTTP1ResponsePartSink

    init(sink: any HTTP1ResponsePartSink) {
        self.sink = sink
    }

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        switch self.state {
        case .head:
            // Empty lines before a status line are ignored (RFC 9112, 2.2).
            while let first = buffer.readableBytesView.first, first == UInt8(ascii: "\r") || first == UInt8(ascii: "\n")
            {
                buffer.moveReaderIndex(forwardBy: 1)
            }
            guard let (head, body) = try Self.readHead(from: &buffer, searched: &self.searched) else {
                return .needMoreData
            }
            if let next = try self.begin(head, body) { self.state = next }
            return .continue
        case .fixed(let remaining):
            guard buffer.readableBytes > 0 else { return .needMoreData }
            let count = min(remaining, buffer.readableBytes)
            self.sink.received(.body(buffer.readSlice(length: count)!))
            if count == remaining {
                self.end()
            } else {
                self.state = .fixed(remaining: remaining - count)
            }
            return .continue
        case .chunked(let chunk):
            return try self.decodeChunked(chunk, buffer: &buffer)
        case .untilClose:
            guard buffer.readableBytes > 0 else { return .needMoreData }
            self.sink.received(.body(buffer.readSlice(length: buffer.readableBytes)!))
            return .needMoreData
        case .closed:
            buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
            return .needMoreData
        }
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        while try self.decode(context: context, buffer: &buffer) == .continue {}
        guard seenEOF else { return .needMoreData }
        switch self.state {
        case .closed:
            break
        case .head:
            self.state = .closed
            // Closed between responses: nothing was lost. Closed within a head: a response cut short.
            if buffer.readableBytes > 0 { throw HTTPParserError.invalidEOFState }
        case .untilClose:
            self.state = .closed
            self.sink.received(.end(nil))
        case .fixed, .chunked:
            self.state = .closed
            throw HTTPParserError.invalidEOFState
        }
        return .needMoreData
    }

    /// Hands `head` to the sink, and says how its body is framed: `nil` when the head was an interim one, skipped.
    private mutating func begin(_ head: HTTPResponseHead, _ body: BodyLength) throws -> State? {
        let code = head.status.code
        if code == 101 { throw HTTPParserError.invalidStatus }
        if (100..<200).contains(code) { return nil }
        self.sink.received(.head(head))
        let framing: State =
            switch body {
            case _ where code == 204 || code == 304: .fixed(remaining: 0)
            case .chunked: .chunked(.size)
            case .length(let length): .fixed(remaining: length)
            case .untilClose: .untilClose
            }
        if framing == .fixed(remaining: 0) {
            self.end()
            return .head
        }
        return framing
    }

    /// How many responses have ended.
    private(set) var responsesEnded = 0

    /// Ends the response, and waits for the next head.
    private mutating func end() {
        self.state = .head
        self.responsesEnded += 1
        self.sink.received(.end(nil))
    }

    private mutating func decodeChunked(_ chunk: Chunk, buffer: inout ByteBuffer) throws -> DecodingState {
        switch chunk {
        case .size:
            guard let line = Self.readLine(from: &buffer, limit: Self.maximumChunkLineSize) else {
                if buffer.readableBytes > Self.maximumChunkLineSize { throw HTTPParserError.invalidChunkSize }
                return .needMoreData
            }
            let size = try Self.chunkSize(line)
            self.state = .chunked(size == 0 ? .trailers : .data(remaining: size))
            return .continue
        case .data(let remaining):
            guard buffer.readableBytes > 0 else { return .needMoreData }
            let count = min(remaining, buffer.readableBytes)
            self.sink.received(.body(buffer.readSlice(length: count)!))
            self.state = .chunked(count == remaining ? .dataEnd : .data(remaining: remaining - count))
            return .continue
        case .dataEnd:
            guard let line = Self.readLine(from: &buffer, limit: 2) else {
                if buffer.readableBytes >= 2 { throw HTTPParserError.invalidChunkSize }
                return .needMoreData
            }
            guard line.readableBytes == 0 else { throw HTTPParserError.invalidChunkSize }
            self.state = .chunked(.size)
            return .continue
        case .trailers:
            // Trailer fields, each on its line, until the empty line that ends the message.
            while let line = Self.readLine(from: &buffer, limit: Self.maximumHeadSize) {
                if line.readableBytes == 0 {
                    self.end()
                    return .continue
                }
            }
            if buffer.readableBytes > Self.maximumHeadSize { throw HTTPParserError.headerOverflow }
            return .needMoreData
        }
    }

    // MARK: Reading

    /// Reads one line (without its CRLF or LF, as ``Lines`` splits a head) when its end is within `limit` bytes, or
    /// reads nothing.
    private static func readLine(from buffer: inout ByteBuffer, limit: Int) -> ByteBuffer? {
        let found = buffer.withUnsafeReadableBytes { bytes -> (line: Range<Int>, length: Int)? in
            var lines = Lines(UnsafeRawBufferPointer(rebasing: bytes.prefix(limit + 1)))
            return lines.next().map { ($0, lines.consumed) }
        }
        guard let found else { return nil }
        let line = buffer.getSlice(at: buffer.readerIndex + found.line.lowerBound, length: found.line.count)!
        buffer.moveReaderIndex(forwardBy: found.length)
        return line
    }

    /// A chunk-size line's size (hex digits, then perhaps extensions after a semicolon).
    private static func chunkSize(_ line: ByteBuffer) throws -> Int {
        var size = 0
        var digits = 0
        loop: for byte in line.readableBytesView {
            let value: Int
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = Int(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = Int(byte - UInt8(ascii: "A") + 10)
            case UInt8(ascii: ";"), UInt8(ascii: " "), UInt8(ascii: "\t"): break loop
            default: throw HTTPParserError.invalidChunkSize
            }
            guard digits < 15 else { throw HTTPParserError.invalidChunkSize }
            size = size << 4 | value
            digits += 1
        }
        guard digits > 0 else { throw HTTPParserError.invalidChunkSize }
        return size
    }

    /// How a response's body is delimited, as its head's fields say (204 and 304 aside: ``begin(_:_:)``).
    enum BodyLength: Equatable {
        /// `Transfer-Encoding` ending in `chunked`.
        case chunked
        /// `Content-Length`.
        case length(Int)
        /// Neither, or another final transfer coding: the body ends with the connection.
        case untilClose
    }

    /// Reads a whole head, once its empty line has arrived (`nil` until then); `searched` bytes of it were searched
    /// for that line before, and are not again.
    private static func readHead(
        from buffer: inout ByteBuffer,
        searched: inout Int
    ) throws -> (HTTPResponseHead, BodyLength)? {
        let end = buffer.withUnsafeReadableBytes { Self.headLength($0, from: searched) }
        guard let end else {
            guard buffer.readableBytes <= Self.maximumHeadSize else { throw HTTPParserError.headerOverflow }
            searched = buffer.readableBytes
            return nil
        }
        searched = 0
        guard end <= Self.maximumHeadSize else { throw HTTPParserError.headerOverflow }
        let parsed = try buffer.withUnsafeReadableBytes {
            try Self.parseHead(UnsafeRawBufferPointer(rebasing: $0[..<end]))
        }
        buffer.moveReaderIndex(forwardBy: end)
        return parsed
    }

    /// Where a head ends: just after its first empty line (LF LF, or LF CR LF), looked for from `start` on (less the
    /// two bytes before it, which may begin that line); `nil` when it has not arrived.
    private static func headLength(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        var index = max(0, start - 2)
        while index < bytes.count, let found = memchr(base + index, Int32(UInt8(ascii: "\n")), bytes.count - index) {
            let newline = base.distance(to: UnsafeRawPointer(found))
            if newline + 1 < bytes.count, bytes[newline + 1] == UInt8(ascii: "\n") { return newline + 2 }
            if newline + 2 < bytes.count, bytes[newline + 1] == UInt8(ascii: "\r"),
                bytes[newline + 2] == UInt8(ascii: "\n")
            {
                return newline + 3
            }
            index = newline + 1
        }
        return nil
    }

    /// Parses a whole head, its empty line included: the head, and how its body is delimited.
    private static func parseHead(_ bytes: UnsafeRawBufferPointer) throws -> (HTTPResponseHead, BodyLength) {
        var lines = Lines(bytes)
        guard let statusLine = lines.next() else { throw HTTPParserError.invalidStatus }
        let (version, status) = try Self.statusLine(UnsafeRawBufferPointer(rebasing: bytes[statusLine]))
        var fields: [(String, String)] = []
        fields.reserveCapacity(12)
        var length: Int?
        var chunked: Bool?
        let tokens = Self.tokenBytes
        while true {
            guard let range = lines.next(), !range.isEmpty else { break }
            let line = UnsafeRawBufferPointer(rebasing: bytes[range])
            if line[0] == UInt8(ascii: " ") || line[0] == UInt8(ascii: "\t") {
                // Obsolete folding: the line continues the field before it.
                guard let last = fields.popLast() else { throw HTTPParserError.invalidHeaderToken }
                let more = String(decoding: Self.trimmed(line, from: 0), as: UTF8.self)
                fields.append((last.0, last.1.isEmpty ? more : last.1 + " " + more))
                continue
            }
            var colon = 0
            while colon < line.count, line[colon] != UInt8(ascii: ":") {
                guard tokens[Int(line[colon])] else { throw HTTPParserError.invalidHeaderToken }
                colon += 1
            }
            guard colon > 0, colon < line.count else { throw HTTPParserError.invalidHeaderToken }
            let name = UnsafeRawBufferPointer(rebasing: line[..<colon])
            let value = Self.trimmed(line, from: colon + 1)
            // No control character in a value but the tab, as llhttp (and Haul's requests: ``RequestCheck``) have it.
            guard value.allSatisfy(RequestCheck.isValueByte) else { throw HTTPParserError.invalidHeaderToken }
            if name.count == 14, RequestCheck.equalsIgnoringCase(name, "content-length") {
                length = try Self.contentLength(value, before: length)
            } else if name.count == 17, RequestCheck.equalsIgnoringCase(name, "transfer-encoding") {
                chunked = Self.endsInChunked(value)
            }
            fields.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
        let body: BodyLength =
            if let chunked { chunked ? .chunked : .untilClose } else { length.map(BodyLength.length) ?? .untilClose }
        return (HTTPResponseHead(version: version, status: status, headers: HTTPHeaders(fields)), body)
    }

    /// Whether `head` lets its connection carry another exchange: SwiftNIO's rule (`HTTPResponseHead.isKeepAlive`),
    /// read from the fields' bytes. A `close` token in a `Connection` field means no; one `keep-alive` token alone
    /// means yes; two recognised tokens or more mean no; none leave it to the version (HTTP/1.1 and later: yes).
    static func keepsAlive(_ head: HTTPResponseHead) -> Bool {
        var recognised = 0
        var closes = false
        for field in head.headers where field.name.utf8.count == 10 {
            var (name, value) = field
            guard name.withUTF8({ RequestCheck.equalsIgnoringCase(UnsafeRawBufferPointer($0), "connection") }) else {
                continue
            }
            value.withUTF8 { utf8 in
                let value = UnsafeRawBufferPointer(utf8)
                var start = 0
                while start <= value.count {
                    var end = start
                    while end < value.count, value[end] != UInt8(ascii: ",") { end += 1 }
                    let token = Self.trimmed(UnsafeRawBufferPointer(rebasing: value[start..<end]), from: 0)
                    if RequestCheck.equalsIgnoringCase(token, "close") {
                        recognised += 1
                        closes = true
                    } else if RequestCheck.equalsIgnoringCase(token, "keep-alive") {
                        recognised += 1
                    }
                    start = end + 1
                }
            }
        }
        if recognised == 0 { return head.version.major == 1 && head.version.minor >= 1 }
        return recognised == 1 && !closes
    }

    /// `HTTP/1.1 200 OK`: the version, and the status with the server's reason when the code is not a known one.
    private static func statusLine(_ line: UnsafeRawBufferPointer) throws -> (HTTPVersion, HTTPResponseStatus) {
        guard line.count >= 12, line[0] == UInt8(ascii: "H"), line[1] == UInt8(ascii: "T"),
            line[2] == UInt8(ascii: "T"), line[3] == UInt8(ascii: "P"), line[4] == UInt8(ascii: "/"),
            line[6] == UInt8(ascii: "."), let major = Self.digit(line[5]), let minor = Self.digit(line[7]),
            line[8] == UInt8(ascii: " "), major == 1
        else { throw HTTPParserError.invalidVersion }
        guard let a = Self.digit(line[9]), let b = Self.digit(line[10]), let c = Self.digit(line[11]), a > 0,
            line.count == 12 || line[12] == UInt8(ascii: " ")
        else { throw HTTPParserError.invalidStatus }
        let code = a * 100 + b * 10 + c
        var status = HTTPResponseStatus(statusCode: code)
        if case .custom = status, line.count > 13 {
            status = HTTPResponseStatus(
                statusCode: code,
                reasonPhrase: String(decoding: UnsafeRawBufferPointer(rebasing: line[13...]), as: UTF8.self)
            )
        }
        return (HTTPVersion(major: major, minor: minor), status)
    }

    private static func digit(_ byte: UInt8) -> Int? {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") ? Int(byte - UInt8(ascii: "0")) : nil
    }

    /// The bytes of `line` from `start` on, without the spaces and tabs at either end.
    private static func trimmed(_ line: UnsafeRawBufferPointer, from start: Int) -> UnsafeRawBufferPointer {
        var start = start
        var end = line.count
        while start < end, line[start] == UInt8(ascii: " ") || line[start] == UInt8(ascii: "\t") { start += 1 }
        while end > start, line[end - 1] == UInt8(ascii: " ") || line[end - 1] == UInt8(ascii: "\t") { end -= 1 }
        return UnsafeRawBufferPointer(rebasing: line[start..<end])
    }

    /// Which bytes a token (a field's name) may hold (RFC 9110, 5.6.2), by byte.
    private static let tokenBytes: [Bool] = (0...255).map { RequestCheck.isTokenByte(UInt8($0)) }

    /// A `Content-Length` value (one number, or a list of the same one), against the one an earlier field gave.
    private static func contentLength(_ value: UnsafeRawBufferPointer, before: Int?) throws -> Int {
        var length = before
        var number: Int?
        var index = 0
        while index <= value.count {
            let byte = index < value.count ? value[index] : UInt8(ascii: ",")
            index += 1
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let digits = number ?? 0
                guard digits < Int.max / 10 - 9 else { throw HTTPParserError.invalidContentLength }
                number = digits * 10 + Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: ","):
                guard let found = number else { throw HTTPParserError.invalidContentLength }
                if let length, length != found { throw HTTPParserError.unexpectedContentLength }
                length = found
                number = nil
                while index < value.count, value[index] == UInt8(ascii: " ") || value[index] == UInt8(ascii: "\t") {
                    index += 1
                }
            case UInt8(ascii: " "), UInt8(ascii: "\t"):
                // Only before a comma or the end.
                var next = index
                while next < value.count, value[next] == UInt8(ascii: " ") || value[next] == UInt8(ascii: "\t") {
                    next += 1
                }
                guard next == value.count || value[next] == UInt8(ascii: ",") else {
                    throw HTTPParserError.invalidContentLength
                }
                index = next
            default:
                throw HTTPParserError.invalidContentLength
            }
        }
        return length!
    }

    /// Whether the last transfer coding a `Transfer-Encoding` value lists is `chunked`.
    private static func endsInChunked(_ value: UnsafeRawBufferPointer) -> Bool {
        var start = 0
        for index in 0..<value.count where value[index] == UInt8(ascii: ",") { start = index + 1 }
        return RequestCheck.equalsIgnoringCase(Self.trimmed(value, from: start), "chunked")
    }

    /// A head's lines, each without its CRLF or LF, as ranges of its bytes.
    private struct Lines {
        private let bytes: UnsafeRawBufferPointer
        /// How many bytes the lines returned so far took, their ends included.
        private(set) var consumed = 0

        init(_ bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        /// The next whole line; `nil` when its end has not arrived.
        mutating func next() -> Range<Int>? {
            let start = self.consumed
            guard start < self.bytes.count, let base = self.bytes.baseAddress,
                let found = memchr(base + start, Int32(UInt8(ascii: "\n")), self.bytes.count - start)
            else { return nil }
            let newline = base.distance(to: UnsafeRawPointer(found))
            var end = newline
            if end > start, self.bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            self.consumed = newline + 1
            return start..<end
        }
    }
}

/// Takes the response parts of a connection's ``HTTP1ResponseHandler`` straight from it, not through the pipeline
/// (where each part would be wrapped in `NIOAny`). Called on the channel's event loop, in the order the parts were
/// decoded, before any event the decoding fires after them.
protocol HTTP1ResponsePartSink: AnyObject {
    func received(_ part: HTTPClientResponsePart)
}

/// Runs an ``HTTP1ResponseDecoder`` in a connection's pipeline: what SwiftNIO's `ByteToMessageHandler` does for a
/// decoder, without what these connections never need (observed writes, removal from a live pipeline).
///
/// Bytes that end a read without ending what they begin (part of a head, of a chunk-size line) wait for the next
/// read. When the connection closes, the decoder sees the end of its input (``HTTP1ResponseDecoder/decodeLast``)
/// before the handlers after this one hear of the close; a close that comes from one of them while a read is decoded
/// waits for that read's parts to be sent on. After an error, what arrives is dropped (the connection is closed).
final class HTTP1ResponseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    /// Nothing: the decoder's parts go to its sink, not on through the pipeline.
    typealias InboundOut = Never

    /// Bytes arrived after a response's end, in the read that ended it, as if the server had sent more than the
    /// response's framing said (a `Content-Length` short of the body). Haul sends one request at a time, so they
    /// answer nothing: they are dropped, and this event goes on so that the connection is not used again (the next
    /// response would begin with them and fail to parse).
    struct BytesAfterResponse: Sendable {}

    /// Whether the connection carries one request at a time (Haul's own): bytes after a response's end, in the read
    /// that ended it, are then dropped and signalled (``BytesAfterResponse``). Otherwise they begin the next response.
    private let oneRequestAtATime: Bool

    /// The decoded parts go to `sink`.
    init(oneRequestAtATime: Bool = false, sink: any HTTP1ResponsePartSink) {
        self.oneRequestAtATime = oneRequestAtATime
        self.decoder = HTTP1ResponseDecoder(sink: sink)
    }

    private var decoder: HTTP1ResponseDecoder
    /// Bytes read and not decoded yet.
    private var buffered: ByteBuffer?
    /// Whether a read's parts are being decoded and sent on now.
    private var isDecoding = false
    /// Whether the connection closed while they were.
    private var closedWhileDecoding = false
    /// Whether decoding failed: nothing more is decoded.
    private var failed = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.failed else { return }
        var bytes = self.unwrapInboundIn(data)
        if var buffered = self.buffered.take() {
            buffered.writeBuffer(&bytes)
            bytes = buffered
        }
        self.decode(&bytes, last: false, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if self.isDecoding {
            self.closedWhileDecoding = true
        } else {
            self.close(context: context)
        }
    }

    /// The end of the input: the decoder sees it, then the handlers after this one.
    private func close(context: ChannelHandlerContext) {
        if !self.failed {
            var bytes = self.buffered.take() ?? context.channel.allocator.buffer(capacity: 0)
            self.decode(&bytes, last: true, context: context)
        }
        context.fireChannelInactive()
    }

    /// Whether `bytes` hold anything but the empty lines a client ignores before a status line (RFC 9112, 2.2).
    private static func holdsMoreThanEmptyLines(_ bytes: ByteBuffer) -> Bool {
        bytes.readableBytesView.contains { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
    }

    private func decode(_ bytes: inout ByteBuffer, last: Bool, context: ChannelHandlerContext) {
        self.isDecoding = true
        do {
            if last {
                _ = try self.decoder.decodeLast(context: context, buffer: &bytes, seenEOF: true)
            } else {
                let ended = self.decoder.responsesEnded
                // A close meanwhile stops the loop: what is left is decoded as the input's last bytes.
                while !self.closedWhileDecoding, try self.decoder.decode(context: context, buffer: &bytes) == .continue
                {}
                if self.oneRequestAtATime, self.decoder.responsesEnded > ended, self.decoder.state == .head,
                    Self.holdsMoreThanEmptyLines(bytes)
                {
                    bytes.moveReaderIndex(forwardBy: bytes.readableBytes)
                    context.fireUserInboundEventTriggered(BytesAfterResponse())
                }
            }
            if bytes.readableBytes > 0 { self.buffered = bytes }
        } catch {
            self.failed = true
            context.fireErrorCaught(error)
        }
        self.isDecoding = false
        if self.closedWhileDecoding {
            self.closedWhileDecoding = false
            self.close(context: context)
        }
    }
}
