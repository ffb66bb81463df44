import AsyncHTTPClient
import Foundation
import HaulHTTP1
import NIOCore
import NIOHTTP1
import NIOSSL
import Tracing

/// The seam between Haul and its HTTP connections: builds requests, runs them, and turns the connections' errors into
/// ``HaulError``s. Everything above it speaks Haul's types only.
///
/// Plain-http downloads go through Haul's own connections (``PlainHTTPTransport``) where SwiftNIO's sockets run on the
/// client's event loops (Linux; on Apple platforms the client's loops are Network.framework's, and everything goes
/// through the client); https, uploads and deletions through AsyncHTTPClient.
struct HTTPTransport: Sendable {
    /// The client for requests that go directly.
    let client: HTTPClient
    /// The proxies, logins and cookies, when the configuration has any; `nil` (the usual case) when it has none.
    let extras: Extras?
    let plainHTTP: PlainHTTPTransport
    let maximumRedirects: Int
    let secretHeaderNames: Set<String>
    let trustedRedirectHosts: Set<String>
    let allowsInsecureRedirects: Bool

    init(
        client: HTTPClient,
        proxiedClients: [Proxy: HTTPClient] = [:],
        configuration: TransferManager.Configuration
    ) {
        self.client = client
        self.extras =
            configuration.proxies.isEmpty && configuration.hostCredentials.isEmpty && configuration.cookies == nil
            ? nil
            : Extras(
                proxiedClients: proxiedClients,
                proxies: configuration.proxies,
                hostCredentials: configuration.hostCredentials.isEmpty ? nil : configuration.hostCredentials,
                cookies: configuration.cookies
            )
        self.plainHTTP = PlainHTTPTransport(group: client.eventLoopGroup, configuration: configuration)
        self.maximumRedirects = configuration.maximumRedirects
        self.secretHeaderNames = Set(configuration.secretHeaderNames.map { $0.lowercased() })
        self.trustedRedirectHosts = Set(configuration.trustedRedirectHosts.map { $0.lowercased() })
        self.allowsInsecureRedirects = configuration.allowsInsecureRedirects
    }

