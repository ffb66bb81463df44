import Foundation

/// Cookies sent with the requests whose URLs they match, as a browser would send them: by domain, path, scheme and
/// expiry. Read from a cookie file in the Netscape format that curl (`-b`), wget (`--load-cookies`), aria2c
/// (`--load-cookies`) and browsers' exporters write. Cookies the servers set during a run are not kept.
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
            let domainMatches =
                host == self.domain
                || (self.includesSubdomains && host.hasSuffix(self.domain)
                    && host.dropLast(self.domain.count).hasSuffix("."))
            guard domainMatches else { return false }
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
