import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import Haul

@Suite("Haul's HTTP/1.1 response decoder")
struct HTTP1ResponseDecoderTests {
    /// Takes a decoder's parts as a connection's handler does (``HTTP1ResponsePartSink``), and keeps them.
    final class CollectedParts: HTTP1ResponsePartSink {
        var parts: [HTTPClientResponsePart] = []

        func received(_ part: HTTPClientResponsePart) { self.parts.append(part) }
    }

    /// What the decoder made of some responses: one line per part, a body's bytes as text.
    struct Decoded: Equatable, CustomStringConvertible {
        var parts: [String] = []
        var error: HTTPParserError?

        var description: String { self.parts.joined(separator: " | ") + (self.error.map { " ! \($0)" } ?? "") }
    }

    /// Feeds `input` to a decoder in pieces of `piece` bytes (all at once when `nil`), then closes its input when
    /// `close`; adjacent body parts are joined, since how a body is cut depends on how it arrives.
    func decode(_ input: String, piece: Int? = nil, close: Bool = true) throws -> Decoded {
        let collected = CollectedParts()
        let channel = EmbeddedChannel(handler: HTTP1ResponseHandler(sink: collected))
        var decoded = Decoded()
        let bytes = Array(input.utf8)
        let size = piece ?? max(bytes.count, 1)
        do {
            for start in stride(from: 0, to: bytes.count, by: size) {
                try channel.writeInbound(ByteBuffer(bytes: bytes[start..<min(start + size, bytes.count)]))
            }
            if close {
                try channel.close().wait()
                try channel.throwIfErrorCaught()
            }
        } catch let error as HTTPParserError {
            decoded.error = error
        }
        for part in collected.parts {
            switch part {
            case .head(let head):
                let fields = head.headers.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
                decoded.parts.append("head \(head.version) \(head.status.code) \(head.status.reasonPhrase) [\(fields)]")
            case .body(let buffer):
                let text = String(buffer: buffer)
                if let last = decoded.parts.last, last.hasPrefix("body ") {
                    decoded.parts[decoded.parts.count - 1] = last + text
                } else {
                    decoded.parts.append("body " + text)
                }
            case .end:
                decoded.parts.append("end")
            }
        }
        _ = try? channel.finish()
        return decoded
    }

    /// The same input fed whole, and a byte at a time, and in pieces of 7: every way decodes the same.
    func decodeEveryWay(_ input: String, close: Bool = true) throws -> Decoded {
        let whole = try self.decode(input, close: close)
        #expect(try self.decode(input, piece: 1, close: close) == whole, "a byte at a time")
        #expect(try self.decode(input, piece: 7, close: close) == whole, "7 bytes at a time")
        return whole
    }

    @Test func aResponseWithALengthIsAHeadItsBodyAndAnEndHoweverItArrives() throws {
        let decoded = try self.decodeEveryWay(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag:  \"x\"  \r\nX-Empty:\r\n\r\nhello",
            close: false
        )
        #expect(decoded.parts == [#"head HTTP/1.1 200 OK [Content-Length=5,ETag="x",X-Empty=]"#, "body hello", "end"])
        #expect(decoded.error == nil)
    }