    /// Makes the shared client for a manager's configuration: HTTP/1.1 (faster than HTTP/2 for bulk data here),
    /// no decompression (files are stored as sent), the idle timeout as the read timeout (it catches stalled
    /// bodies, which a request deadline does not; a server that stops taking an upload is caught by ``UploadBody``),
    /// no silent connection retries (Haul decides about retries), and no redirects (Haul follows them itself, to
    /// decide which headers may follow).
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` when a file of ``TransferManager/Configuration/
    ///   additionalTrustedCertificates`` holds no certificate.
    static func makeClient(_ configuration: TransferManager.Configuration) throws(HaulError) -> HTTPClient {
        HTTPClient(eventLoopGroupProvider: .singleton, configuration: try Self.clientConfiguration(configuration))
    }

    /// The client for direct requests (``makeClient(_:)``) and one for each proxy of the configuration, with the same
    /// settings and the proxy's (AsyncHTTPClient reaches every URL through a proxy with `CONNECT`).
    static func makeClients(
        _ configuration: TransferManager.Configuration
    ) throws(HaulError) -> (direct: HTTPClient, proxied: [Proxy: HTTPClient]) {
        let settings = try Self.clientConfiguration(configuration)
        var proxied: [Proxy: HTTPClient] = [:]
        for proxy in [configuration.proxies.http, configuration.proxies.https].compactMap({ $0 })
        where proxied[proxy] == nil {
            var proxiedSettings = settings
            proxiedSettings.proxy = .server(
                host: proxy.host,
                port: proxy.port,
                authorization: proxy.username.map { .basic(username: $0, password: proxy.password ?? "") }
            )
            proxied[proxy] = HTTPClient(eventLoopGroupProvider: .singleton, configuration: proxiedSettings)
        }
        return (HTTPClient(eventLoopGroupProvider: .singleton, configuration: settings), proxied)
    }

    /// The client that sends a request for `url`: the one for its proxy, or the direct one.
    func clientFor(_ url: URL) -> HTTPClient {
        guard let extras = self.extras, !extras.proxiedClients.isEmpty, let proxy = extras.proxies.proxy(for: url)
        else { return self.client }
        return extras.proxiedClients[proxy] ?? self.client
    }

    /// The client settings ``makeClient(_:)`` describes.
    static func clientConfiguration(
        _ configuration: TransferManager.Configuration
    ) throws(HaulError) -> HTTPClient.Configuration {
        var clientConfiguration = HTTPClient.Configuration(
            tlsConfiguration: try Self.tlsConfiguration(configuration),
            redirectConfiguration: .disallow,
            timeout: .init(
                connect: .nanoseconds(configuration.connectTimeout.nanoseconds),
                read: .nanoseconds(configuration.idleTimeout.nanoseconds)
            ),
            decompression: .disabled
        )
        // The client starts a span per request with the bootstrapped tracer; the default one records nothing but
        // still parses each URL again (3 % of the CPU on many small files). A real tracer is kept.
        if clientConfiguration.tracing.tracer is NoOpTracer { clientConfiguration.tracing.tracer = nil }
        clientConfiguration.httpVersion = .http1Only
        clientConfiguration.connectionPool.retryConnectionEstablishment = false
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = max(
            configuration.maximumTransfersPerHost,
            1
        )
        // Each connection reads up to `maximumReadSize` bytes at a time, one read per wake-up (SwiftNIO's defaults:
        // 64 KiB, up to four reads). The client has no other place to set a channel's options than this hook.
        let readSize = Self.maximumReadSize(concurrency: configuration.maximumConcurrentTransfers)
        clientConfiguration.http1_1ConnectionDebugInitializer = { channel in
            channel.setOption(
                ChannelOptions.recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: readSize)
            ).flatMap {
                channel.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
            }
        }
        return clientConfiguration
    }

    /// The client's TLS settings for the configuration's trusted certificates and verification, or `nil` for the
    /// client's default (the system's authorities, full verification).
    static func tlsConfiguration(_ configuration: TransferManager.Configuration) throws(HaulError) -> TLSConfiguration?
    {
        guard !configuration.additionalTrustedCertificates.isEmpty || !configuration.verifiesCertificates else {
            return nil
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        var certificates: [NIOSSLCertificate] = []
        for file in configuration.additionalTrustedCertificates {
            let read: [NIOSSLCertificate]
            do {
                read = try NIOSSLCertificate.fromPEMFile(file.path)
            } catch {
                throw HaulError(
                    .invalidRequest,
                    "Cannot read certificates from \(file.path): \(error)",
                    underlying: error
                )
            }
            guard !read.isEmpty else {
                throw HaulError(.invalidRequest, "\(file.path) holds no PEM certificate")
            }
            certificates += read
        }
        if !certificates.isEmpty { tls.additionalTrustRoots = [.certificates(certificates)] }
        if !configuration.verifiesCertificates { tls.certificateVerification = .none }
        return tls
    }

    /// Closes the connections; every transfer has ended.
    func shutDown() async throws {
        self.plainHTTP.shutDown()
        if let extras = self.extras {
            for client in extras.proxiedClients.values { try? await client.shutdown() }
        }
        try await self.client.shutdown()
    }

    /// The most bytes a connection reads from its socket at once: `limit` (1 MiB for AsyncHTTPClient's connections,
    /// ``PlainHTTPTransport/readSizeLimit`` for Haul's own), or a share of a 32 MiB budget over the transfers that may run
    /// at once when that is smaller (a power of two, at least 64 KiB, SwiftNIO's default). A connection's reads grow
    /// towards it only while each read fills its buffer, so slow or small bodies keep small buffers; one read per
    /// wake-up keeps a connection from holding several such buffers at once.
    static func maximumReadSize(concurrency: Int, limit: Int = 1024 * 1024) -> Int {
        let share = Self.readBufferBudget / max(concurrency, 1)
        let powerOfTwo = share > 0 ? 1 << (Int.bitWidth - 1 - share.leadingZeroBitCount) : 0
        return min(max(powerOfTwo, 64 * 1024), max(limit, 64 * 1024))
    }

    /// The read buffers' budget that ``maximumReadSize(concurrency:limit:)`` shares out.
    static let readBufferBudget = 32 * 1024 * 1024

    /// How a GET goes out: on Haul's own connections to an origin, or as the client's request.
    private enum Route {
        case plainHTTP(PlainHTTPTransport.Origin)
        case client(HTTPClient.Request)
    }

    /// Sends a GET, follows redirects, and returns the final response once its head has arrived; its body goes to
    /// a ``BodyWriter`` on the connection's event loop (``ResponseStream``). Plain http goes through Haul's own
    /// connections (``PlainHTTPTransport``), https through AsyncHTTPClient.
    nonisolated(nonsending) func stream(
        _ url: URL,
        headers: [(name: String, value: String)]
    ) async throws -> ResponseStream.Started {
        try await self.following(.GET, url, headers: headers) { current, headers in
            // Haul's own connections where they take the URL (its origin found once, its fields checked as its head
            // is made), the client otherwise (its fields checked first).
            let route: Route =
                if self.plainHTTP.isAvailable, let origin = self.plainHTTP.origin(of: current) {
                    .plainHTTP(origin)
                } else {
                    .client(try Self.clientRequest(current, headers: headers))
                }
            do {
                let started =
                    switch route {
                    case .plainHTTP(let origin):
                        try await self.plainHTTP.start(current, origin: origin, headers: headers)
                    case .client(let request): try await ResponseStream.start(request, on: self.clientFor(current))
                    }
                return (started, started.head.status.code, started.head.headers)
            } catch {
                throw Self.haulError(for: error, url: current, receivedBody: false)
            }
        } leaving: { redirect in
            redirect.discard()
        }
    }

    /// A GET for AsyncHTTPClient, its fields checked first (``RequestCheck``).
    private static func clientRequest(_ url: URL, headers: [(name: String, value: String)]) throws -> HTTPClient.Request
    {
        try RequestCheck.checkFields(headers)
        return try HTTPClient.Request(url: url, method: .GET, headers: HTTPHeaders(headers.map { ($0.name, $0.value) }))
    }

    /// Sends a request, follows redirects, and returns the final response once its head has arrived.
    ///
    /// Redirects (301, 302, 303, 307, 308 with a `Location`) are followed up to ``maximumRedirects``; a loop fails at
    /// once. A method other than GET follows only 307 and 308, which keep the method and the body (`body` makes a
    /// fresh body for each hop); the other redirects come back to the caller as they are. Only http and https
    /// targets are followed, and https to http only when allowed. Once a redirect leaves the origin (scheme, host and
    /// port) for a host that is not trusted, the secret headers are dropped for the rest of the chain.
    func send(
        _ method: HTTPMethod,
        _ url: URL,
        headers: [(name: String, value: String)],
        body: (@Sendable () throws -> HTTPClientRequest.Body)?
    ) async throws -> HTTPClientResponse {
        try await self.following(method, url, headers: headers) { current, headers in
            try RequestCheck.checkFields(headers)
            var request = HTTPClientRequest(url: current.absoluteString)
            request.method = method
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            if let body { request.body = try body() }
            // No deadline of the client's: the connect timeout covers connecting (with TLS), and the read timeout a
            // server that stays silent, before its head as after it (`idleTimeout`); an upload's body has its own idle timeout
            // while it is sent. A deadline would also wake the event loops more often.
            do {
                let response = try await self.clientFor(current).execute(request, deadline: .distantFuture)
                return (response, response.status.code, response.headers)
            } catch {
                throw Self.haulError(for: error, url: current, receivedBody: false)
            }
        } leaving: { _ in
            // A redirect's response dropped unread: the client ends its body.
        }
    }

    /// The redirect loop of ``send(_:_:headers:body:)`` and ``stream(_:headers:)``: `exchange` sends one request and
    /// returns its response once the head has arrived, with its status and fields; `leaving` ends a redirect's
    /// response that is not returned.
    nonisolated(nonsending) private func following<Response>(
        _ method: HTTPMethod,
        _ url: URL,
        headers: [(name: String, value: String)],
        exchange:
            nonisolated(nonsending) (URL, [(name: String, value: String)]) async throws -> (
                Response, status: UInt, fields: HTTPHeaders
            ),
        leaving: (Response) -> Void
    ) async throws -> Response {
        try self.checkScheme(of: url, redirected: false)
        var current = url
        var headers = headers
        // The requests sent so far (URL and cookies), from the first redirect on: most requests have none, and need
        // no set.
        var visited: Set<String> = []
        var redirects = 0
        var redirectStatus = 0
        var firstSent: [(name: String, value: String)] = []
        while true {
            // The host's login and the URL's cookies, added for this hop only: a redirect elsewhere gets its own.
            var sent = headers
            if let extras = self.extras {
                if let credentials = extras.hostCredentials { sent = credentials.adding(to: sent, for: current) }
                if let cookies = extras.cookies { sent = cookies.adding(to: sent, for: current) }
            }
            if redirects == 0 {
                firstSent = sent
            } else {
                // A loop is the same request again: a URL asked again with other cookies (a login that sets a
                // session and sends the client back to the file) is not one.
                if visited.isEmpty { visited.insert(Self.visitKey(url, firstSent)) }
                guard visited.insert(Self.visitKey(current, sent)).inserted else {
                    throw HaulError(
                        .tooManyRedirects,
                        "A redirect loop at \(current.absoluteString)",
                        httpStatus: redirectStatus
                    )
                }
            }
            let (response, status, fields) = try await exchange(current, sent)
            self.extras?.cookies?.receive(fields, from: current)
            // `Location` looked for only in a redirect to follow.
            guard Self.follows(status, after: method), let location = fields.first(name: "location") else {
                return response
            }
            leaving(response)
            let hop = try self.nextHop(from: current, location: location, status: Int(status), redirects: redirects)
            if hop.dropsSecrets { headers.removeAll { self.secretHeaderNames.contains($0.name.lowercased()) } }
            redirects += 1
            redirectStatus = Int(status)
            current = hop.target
        }
    }

    /// What a configuration adds to the plain case: proxies, logins per host, cookies. One reference, so that a
    /// transport without them carries nothing more than before they existed.
    final class Extras: Sendable {
        /// A client for each proxy the client's requests go through (``clientFor(_:)``); empty without proxies.
        let proxiedClients: [Proxy: HTTPClient]
        let proxies: ProxySettings
        /// The logins sent to their hosts; `nil` without any.
        let hostCredentials: HostCredentials?
        /// The cookies sent with the requests they match and kept from responses; `nil` without a cookie engine.
        let cookies: CookieStorage?

        init(
            proxiedClients: [Proxy: HTTPClient],
            proxies: ProxySettings,
            hostCredentials: HostCredentials?,
            cookies: CookieStorage?
        ) {
            self.proxiedClients = proxiedClients
            self.proxies = proxies
            self.hostCredentials = hostCredentials
            self.cookies = cookies
        }
    }

    /// What tells two requests of a redirect chain apart: the URL and the cookies sent with it.
    static func visitKey(_ url: URL, _ headers: [(name: String, value: String)]) -> String {
        let cookie = headers.first { $0.name.lowercased() == "cookie" }?.value ?? ""
        return url.absoluteString + "\n" + cookie
    }

    /// Whether a response of `status` to `method` is a redirect to follow: 301, 302 and 303 after a GET (another
    /// method would become a GET), 307 and 308 after any.
    static func follows(_ status: UInt, after method: HTTPMethod) -> Bool {
        switch status {
        case 307, 308: true
        case 301, 302, 303: method == .GET
        default: false
        }
    }

    /// Reads up to `limit` bytes of a response body that is not a file (an error page, an upload's answer) and
    /// drops the rest, so that the connection can serve the next request. Returns what it read as text.
    static func drain(_ response: HTTPClientResponse, keeping limit: Int = 1024) async -> String {
        var kept: [UInt8] = []
        do {
            for try await chunk in response.body where kept.count < limit {
                kept += chunk.readableBytesView.prefix(limit - kept.count)
            }
        } catch {}
        return String(decoding: kept, as: UTF8.self)
    }

    /// The error for a response whose status is not a success, with the server's `Retry-After` and, when it sent
    /// one, the start of its explanation.
    static func statusError(_ response: HTTPClientResponse, body: String?) -> HaulError {
        self.statusError(response.status, response.headers, body: body)
    }

    /// The error for a response's head whose status is not a success, with the server's `Retry-After`, and the
    /// start of its explanation when it sent one.
    static func statusError(_ status: HTTPResponseStatus, _ headers: HTTPHeaders, body: String?) -> HaulError {
        let code = Int(status.code)
        // 407 comes from a proxy, never from the server the URL names.
        var message = code == 407 ? Self.proxyWantsCredentials : "The server answered \(code) \(status.reasonPhrase)"
        let detail = (body ?? "").split(whereSeparator: \.isNewline).first.map { String($0.prefix(200)) } ?? ""
        let isText = headers.first(name: "content-type").map { $0.hasPrefix("text/plain") } ?? false
        if isText, !detail.trimmingCharacters(in: .whitespaces).isEmpty { message += ": \(detail)" }
        var error = HaulError(.httpStatus, message, httpStatus: code)
        error.retryAfter = headers.first(name: "retry-after").flatMap { RetryAfter.delay($0, now: Date()) }
        return error
    }

    /// Where a redirect leads, and whether the secret headers must be dropped on the way; throws when it must not
    /// be followed (past the limit, an invalid location, a scheme other than http and https, a downgrade). Pure.
    func nextHop(
        from current: URL,
        location: String,
        status: Int,
        redirects: Int
    ) throws -> (target: URL, dropsSecrets: Bool) {
        guard redirects < self.maximumRedirects else {
            throw HaulError(.tooManyRedirects, "More than \(self.maximumRedirects) redirects", httpStatus: status)
        }
        guard let target = URL(string: location, relativeTo: current)?.absoluteURL else {
            throw HaulError(
                .redirectRefused,
                "The server redirected to an invalid URL: \(location)",
                httpStatus: status
            )
        }
        try self.checkScheme(of: target, redirected: true)
        if current.scheme?.lowercased() == "https", target.scheme?.lowercased() == "http", !self.allowsInsecureRedirects
        {
            throw HaulError(
                .redirectRefused,
                "Refused a redirect from https to http (\(target.absoluteString))",
                httpStatus: status
            )
        }
        let dropsSecrets =
            !Self.sameOrigin(current, target) && !self.trustedRedirectHosts.contains(target.host?.lowercased() ?? "")
        return (target, dropsSecrets)
    }

    /// ``checkScheme(of:redirected:)-swift.type.method``, passed at once by a URL Haul's own connections take
    /// (http, with a host): the plain-http transport knows it from the last URL with the same scheme and authority.
    private func checkScheme(of url: URL, redirected: Bool) throws {
        if self.plainHTTP.origin(of: url) != nil { return }
        try Self.checkScheme(of: url, redirected: redirected)
    }

    private static func checkScheme(of url: URL, redirected: Bool) throws {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw HaulError(
                redirected ? .redirectRefused : .invalidRequest,
                "Only http and https URLs are supported: \(url.absoluteString)"
            )
        }
        guard let host = url.host, !host.isEmpty else {
            throw HaulError(.invalidRequest, "The URL has no host: \(url.absoluteString)")
        }
    }

    /// Whether two URLs share scheme, host and port (RFC 6454), with default ports filled in.
    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        self.origin(a, scheme: a.scheme?.lowercased() ?? "") == self.origin(b, scheme: b.scheme?.lowercased() ?? "")
    }

    /// `scheme://host:port`, the host in lower case and the scheme's default port filled in: the key of the
    /// per-host limit, and what ``sameOrigin(_:_:)`` compares.
    static func origin(_ url: URL, scheme: String) -> String {
        "\(scheme)://\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// What a proxy's 407 says: to the proxy's own connections (plain http) as a response, through AsyncHTTPClient's
    /// tunnel (https) as an error.
    static let proxyWantsCredentials =
        "The proxy asked for credentials (407 Proxy Authentication Required): give them in its URL, "
        + "http://user:password@host:port"

    /// The Haul error for an error thrown by the client or by a body iteration.
    static func haulError(for error: any Error, url: URL, receivedBody: Bool) -> any Error {
        if error is HaulError || error is CancellationError { return error }
        if let message = ConnectionFailure.tlsFailure(error, url: url) {
            return HaulError(.tlsHandshakeFailed, message, underlying: error)
        }
        if let parserError = error as? HTTPParserError, parserError != .invalidEOFState {
            // NIO's parser caps the header block at 80 KiB and refuses conflicting lengths: no retry would help.
            // (`invalidEOFState` is a connection closed mid-body: an incomplete transfer, handled below.)
            return HaulError(.invalidResponse, "The server's response is malformed: \(parserError)", underlying: error)
        }
        if let clientError = error as? HTTP1ClientError {
            let server = ConnectionFailure.server(of: url) ?? url.absoluteString
            switch clientError.code {
            case .cancelled:
                return CancellationError()
            case .connectTimeout:
                return HaulError(.timedOut, "Timed out connecting to \(server)", underlying: error)
            case .readTimeout:
                let message =
                    receivedBody
                    ? "Timed out: \(server) stopped sending the response's body"
                    : "Timed out waiting for \(server) to answer"
                return HaulError(.timedOut, message, underlying: error)
            case .remoteConnectionClosed:
                return HaulError(
                    receivedBody ? .incompleteBody : .connectionFailed,
                    "The server closed the connection before the end of the response",
                    underlying: error
                )
            case .connectFailed:
                let reason = ConnectionFailure.message(
                    for: clientError.underlying ?? error,
                    receivedBody: false,
                    url: url
                )
                return HaulError(.connectionFailed, reason, underlying: error)
            default:
                break
            }
        }
        if let clientError = error as? HTTPClientError {
            switch clientError {
            case .cancelled:
                return CancellationError()
            case .connectTimeout, .readTimeout, .writeTimeout, .deadlineExceeded, .tlsHandshakeTimeout,
                .getConnectionFromPoolTimeout:
                return HaulError(
                    .timedOut,
                    ConnectionFailure.timeoutMessage(for: clientError, receivedBody: receivedBody, url: url),
                    underlying: error
                )
            case .remoteConnectionClosed, .bodyLengthMismatch:
                return HaulError(
                    receivedBody ? .incompleteBody : .connectionFailed,
                    "The server closed the connection before the end of the response",
                    underlying: error
                )
            case .proxyAuthenticationRequired:
                return HaulError(.httpStatus, Self.proxyWantsCredentials, httpStatus: 407, underlying: error)
            case .invalidProxyResponse:
                return HaulError(
                    .invalidResponse,
                    "The proxy would not open a tunnel to \(ConnectionFailure.server(of: url) ?? url.absoluteString)",
                    underlying: error
                )
            case .httpProxyHandshakeTimeout:
                return HaulError(.timedOut, "Timed out waiting for the proxy to open a tunnel", underlying: error)
            case .invalidURL, .emptyHost, .emptyScheme:
                return HaulError(
                    .invalidRequest,
                    "Not a URL Haul can use: \(url.absoluteString)",
                    underlying: error
                )
            default:
                break
            }
        }
        return HaulError(
            receivedBody ? .incompleteBody : .connectionFailed,
            ConnectionFailure.message(for: error, receivedBody: receivedBody, url: url),
            underlying: error
        )
    }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product + attoseconds / 1_000_000_000
    }
}

