import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A forward HTTP proxy for tests, on loopback and an ephemeral port: a plain-http request with the whole URL as its
/// target (`GET http://host:port/path HTTP/1.1`) goes on to that origin with the path alone as its target, one
/// request per connection (it asks the origin to close after its answer); `CONNECT host:port` opens a tunnel to the
/// origin. It records each request it was asked (``requests``); with `credentials`, a request without them as
/// `Proxy-Authorization: Basic` is answered 407.
public final class ForwardProxy: Sendable {
    /// A request as the proxy received it.
    public struct Request: Sendable, Hashable {
        /// `GET`, `CONNECT`, ...
        public var method: String
        /// The request's target as sent: a whole URL, or `host:port` for `CONNECT`.
        public var target: String
        /// The headers, names lower-cased.
        public var headers: [String: String]
    }

    private let recorded: NIOLockedValueBox<[Request]>
    /// The port the proxy listens on.
    public let port: Int
    /// The address the proxy listens on.
    public let host: String

    private init(recorded: NIOLockedValueBox<[Request]>, host: String, port: Int) {
        self.recorded = recorded
        self.host = host
        self.port = port
    }

    /// The requests received so far, in order.
    public var requests: [Request] { self.recorded.withLockedValue { $0 } }

    /// The proxy as a URL, with the user and password in it when given.
    public func url(user: String? = nil, password: String? = nil) -> String {
        let credentials = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "http://\(credentials)\(self.host):\(self.port)"
    }

