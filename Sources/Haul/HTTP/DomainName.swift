extension StringProtocol {
    /// Whether this host name (lower-cased) is `domain` or a name under it: `files.example.com` is within
    /// `example.com`, `notexample.com` is not. The domain matching of cookies (RFC 6265 §5.1.3) and of `no_proxy`.
    func isWithin(domain: some StringProtocol) -> Bool {
        self == domain || (self.hasSuffix(domain) && self.dropLast(domain.count).hasSuffix("."))
    }
}