/// A one-entry cache of the origin of the last URL asked (``HTTPTransport/origin(_:scheme:)``): a batch's transfers
/// mostly share one, and building it asks the URL for its scheme, host and port.
struct LastOrigin: Sendable {
    private var last = LastAuthority<String?>()

    /// The origin of an http or https URL with a host; `nil` for any other URL.
    mutating func origin(of url: URL) -> String? {
        self.last.value(of: url) { url in
            guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                let host = url.host, !host.isEmpty
            else { return nil }
            return HTTPTransport.origin(url, scheme: scheme)
        }
    }
}

/// A one-entry cache of what a URL's scheme and authority say (its origin, whether Haul's own connections take it):
/// Foundation's `URL` works out each of scheme, host, port and credentials anew at each call, about a microsecond for
/// the host alone, which it percent-decodes. The URL's text up to the end of its authority is compared instead, byte
/// for byte: the same text names the same scheme, credentials, host and port.
struct LastAuthority<Value: Sendable>: Sendable {
    private var last: (authority: [UInt8], value: Value)?

    /// `compute(url)`, or what it gave for the last URL whose text has the same scheme and authority (a URL without
    /// an authority is not remembered).
    mutating func value(of url: URL, _ compute: (URL) -> Value) -> Value {
        var text = url.absoluteString
        // The URL's authority when it is not the last one's (`[]` when it is, `nil` when the text has none).
        let authority = text.withUTF8 { bytes -> [UInt8]? in
            guard let length = Self.authorityLength(bytes) else { return nil }
            if let last = self.last, last.authority.count == length,
                last.authority.withUnsafeBufferPointer({ memcmp($0.baseAddress!, bytes.baseAddress!, length) == 0 })
            {
                return []
            }
            return Array(bytes[..<length])
        }
        if let authority, authority.isEmpty, let last { return last.value }
        let value = compute(url)
        if let authority, !authority.isEmpty { self.last = (authority, value) }
        return value
    }

    /// How many bytes of a URL's text run through its authority: the scheme, `://`, and what follows up to the first
    /// `/`, `?` or `#` (or the end); `nil` when the first `:` is not followed by `//`.
    static func authorityLength(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon + 2 < bytes.count,
            bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else { return nil }
        var end = colon + 3
        while end < bytes.count, bytes[end] != UInt8(ascii: "/"), bytes[end] != UInt8(ascii: "?"),
            bytes[end] != UInt8(ascii: "#")
        {
            end += 1
        }
        return end
    }
}
