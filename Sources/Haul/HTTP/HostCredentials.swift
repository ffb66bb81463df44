import Foundation

/// A user and password for each host, sent as `Authorization: Basic` to that host only: on every request to it,
/// including a redirect's that arrives there, and never to another host (curl's `--netrc`). A request that carries an
/// `Authorization` of its own (a header given, credentials in its URL) keeps it.
public struct HostCredentials: Sendable, Hashable {
    /// A user and password.
    public struct Login: Sendable, Hashable {
        public var user: String
        public var password: String

        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }

        /// The `Authorization` value.
        var authorization: String { "Basic " + Data("\(self.user):\(self.password)".utf8).base64EncodedString() }
    }

    /// The logins by host name (lower-cased).
    public var byHost: [String: Login]
    /// The login for any other host (a netrc file's `default`), if any.
    public var fallback: Login?

    public init(byHost: [String: Login] = [:], fallback: Login? = nil) {
        self.byHost = Dictionary(byHost.map { ($0.key.lowercased(), $0.value) }) { first, _ in first }
        self.fallback = fallback
    }

    /// The logins of a netrc file (`machine HOST login USER password PASSWORD`, and `default login USER password
    /// PASSWORD` for any other host), as curl, wget and aria2c read `~/.netrc`. Tokens are separated by white space;
    /// a token in double quotes may hold spaces (`\"` and `\\` escaped); `account` is read and not used; a `macdef`
    /// runs to the next blank line and is skipped; a line starting with `#` is a comment. The first entry for a host
    /// wins.
    ///
    /// - Throws: ``HaulError/Code/invalidRequest`` for an entry without a login or a password, a keyword with nothing
    ///   after it, or an unknown keyword, naming the line.
    public init(netrc text: String) throws(HaulError) {
        var tokens = NetrcTokens(text)
        var byHost: [String: Login] = [:]
        var fallback: Login?
        var entry: (host: String?, line: Int, user: String?, password: String?)?
        func finish() throws(HaulError) {
            guard let current = entry else { return }
            entry = nil
            guard let user = current.user, let password = current.password else {
                throw HaulError(
                    .invalidRequest,
                    "netrc line \(current.line): \(current.host.map { "machine \($0)" } ?? "default") needs a login "
                        + "and a password"
                )
            }
            let login = Login(user: user, password: password)
            if let host = current.host {
                if byHost[host] == nil { byHost[host] = login }
            } else if fallback == nil {
                fallback = login
            }
        }
        while let (keyword, line) = tokens.next() {
            func value() throws(HaulError) -> String {
                guard let (value, _) = tokens.next() else {
                    throw HaulError(.invalidRequest, "netrc line \(line): \(keyword) needs a value")
                }
                return value
            }
            switch keyword {
            case "machine":
                try finish()
                entry = (try value().lowercased(), line, nil, nil)
            case "default":
                try finish()
                entry = (nil, line, nil, nil)
            case "login":
                let user = try value()
                entry?.user = user
            case "password":
                let password = try value()
                entry?.password = password
            case "account":
                _ = try value()
            case "macdef":
                try finish()
                _ = try value()
                tokens.skipMacro()
            default:
                throw HaulError(.invalidRequest, "netrc line \(line): unknown keyword \"\(keyword)\"")
            }
        }
        try finish()
        self.init(byHost: byHost, fallback: fallback)
    }

    /// Whether there are no logins at all.
    public var isEmpty: Bool { self.byHost.isEmpty && self.fallback == nil }

    /// The login for `host` (any case), if any.
    func login(for host: String) -> Login? {
        self.byHost[host.lowercased()] ?? self.fallback
    }

    /// `headers` with an `Authorization` for `url`'s host, unless they have one or the host has no login.
    func adding(to headers: [(name: String, value: String)], for url: URL) -> [(name: String, value: String)] {
        guard let host = url.host, let login = self.login(for: host),
            !headers.contains(where: { $0.name.lowercased() == "authorization" })
        else { return headers }
        return headers + [("Authorization", login.authorization)]
    }
}

/// The tokens of a netrc file, with the line each starts on.
private struct NetrcTokens {
    private var scalars: [Unicode.Scalar]
    private var index = 0
    private var line = 1

    init(_ text: String) {
        self.scalars = Array(text.unicodeScalars)
    }

    /// The next token and its line, or `nil` at the end.
    mutating func next() -> (String, Int)? {
        while self.index < self.scalars.count {
            let scalar = self.scalars[self.index]
            if scalar == "\n" {
                self.line += 1
                self.index += 1
            } else if scalar.properties.isWhitespace {
                self.index += 1
            } else if scalar == "#" {
                while self.index < self.scalars.count, self.scalars[self.index] != "\n" { self.index += 1 }
            } else {
                break
            }
        }
        guard self.index < self.scalars.count else { return nil }
        let line = self.line
        var token = String.UnicodeScalarView()
        if self.scalars[self.index] == "\"" {
            self.index += 1
            while self.index < self.scalars.count, self.scalars[self.index] != "\"" {
                if self.scalars[self.index] == "\\", self.index + 1 < self.scalars.count { self.index += 1 }
                if self.scalars[self.index] == "\n" { self.line += 1 }
                token.append(self.scalars[self.index])
                self.index += 1
            }
            self.index += 1
        } else {
            while self.index < self.scalars.count, !self.scalars[self.index].properties.isWhitespace {
                token.append(self.scalars[self.index])
                self.index += 1
            }
        }
        return (String(token), line)
    }

    /// Skips a macro's body: up to the next blank line (or the end).
    mutating func skipMacro() {
        // The rest of the `macdef` line, then lines until an empty one.
        while self.index < self.scalars.count, self.scalars[self.index] != "\n" { self.index += 1 }
        while self.index < self.scalars.count {
            self.index += 1
            self.line += 1
            if self.index < self.scalars.count, self.scalars[self.index] == "\n" { return }
            while self.index < self.scalars.count, self.scalars[self.index] != "\n" { self.index += 1 }
        }
    }
}