    /// Starts a proxy, runs `body`, and stops the proxy (tunnels under way are closed with it).
    public static func withProxy<Result>(
        host: String = "127.0.0.1",
        credentials: (user: String, password: String)? = nil,
        _ body: (ForwardProxy) async throws -> Result
    ) async throws -> Result {
        let recorded = NIOLockedValueBox<[Request]>([])
        let expected = credentials.map { "Basic " + Data("\($0.user):\($0.password)".utf8).base64EncodedString() }
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ClientSide(recorded: recorded, expectedAuthorization: expected)
                    )
                }
            }
            .bind(host: host, port: 0).get()
        let proxy = ForwardProxy(recorded: recorded, host: host, port: channel.localAddress!.port!)
        do {
            let result = try await body(proxy)
            try? await channel.close()
            return result
        } catch {
            try? await channel.close()
            throw error
        }
    }

    /// The client's connection: reads the request's head, then relays bytes to the origin.
    private final class ClientSide: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        private enum Phase {
            case readingHead(ByteBuffer)
            case connecting(pending: ByteBuffer)
            case relaying(any Channel)
            /// A plain-http request was sent on: what the client sends after it is dropped (the origin closes the
            /// connection after its answer, and so does the proxy; a client that sent another request sends it again
            /// on a new connection).
            case answering(any Channel)
            case closed
        }

        /// Whether the request is a tunnel's (everything relayed) or one plain-http request's.
        private var isTunnel = false

        private let recorded: NIOLockedValueBox<[Request]>
        private let expectedAuthorization: String?
        private var phase = Phase.readingHead(ByteBuffer())

        init(recorded: NIOLockedValueBox<[Request]>, expectedAuthorization: String?) {
            self.recorded = recorded
            self.expectedAuthorization = expectedAuthorization
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = self.unwrapInboundIn(data)
            switch self.phase {
            case .readingHead(var buffer):
                buffer.writeBuffer(&bytes)
                self.phase = .readingHead(buffer)
                self.readHeadIfComplete(buffer, context: context)
            case .connecting(var pending):
                pending.writeBuffer(&bytes)
                self.phase = .connecting(pending: pending)
            case .relaying(let origin):
                origin.writeAndFlush(bytes, promise: nil)
            case .answering, .closed:
                break
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            switch self.phase {
            case .relaying(let origin), .answering(let origin): origin.close(promise: nil)
            default: break
            }
            self.phase = .closed
            context.fireChannelInactive()
        }

        private func readHeadIfComplete(_ buffer: ByteBuffer, context: ChannelHandlerContext) {
            let view = buffer.readableBytesView
            guard let end = view.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
            let head = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
            var rest = buffer
            rest.moveReaderIndex(to: end.upperBound)
            let lines = head.components(separatedBy: "\r\n")
            let parts = lines[0].split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            guard parts.count == 3 else { return self.answer("400 Bad Request", context: context) }
            var headers: [String: String] = [:]
            var kept: [String] = []
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let name = line[..<colon].lowercased()
                headers[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                if !["proxy-authorization", "proxy-connection", "connection"].contains(name) { kept.append(line) }
            }
            let request = Request(method: parts[0], target: parts[1], headers: headers)
            self.recorded.withLockedValue { $0.append(request) }
            if let expected = self.expectedAuthorization, headers["proxy-authorization"] != expected {
                return self.answer(
                    "407 Proxy Authentication Required",
                    extra: "Proxy-Authenticate: Basic realm=\"test\"\r\n",
                    context: context
                )
            }
            let origin: (host: String, port: Int)
            var forwarded = ByteBuffer()
            self.isTunnel = request.method == "CONNECT"
            if self.isTunnel {
                guard let authority = Self.authority(request.target, defaultPort: 443) else {
                    return self.answer("400 Bad Request", context: context)
                }
                origin = authority
            } else {
                guard request.target.hasPrefix("http://"),
                    case let afterScheme = request.target.dropFirst("http://".count),
                    case let slash = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex,
                    let authority = Self.authority(String(afterScheme[..<slash]), defaultPort: 80)
                else {
                    return self.answer("400 Bad Request", context: context)
                }
                origin = authority
                let path = afterScheme[slash...].isEmpty ? "/" : String(afterScheme[slash...])
                let text = (["\(parts[0]) \(path) \(parts[2])"] + kept + ["Connection: close", "", ""])
                    .joined(separator: "\r\n")
                forwarded.writeString(text)
            }
            forwarded.writeBuffer(&rest)
            self.phase = .connecting(pending: forwarded)
            let client = context.channel
            let isTunnel = self.isTunnel
            ClientBootstrap(group: context.eventLoop)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(OriginSide(client: client, isTunnel: isTunnel))
                    }
                }
                .connect(host: origin.host, port: origin.port)
                .assumeIsolated()
                .whenComplete { result in
                    guard case .connecting(let pending) = self.phase else {
                        if case .success(let channel) = result { channel.close(promise: nil) }
                        return
                    }
                    switch result {
                    case .success(let channel):
                        self.phase = self.isTunnel ? .relaying(channel) : .answering(channel)
                        if self.isTunnel {
                            context.writeAndFlush(
                                self.wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 200 Connection established\r\n\r\n")),
                                promise: nil
                            )
                        }
                        if pending.readableBytes > 0 { channel.writeAndFlush(pending, promise: nil) }
                    case .failure:
                        self.answer("502 Bad Gateway", context: context)
                    }
                }
        }

        /// Answers the client itself, with no body, and closes the connection.
        private func answer(_ status: String, extra: String = "", context: ChannelHandlerContext) {
            self.phase = .closed
            let text = "HTTP/1.1 \(status)\r\n\(extra)Content-Length: 0\r\nConnection: close\r\n\r\n"
            context.writeAndFlush(self.wrapOutboundOut(ByteBuffer(string: text))).assumeIsolated().whenComplete {
                _ in context.close(promise: nil)
            }
        }

        /// `host:port` (an IPv6 address in brackets) as a host and port.
        static func authority(_ text: String, defaultPort: Int) -> (host: String, port: Int)? {
            var host = Substring(text)
            var port = defaultPort
            if let colon = text.lastIndex(of: ":"), !text[colon...].contains("]") {
                guard let number = Int(text[text.index(after: colon)...]) else { return nil }
                host = text[..<colon]
                port = number
            }
            if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
            return host.isEmpty ? nil : (String(host), port)
        }
    }

    /// The origin's connection: relays its bytes to the client, and closes the client's connection when it closes.
    /// For a plain-http request, the response's head says `Connection: close` to the client (the proxy carries one
    /// request per connection).
    private final class OriginSide: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        private let client: any Channel
        /// The response's head so far, until it is complete and sent on; `nil` once sent, or for a tunnel.
        private var head: ByteBuffer?

        init(client: any Channel, isTunnel: Bool) {
            self.client = client
            self.head = isTunnel ? nil : ByteBuffer()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = self.unwrapInboundIn(data)
            guard var head = self.head else { return self.client.writeAndFlush(bytes, promise: nil) }
            head.writeBuffer(&bytes)
            let view = head.readableBytesView
            guard let end = view.firstRange(of: Array("\r\n\r\n".utf8)) else {
                self.head = head
                return
            }
            let text = String(decoding: view[view.startIndex..<end.lowerBound], as: UTF8.self)
            let lines = text.components(separatedBy: "\r\n").filter {
                !$0.lowercased().hasPrefix("connection:") && !$0.lowercased().hasPrefix("keep-alive:")
            }
            var rewritten = ByteBuffer(string: (lines + ["Connection: close", "", ""]).joined(separator: "\r\n"))
            head.moveReaderIndex(to: end.upperBound)
            rewritten.writeBuffer(&head)
            self.head = nil
            self.client.writeAndFlush(rewritten, promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.client.close(promise: nil)
            context.fireChannelInactive()
        }
    }
}
