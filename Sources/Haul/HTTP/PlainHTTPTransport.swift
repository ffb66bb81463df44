import Foundation
import HaulHTTP1
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Haul's plain-http downloads, over the keep-alive client of `HaulHTTP1`: which URLs go that way, the request's
/// head (its target, `Host`, a proxy's absolute form and credentials), and the client's errors as Haul's. https,
/// uploads and deletions go through AsyncHTTPClient (``HTTPTransport``). It exists because AsyncHTTPClient's
/// per-request path costs more than fetching a small file does (docs/performance.md).
final class PlainHTTPTransport: Sendable {
    /// Where a connection goes: the host (lower-cased) and port of an http URL.
    struct Origin: Hashable, Sendable {
        /// Lower-cased; an IPv6 address without its brackets.
        let host: String
        let port: Int

        init(_ url: URL) {
            var host = (url.host ?? "").lowercased()
            if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            self.host = host
            self.port = url.port ?? 80
        }

        var endpoint: HTTP1Client.Endpoint { HTTP1Client.Endpoint(host: self.host, port: self.port) }
    }

    /// The origin of the last URL asked about, or `nil` when these connections do not take it (``origin(of:)``).
    private let lastOrigin = NIOLockedValueBox(LastAuthority<Origin?>())

    private let client: HTTP1Client
    /// Whether SwiftNIO's sockets run on the group's loops. On Apple platforms AsyncHTTPClient's group is
    /// Network.framework's (`NIOTSEventLoopGroup`), on which they cannot: there plain http, too, goes through
    /// AsyncHTTPClient (and Network.framework keeps its say over the device's networks).
    var isAvailable: Bool { self.client.isAvailable }
    /// The most one of these connections reads at once.
    static let readSizeLimit = HTTP1Client.Configuration().readSizeLimit
    /// The proxies, when plain-http requests go through one (``TransferManager/Configuration/proxies``); `nil` when
    /// every connection goes directly to its origin.
    private let proxies: ProxySettings?

    init(group: any EventLoopGroup, configuration: TransferManager.Configuration) {
        var client = HTTP1Client.Configuration()
        client.connectTimeout = .nanoseconds(configuration.connectTimeout.nanoseconds)
        client.idleTimeout = .nanoseconds(configuration.idleTimeout.nanoseconds)
        client.readSizeLimit = HTTPTransport.maximumReadSize(
            concurrency: configuration.maximumConcurrentTransfers,
            limit: Self.readSizeLimit
        )
        // As many idle connections as transfers may run at once: a long list of hosts would otherwise keep a socket
        // open to each for the idle timeout.
        client.maximumIdleConnections = max(configuration.maximumConcurrentTransfers, 1)
        self.client = HTTP1Client(group: group, configuration: client)
        self.proxies = configuration.proxies.http == nil ? nil : configuration.proxies
    }

    /// Whether a URL goes through these connections: http with a host and no credentials in the URL, when the client
    /// is available (``isAvailable``).
    func handles(_ url: URL) -> Bool {
        self.isAvailable && self.origin(of: url) != nil
    }

    /// The origin of a URL of the kind these connections take (``handles(_:)-swift.type.method``), `nil` for any other
    /// URL; worked out once for a run of URLs with the same scheme and authority.
    func origin(of url: URL) -> Origin? {
        self.lastOrigin.withLockedValue { $0.value(of: url) { Self.handles($0) ? Origin($0) : nil } }
    }

    /// Whether a URL is of the kind these connections take: http with a host and no credentials in the URL (which
    /// AsyncHTTPClient turns into an `Authorization` header).
    static func handles(_ url: URL) -> Bool {
        url.scheme?.lowercased() == "http" && url.user == nil && url.password == nil && !(url.host ?? "").isEmpty
    }

