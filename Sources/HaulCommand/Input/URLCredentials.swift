import Foundation

/// Credentials in a URL (`https://user:secret@host/file`), taken as curl, wget2 and aria2c take them: sent as an
/// `Authorization: Basic` header, and taken out of the URL, so that the password is neither printed with the URL nor
/// written to the state database. The header is a secret one: never stored, and dropped on a redirect to another
/// origin. An `Authorization` header given with `-H` or `header=` wins. Pure.
enum URLCredentials {
    /// `url` without its user and password, and the header that carries them (`nil` when it has none, or when
    /// `headers` has an `Authorization` already).
    static func extract(
        from url: URL,
        headers: [(name: String, value: String)]
    ) -> (url: URL, header: (name: String, value: String)?) {
        // Read from what the URL's parse found (a URL's text is made anew each time it is asked for); most have no
        // user.
        guard url.user(percentEncoded: true) != nil || url.password(percentEncoded: true) != nil,
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        else { return (url, nil) }
        let credentials = "\(components.user ?? ""):\(components.password ?? "")"
        components.user = nil
        components.password = nil
        guard let stripped = components.url else { return (url, nil) }
        if headers.contains(where: { $0.name.lowercased() == "authorization" }) { return (stripped, nil) }
        return (stripped, ("Authorization", "Basic \(Data(credentials.utf8).base64EncodedString())"))
    }

    /// The URL and headers a request is made with: the URL without credentials, the headers with theirs.
    static func apply(
        to url: URL,
        headers: [(name: String, value: String)]
    ) -> (url: URL, headers: [(name: String, value: String)]) {
        let (stripped, header) = Self.extract(from: url, headers: headers)
        return (stripped, header.map { headers + [$0] } ?? headers)
    }
}