    @Test func responsesOnOneConnectionFollowEachOther() throws {
        let decoded = try self.decodeEveryWay(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"
                + "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
                + "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"
                + "HTTP/1.1 204 No Content\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz",
            close: false
        )
        #expect(
            decoded.parts == [
                "head HTTP/1.1 200 OK [Content-Length=2]", "body ab", "end",
                "head HTTP/1.1 404 Not Found [content-length=0]", "end",
                "head HTTP/1.1 304 Not Modified [Content-Length=10]", "end",
                "head HTTP/1.1 204 No Content []", "end",
                "head HTTP/1.1 200 OK [Content-Length=1]", "body z", "end",
            ]
        )
    }

    @Test func aChunkedBodyIsItsChunksDataWithoutExtensionsOrTrailers() throws {
        let decoded = try self.decodeEveryWay(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\nContent-Length: 99\r\n\r\n"
                + "5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n"
                + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            close: false
        )
        #expect(decoded.parts.count == 6)
        #expect(decoded.parts[1] == "body hello 0123456789")
        #expect(decoded.parts[2] == "end")
        #expect(decoded.parts[4] == "body ok")
    }

    @Test func aBodyWithoutALengthEndsWithTheConnection() throws {
        let decoded = try self.decodeEveryWay("HTTP/1.0 200 OK\r\nServer: x\r\n\r\nall of it")
        #expect(decoded.parts == ["head HTTP/1.0 200 OK [Server=x]", "body all of it", "end"])
        #expect(decoded.error == nil)
        let coded = try self.decodeEveryWay("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz")
        #expect(coded.parts.suffix(2) == ["body zz", "end"], "a final coding other than chunked")
    }

    @Test func interimResponsesAreSkippedAndBareLineFeedsAndFoldedFieldsAccepted() throws {
        let decoded = try self.decodeEveryWay(
            "\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\nX-Long: a\n  b\n\tc\nContent-Length: 1\n\n!",
            close: false
        )
        #expect(decoded.parts == ["head HTTP/1.1 200 OK [X-Long=a b c,Content-Length=1]", "body !", "end"])
    }

    @Test func anUnknownStatusKeepsTheServersReason() throws {
        let decoded = try self.decode("HTTP/1.1 299 Rather Fine\r\nContent-Length: 0\r\n\r\n", close: false)
        #expect(decoded.parts.first == "head HTTP/1.1 299 Rather Fine [Content-Length=0]")
    }

    @Test func aConnectionClosedInsideAResponseWithALengthIsAnIncompleteResponse() throws {
        let cutBody = try self.decodeEveryWay("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        #expect(cutBody.parts == ["head HTTP/1.1 200 OK [Content-Length=10]", "body abc"])
        #expect(cutBody.error == .invalidEOFState)
        let cutChunk = try self.decodeEveryWay("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
        #expect(cutChunk.error == .invalidEOFState)
        let cutHead = try self.decodeEveryWay("HTTP/1.1 200 OK\r\nContent-Len")
        #expect(cutHead.parts.isEmpty)
        #expect(cutHead.error == .invalidEOFState)
        let between = try self.decodeEveryWay("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
        #expect(between.error == nil, "closed between responses: nothing lost")
    }

    @Test(arguments: [
        ("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", HTTPParserError.unexpectedContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n", .unexpectedContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", .invalidContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n", .invalidContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", .invalidContentLength),
        ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", .invalidHeaderToken),
        ("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", .invalidHeaderToken),
        ("HTTP/1.1 200 OK\r\n: empty\r\n\r\n", .invalidHeaderToken),
        ("HTTP/1.1 200 OK\r\nETag: a\u{0}b\r\n\r\n", .invalidHeaderToken),
        ("HTTP/1.1 200 OK\r\nETag: a\rb\r\n\r\n", .invalidHeaderToken),
        ("HTTP/2.0 200 OK\r\n\r\n", .invalidVersion),
        ("ICY 200 OK\r\n\r\n", .invalidVersion),
        ("HTTP/1.1 20 OK\r\n\r\n", .invalidStatus),
        ("HTTP/1.1 099 Low\r\n\r\n", .invalidStatus),
        ("HTTP/1.1 101 Switching Protocols\r\n\r\n", .invalidStatus),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .invalidChunkSize),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", .invalidChunkSize),
    ])
    func aMalformedResponseFailsWithSwiftNIOsErrorForIt(input: String, expected: HTTPParserError) throws {
        let decoded = try self.decode(input, close: false)
        #expect(decoded.error == expected, "\(decoded)")
    }

    @Test(arguments: [
        (HTTPVersion.http1_1, [String](), true),
        (.http1_0, [], false),
        (.http1_1, ["close"], false),
        (.http1_1, [" Close\t"], false),
        (.http1_0, ["Keep-Alive"], true),
        (.http1_0, ["upgrade, keep-alive"], true),
        (.http1_1, ["Upgrade"], true),
        (.http1_1, ["keep-alive, close"], false),
        (.http1_1, ["keep-alive", "keep-alive"], false),
        (.http1_0, ["keep-alive", "Upgrade"], true),
        (.http1_1, ["close", "keep-alive"], false),
        (.http1_1, [",,close,"], false),
        (.http1_0, [""], false),
        (.http1_1, ["closed", "keep-alive-ish"], true),
    ])
    func aResponseKeepsItsConnectionAsSwiftNIOWouldHaveIt(
        version: HTTPVersion,
        connectionFields: [String],
        expected: Bool
    ) {
        var headers = HTTPHeaders([("Server", "test"), ("Content-Length", "0")])
        for (index, value) in connectionFields.enumerated() {
            headers.add(name: index.isMultiple(of: 2) ? "Connection" : "CONNECTION", value: value)
        }
        let head = HTTPResponseHead(version: version, status: .ok, headers: headers)
        #expect(HTTP1ResponseDecoder.keepsAlive(head) == expected)
        #expect(head.isKeepAlive == expected, "SwiftNIO's own answer, the rule this follows")
    }

    /// Closes its channel when a response's head arrives, and notes what it hears: the decoder's parts as the
    /// connection's handler takes them (``HTTP1ResponsePartSink``), the pipeline's events after the decoder.
    final class ClosingOnHead: ChannelInboundHandler, HTTP1ResponsePartSink {
        typealias InboundIn = Never
        var heard: [String] = []
        private var context: ChannelHandlerContext?

        func handlerAdded(context: ChannelHandlerContext) {
            self.context = context
        }

        func received(_ part: HTTPClientResponsePart) {
            switch part {
            case .head:
                self.heard.append("head")
                self.context?.close(promise: nil)
            case .body(let buffer): self.heard.append("body \(String(buffer: buffer))")
            case .end: self.heard.append("end")
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            self.heard.append("error \(error)")
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.heard.append("inactive")
        }
    }

    @Test func aCloseFromAHandlerAfterItEndsTheInputOnceTheReadIsDecodedAndThenReachesThatHandler() throws {
        let closing = ClosingOnHead()
        let channel = EmbeddedChannel(handlers: [HTTP1ResponseHandler(sink: closing), closing])
        _ = try? channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
        #expect(
            closing.heard == ["head", "body abc", "error \(HTTPParserError.invalidEOFState)", "inactive"],
            "the rest of the read, then the cut body's error, then the close, each once"
        )
        _ = try? channel.finish()
    }

    @Test func aHeadLargerThanTheLimitFailsEvenBeforeItEnds() throws {
        let field = "X-Big: " + String(repeating: "a", count: 1_000) + "\r\n"
        let huge = "HTTP/1.1 200 OK\r\n" + String(repeating: field, count: 90)
        #expect(try self.decode(huge, piece: 4_096, close: false).error == .headerOverflow, "no empty line yet")
        #expect(try self.decode(huge + "\r\n", close: false).error == .headerOverflow, "a whole head")
        let small = "HTTP/1.1 200 OK\r\n" + String(repeating: field, count: 70) + "Content-Length: 0\r\n\r\n"
        #expect(try self.decode(small, piece: 4_096, close: false).parts.last == "end", "70 KiB is within the limit")
    }
}
