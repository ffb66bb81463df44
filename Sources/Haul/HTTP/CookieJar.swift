import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1

/// Cookies sent with the requests whose URLs they match, as a browser would send them: by domain, path, scheme and
/// expiry. Read from and written to cookie files in the Netscape format that curl (`-b`, `-c`), wget
/// (`--load-cookies`, `--save-cookies`), aria2c and browsers' exporters use; ``CookieStorage`` keeps the cookies
/// servers set during a run.
public struct CookieJar: Sendable, Hashable {
    /// One cookie.
    public struct Cookie: Sendable, Hashable {
        /// The domain (lower-cased, without a leading dot).
        public var domain: String
        /// Whether hosts under ``domain`` get it too.
        public var includesSubdomains: Bool
        public var path: String
        /// Whether it goes only over https.
        public var isSecure: Bool
        /// When it expires (seconds since 1970); `nil` for a session cookie, which never expires here.
        public var expires: Double?
        public var name: String
        public var value: String

        public init(
            domain: String,
            includesSubdomains: Bool = false,
            path: String = "/",
            isSecure: Bool = false,
            expires: Double? = nil,
            name: String,
            value: String
        ) {
            var domain = domain.lowercased()
            while domain.hasPrefix(".") { domain.removeFirst() }
            self.domain = domain
            self.includesSubdomains = includesSubdomains
            self.path = path.isEmpty ? "/" : path
            self.isSecure = isSecure
            self.expires = expires
            self.name = name
            self.value = value
        }

        /// Whether it goes with a request to `url` (host lower-cased) at `now` (RFC 6265's domain and path matching).
        func matches(host: String, path: String, isSecure: Bool, now: Double) -> Bool {
            if self.isSecure && !isSecure { return false }
            if let expires = self.expires, expires <= now { return false }
            guard self.includesSubdomains ? host.isWithin(domain: self.domain) : host == self.domain else {
                return false
            }
            if path == self.path || self.path == "/" { return true }
            guard path.hasPrefix(self.path) else { return false }
            return self.path.hasSuffix("/") || path.dropFirst(self.path.count).hasPrefix("/")
        }
    }

    /// The cookies, in the order given.
    public var cookies: [Cookie]

    public init(cookies: [Cookie] = []) {
        self.cookies = cookies
    }

