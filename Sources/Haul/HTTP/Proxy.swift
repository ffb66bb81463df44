import Foundation

/// An HTTP proxy server. Plain-http requests go to it with the whole URL as their target (`GET http://host/path`, as
/// curl and wget send them); https ones through a tunnel it opens with `CONNECT`, with TLS end to end inside it.
public struct Proxy: Sendable, Hashable {
    /// The proxy's host name or address (an IPv6 address without brackets).
    public var host: String
    /// The proxy's port.
    public var port: Int
    /// The user and password sent as `Proxy-Authorization: Basic`, when the proxy asks for them.
    public var username: String?
    public var password: String?

    public init(host: String, port: Int, username: String? = nil, password: String? = nil) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// The port a proxy written without one listens on: 1080, as curl assumes.
    public static let defaultPort = 1080

    /// A proxy written as a URL: `http://[user:password@]host[:port]`, or `host[:port]` (http is assumed; without a
    /// port, ``defaultPort``). The user and password may be percent-encoded.
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` for text that is not such a URL, or a scheme other than http (a
    ///   proxy spoken to over TLS, or a SOCKS proxy, is not supported).
    public init(parsing text: String) throws(HaulError) {
        let trimmed = text.trimmingWhitespace()
        let written = trimmed.contains("://") ? trimmed : "http://" + trimmed
        guard let components = URLComponents(string: written), let scheme = components.scheme?.lowercased() else {
            throw HaulError(.invalidRequest, "Not a proxy URL: \"\(text)\"")
        }
        guard scheme == "http" else {
            throw HaulError(.invalidRequest, "Only http:// proxies are supported, not \(scheme)://: \"\(text)\"")
        }
        guard var host = components.host, !host.isEmpty, components.path.isEmpty || components.path == "/",
            components.query == nil
        else {
            throw HaulError(.invalidRequest, "A proxy is written http://[user:password@]host[:port]: \"\(text)\"")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.init(
            host: host.lowercased(),
            port: components.port ?? Self.defaultPort,
            username: components.percentEncodedUser.map { $0.removingPercentEncoding ?? $0 },
            password: components.percentEncodedPassword.map { $0.removingPercentEncoding ?? $0 }
        )
    }

    /// The `Proxy-Authorization` value for the user and password, `nil` without a user.
    var authorization: String? {
        guard let username, !username.isEmpty else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// `host:port`, an IPv6 address in brackets: how messages name it.
    var authority: String { ConnectionFailure.authority(self.host, self.port) }
}

/// Which proxy each request goes through: one for http URLs, one for https URLs, and the hosts reached directly.
/// Empty by default (every request direct); ``init(environment:)`` reads the variables curl and wget read.
public struct ProxySettings: Sendable, Hashable {
    /// The proxy for http URLs.
    public var http: Proxy?
    /// The proxy for https URLs.
    public var https: Proxy?
    /// Hosts reached without a proxy, as `no_proxy` lists them: `example.com` is that host and every host under it
    /// (`.example.com` too), an address is that address, `*` is every host.
    public var bypass: [String]

    public init(http: Proxy? = nil, https: Proxy? = nil, bypass: [String] = []) {
        self.http = http
        self.https = https
        self.bypass = bypass
    }

    /// The same proxy for http and https URLs.
    public init(all proxy: Proxy, bypass: [String] = []) {
        self.init(http: proxy, https: proxy, bypass: bypass)
    }

    /// The settings the environment gives, as curl reads them: `http_proxy` for http URLs (not `HTTP_PROXY`, which
    /// a CGI program's request could set), `https_proxy` or `HTTPS_PROXY` for https URLs, `all_proxy` or `ALL_PROXY`
    /// for either when its own is not set, and `no_proxy` or `NO_PROXY` (comma-separated) for the hosts reached
    /// directly. An empty variable is not set.
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` naming the variable whose value is not a proxy ``Proxy`` takes.
    public init(environment: [String: String]) throws(HaulError) {
        func value(_ names: String...) -> (name: String, value: String)? {
            for name in names {
                if let value = environment[name], !value.trimmingWhitespace().isEmpty { return (name, value) }
            }
            return nil
        }
        func proxy(_ names: String...) throws(HaulError) -> Proxy? {
            for name in names {
                guard let found = value(name) else { continue }
                do {
                    return try Proxy(parsing: found.value)
                } catch {
                    throw HaulError(.invalidRequest, "\(found.name): \(error.message)")
                }
            }
            return nil
        }
        self.init(
            http: try proxy("http_proxy", "all_proxy", "ALL_PROXY"),
            https: try proxy("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"),
            bypass: value("no_proxy", "NO_PROXY").map { Self.hosts(in: $0.value) } ?? []
        )
    }

    /// The hosts of a `no_proxy` list: comma-separated, white space around them dropped, lower-cased.
    public static func hosts(in list: String) -> [String] {
        list.split(separator: ",").map { String($0).trimmingWhitespace().lowercased() }.filter { !$0.isEmpty }
    }

    /// Whether any request goes through a proxy.
    var isEmpty: Bool { self.http == nil && self.https == nil }

    /// The proxy a request to `host` (lower-cased, an IPv6 address without brackets) over `scheme` goes through;
    /// `nil` when it goes directly.
    func proxy(scheme: String, host: String) -> Proxy? {
        let proxy = scheme == "https" ? self.https : (scheme == "http" ? self.http : nil)
        guard let proxy, !self.bypasses(host) else { return nil }
        return proxy
    }

    /// The proxy a request to `url` goes through, `nil` when it goes directly.
    func proxy(for url: URL) -> Proxy? {
        guard !self.isEmpty, let scheme = url.scheme?.lowercased() else { return nil }
        var host = (url.host ?? "").lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return self.proxy(scheme: scheme, host: host)
    }

    /// Whether `host` is reached directly: listed in ``bypass``, or under a listed domain.
    func bypasses(_ host: String) -> Bool {
        self.bypass.contains { entry in
            if entry == "*" { return true }
            var domain = Substring(entry)
            if domain.hasPrefix("[") && domain.hasSuffix("]") { domain = domain.dropFirst().dropLast() }
            while domain.hasPrefix(".") { domain = domain.dropFirst() }
            guard !domain.isEmpty else { return false }
            return host.isWithin(domain: domain)
        }
    }
}