    /// Sends a GET of `url` (whose ``origin(of:)`` is `origin`) with `headers` (and a `Host` header, unless they have
    /// one), and returns once the response's head has arrived; the body goes to a ``BodyWriter`` on the connection's
    /// event loop. Cancelling the task cancels the request.
    nonisolated(nonsending) func start(
        _ url: URL,
        origin: Origin,
        headers: [(name: String, value: String)]
    ) async throws -> ResponseStream.Started {
        // Its connections go to the proxy when it has one (each carries requests for this origin only).
        let proxy = self.proxies?.proxy(scheme: "http", host: origin.host)
        let request = try Self.requestHead(url, origin: origin, headers: headers, proxy: proxy)
        do {
            let (head, exchange, stream) = try await self.client.execute(
                request,
                on: origin.endpoint,
                via: proxy.map { HTTP1Client.Endpoint(host: $0.host, port: $0.port) },
                consumer: { ResponseStream(eventLoop: $0) }
            )
            return ResponseStream.Started(head: head, stream: stream, request: exchange)
        } catch let error as HTTP1ClientError where error.code == .connectTimeout && proxy != nil {
            throw HaulError(.timedOut, "Timed out connecting to the proxy \(proxy!.authority)")
        } catch let error as HTTP1ClientError where error.code == .connectFailed && proxy != nil {
            // Named as the proxy's: the URL's server was never asked.
            let reason = ConnectionFailure.message(for: error.underlying ?? error, receivedBody: false)
            throw HaulError(.connectionFailed, "The proxy \(proxy!.authority): \(reason)", underlying: error)
        }
    }

    /// The request's head: the URL's path and query as they were written, `Host` first. Through a proxy, the target
    /// is the whole URL (`http://host:port/path?query`, RFC 9112's absolute form) and the proxy's credentials follow
    /// as `Proxy-Authorization` (unless the headers give one).
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` when the target or a field could not be sent as it is: a request
    ///   is checked here, once, as it is made (``RequestCheck``), not again by SwiftNIO's validator in the pipeline.
    static func requestHead(
        _ url: URL,
        origin: Origin,
        headers: [(name: String, value: String)],
        proxy: Proxy? = nil
    ) throws(HaulError) -> HTTPRequestHead {
        var target = url.path(percentEncoded: true)
        if target.isEmpty { target = "/" }
        if let query = url.query(percentEncoded: true) { target += "?" + query }
        guard RequestCheck.isValidTarget(target) else {
            throw HaulError(.invalidRequest, "The URL's path or query cannot be sent as it is: \(url.absoluteString)")
        }
        try RequestCheck.checkFields(headers)
        // Gathered, then handed over at once: every name here is a checked token already.
        var fields: [(String, String)] = []
        fields.reserveCapacity(headers.count + 1)
        let namesHost = headers.contains { field in
            var name = field.name
            return name.withUTF8 { RequestCheck.equalsIgnoringCase(UnsafeRawBufferPointer($0), "host") }
        }
        // A byte search: `contains(":")` resolved to Foundation's, which bridged the host to `NSString` on every
        // request (1 % of the event loops' CPU on 2,000 small files).
        let host = origin.host.utf8.contains(UInt8(ascii: ":")) ? "[\(origin.host)]" : origin.host
        let authority = origin.port == 80 ? host : "\(host):\(origin.port)"
        if !namesHost { fields.append(("Host", authority)) }
        for (name, value) in headers { fields.append((name, value)) }
        if let proxy {
            target = "http://" + authority + target
            let namesAuthorization = headers.contains { $0.name.lowercased() == "proxy-authorization" }
            if !namesAuthorization, let authorization = proxy.authorization {
                fields.append(("Proxy-Authorization", authorization))
            }
        }
        return HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: HTTPHeaders(fields))
    }

    /// Closes the idle connections; later requests fail.
    func shutDown() {
        self.client.shutDown()
    }
}

extension HTTP1Exchange: ResponseRequest {}

extension ResponseStream: HTTP1ResponseConsumer {}