    /// The cookies of a file in the Netscape format: one a line, seven fields separated by tabs (domain,
    /// subdomains `TRUE`/`FALSE`, path, secure `TRUE`/`FALSE`, expiry in seconds since 1970 with 0 for a session
    /// cookie, name, value); `#HttpOnly_` before a domain is read as part of the format; other lines starting with
    /// `#`, and blank lines, are comments. Cookies that expired before `now` are dropped.
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` naming the first line that is not such a cookie.
    public init(netscape text: String, now: Date = Date()) throws(HaulError) {
        var cookies: [Cookie] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = Substring(rawLine)
            if line.hasSuffix("\r") { line = line.dropLast() }
            if line.hasPrefix("#HttpOnly_") {
                line = line.dropFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.allSatisfy(\.isWhitespace) {
                continue
            }
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 7 || fields.count == 6, !fields[0].isEmpty, !fields[5].isEmpty,
                let expiry = Double(fields[4])
            else {
                throw HaulError(
                    .invalidRequest,
                    "cookie file line \(index + 1): not a cookie (seven fields separated by tabs: domain, "
                        + "subdomains, path, secure, expiry, name, value)"
                )
            }
            let cookie = Cookie(
                domain: String(fields[0]),
                includesSubdomains: fields[1].uppercased() == "TRUE" || fields[0].hasPrefix("."),
                path: String(fields[2]),
                isSecure: fields[3].uppercased() == "TRUE",
                expires: expiry == 0 ? nil : expiry,
                name: String(fields[5]),
                value: fields.count == 7 ? String(fields[6]) : ""
            )
            if let expires = cookie.expires, expires <= now.timeIntervalSince1970 { continue }
            cookies.append(cookie)
        }
        self.init(cookies: cookies)
    }

    /// Whether it holds no cookie.
    public var isEmpty: Bool { self.cookies.isEmpty }

    /// The jar as a cookie file in the Netscape format (what ``init(netscape:now:)`` reads), session cookies with an
    /// expiry of 0.
    public var netscapeText: String {
        var text = "# Netscape HTTP Cookie File\n# Written by Haul.\n\n"
        for cookie in self.cookies {
            let domain = cookie.includesSubdomains ? "." + cookie.domain : cookie.domain
            let fields = [
                domain, cookie.includesSubdomains ? "TRUE" : "FALSE", cookie.path, cookie.isSecure ? "TRUE" : "FALSE",
                String(Int64(cookie.expires ?? 0)), cookie.name, cookie.value,
            ]
            text += fields.joined(separator: "\t") + "\n"
        }
        return text
    }

    /// Takes a `Set-Cookie` field a response to `url` carried (RFC 6265 §5.2): the cookie replaces one of the same
    /// name, domain and path, or removes it when it has expired. A `Domain` that does not cover the URL's host (or
    /// names a single label, `com`) makes the field ignored, as browsers ignore it; without `Domain` the cookie is the
    /// host's alone; without `Path`, it is the URL's folder's.
    public mutating func take(setCookie field: String, from url: URL, now: Date = Date()) {
        guard let host = url.host?.lowercased(),
            let cookie = Self.cookie(setCookie: field, host: host, url: url, now: now)
        else { return }
        self.cookies.removeAll { $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path }
        if let expires = cookie.expires, expires <= now.timeIntervalSince1970 { return }
        self.cookies.append(cookie)
    }

    /// The cookie a `Set-Cookie` field describes, `nil` when it is malformed or may not be set from `host`.
    static func cookie(setCookie field: String, host: String, url: URL, now: Date) -> Cookie? {
        let parts = field.split(separator: ";", omittingEmptySubsequences: false)
        guard let pair = parts.first, let equals = pair.firstIndex(of: "=") else { return nil }
        let name = pair[..<equals].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { return nil }
        var domain: String?
        var path: String?
        var isSecure = false
        var expires: Double?
        var maxAge: Double?
        for attribute in parts.dropFirst() {
            let equals = attribute.firstIndex(of: "=")
            let key = (equals.map { attribute[..<$0] } ?? attribute).trimmingCharacters(in: .whitespaces).lowercased()
            let argument = equals.map { attribute[attribute.index(after: $0)...].trimmingCharacters(in: .whitespaces) }
            switch key {
            case "domain":
                if let argument, !argument.isEmpty { domain = argument.lowercased() }
            case "path":
                if let argument, argument.hasPrefix("/") { path = argument }
            case "secure":
                isSecure = true
            case "expires":
                if let argument, let date = HTTPDate.parse(argument) { expires = date.timeIntervalSince1970 }
            case "max-age":
                if let argument, let seconds = Double(argument) { maxAge = seconds }
            default:
                break
            }
        }
        if let maxAge { expires = maxAge <= 0 ? 0 : now.timeIntervalSince1970 + maxAge }
        var includesSubdomains = false
        if var domain {
            while domain.hasPrefix(".") { domain.removeFirst() }
            guard host.isWithin(domain: domain), domain.contains(".") || domain == host else { return nil }
            includesSubdomains = domain != host || !Self.isAddress(host)
        }
        let requestPath = url.path(percentEncoded: true)
        let defaultPath =
            requestPath.hasPrefix("/") && requestPath.dropFirst().contains("/")
            ? String(requestPath[..<requestPath.lastIndex(of: "/")!]) : "/"
        return Cookie(
            domain: domain ?? host,
            includesSubdomains: includesSubdomains,
            path: path ?? defaultPath,
            isSecure: isSecure,
            expires: expires,
            name: name,
            value: value
        )
    }

    /// Whether `host` is an IP address (a cookie for one is never shared with other hosts).
    private static func isAddress(_ host: String) -> Bool {
        host.contains(":") || host.split(separator: ".").allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isNumber) }
    }

    /// The `Cookie` value for a request to `url` at `now`, longer paths first; `nil` when no cookie matches.
    func header(for url: URL, now: Date = Date()) -> String? {
        guard let host = url.host?.lowercased() else { return nil }
        let path = url.path(percentEncoded: true).isEmpty ? "/" : url.path(percentEncoded: true)
        let isSecure = url.scheme?.lowercased() == "https"
        let time = now.timeIntervalSince1970
        let matching = self.cookies.enumerated()
            .filter { $0.element.matches(host: host, path: path, isSecure: isSecure, now: time) }
            .sorted { ($0.element.path.count, -$0.offset) > ($1.element.path.count, -$1.offset) }
        guard !matching.isEmpty else { return nil }
        return matching.map { "\($0.element.name)=\($0.element.value)" }.joined(separator: "; ")
    }

    /// `headers` with a `Cookie` for `url`, unless they have one or no cookie matches.
    func adding(to headers: [(name: String, value: String)], for url: URL) -> [(name: String, value: String)] {
        guard !headers.contains(where: { $0.name.lowercased() == "cookie" }), let value = self.header(for: url) else {
            return headers
        }
        return headers + [("Cookie", value)]
    }
}

/// The cookies of a manager's run: those it started with and, when it accepts them, those the servers set, kept in
/// memory for the later requests of the run and readable afterwards (`haul get -c FILE` writes them out, as curl's
/// `--cookie-jar` and wget's `--save-cookies` do). Safe to use from any thread.
public final class CookieStorage: Sendable {
    private let box: NIOLockedValueBox<CookieJar>
    /// Whether `Set-Cookie` fields of responses (redirects included) are kept.
    public let acceptsServerCookies: Bool

    public init(_ jar: CookieJar = CookieJar(), acceptsServerCookies: Bool = true) {
        self.box = NIOLockedValueBox(jar)
        self.acceptsServerCookies = acceptsServerCookies
    }

    /// The cookies now.
    public var jar: CookieJar { self.box.withLockedValue { $0 } }

    /// `headers` with a `Cookie` for `url`, unless they have one or no cookie matches.
    func adding(to headers: [(name: String, value: String)], for url: URL) -> [(name: String, value: String)] {
        self.box.withLockedValue { $0.adding(to: headers, for: url) }
    }

    /// Keeps the cookies a response to `url` set, when it accepts them.
    func receive(_ fields: HTTPHeaders, from url: URL) {
        guard self.acceptsServerCookies else { return }
        let setCookies = fields["set-cookie"]
        guard !setCookies.isEmpty else { return }
        let now = Date()
        self.box.withLockedValue { jar in
            for field in setCookies { jar.take(setCookie: field, from: url, now: now) }
        }
    }
}
