import Crypto
import Foundation

/// Pure functions that turn URLs and server-given names into safe file names.
enum FileNaming {
    /// The name used when a URL or a server gives none (a URL ending in `/`, an empty disposition).
    static let fallbackName = "index.html"
    /// The longest name most file systems accept, in UTF-8 bytes.
    static let maximumNameBytes = 255

    /// A single safe file name made from untrusted text.
    ///
    /// `/`, `\`, control characters and NUL become `_`; leading dots become `_` (no hidden or `..` names from a
    /// server); surrounding white space is trimmed; an empty result is `nil`. Names longer than 255 UTF-8 bytes are
    /// cut before the extension.
    static func sanitizedName(_ raw: String) -> String? {
        // Printable ASCII other than slashes, not starting with a dot and short enough (nearly every name): kept as it
        // is, found in one pass over the bytes.
        if raw.utf8.count <= Self.maximumNameBytes, Self.isPlainName(raw) { return raw }
        func isReplaced(_ scalar: Unicode.Scalar) -> Bool {
            scalar == "/" || scalar == "\\" || scalar.value < 0x20 || scalar.value == 0x7f
                || (!scalar.isASCII && scalar.properties.generalCategory == .control)
        }
        var name: String
        if raw.unicodeScalars.contains(where: isReplaced) {
            var scalars = String.UnicodeScalarView()
            for scalar in raw.unicodeScalars { scalars.append(isReplaced(scalar) ? "_" : scalar) }
            name = String(scalars).trimmingWhitespace()
        } else {
            // Most names need no replacement: no copy, scalar by scalar.
            name = raw.trimmingWhitespace()
        }
        if name.first == "." {
            let dots = name.prefix(while: { $0 == "." })
            name = String(repeating: "_", count: dots.count) + name.dropFirst(dots.count)
        }
        let trimmed = raw.trimmingWhitespace()
        guard !name.isEmpty, trimmed != ".", trimmed != ".." else { return nil }
        return self.truncated(name)
    }

    /// Whether `name` is kept as it is by ``sanitizedName(_:)`` for its bytes: printable ASCII without a space, `/`
    /// or `\\`, not starting with a dot.
    private static func isPlainName(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { bytes in
            guard let first = bytes.first, first != UInt8(ascii: ".") else { return false }
            return !bytes.contains { byte in
                byte <= 0x20 || byte >= 0x7f || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "\\")
            }
        }
    }

    /// A relative path made from untrusted text: each component sanitised, empty, `.` and `..` components dropped.
    static func sanitizedRelativePath(_ raw: String) -> [String]? {
        let components = raw.split(separator: "/", omittingEmptySubsequences: true)
            .filter { $0 != "." && $0 != ".." }
            .compactMap { self.sanitizedName(String($0)) }
        return components.isEmpty ? nil : components
    }

    /// The percent-decoded last path component of a URL, sanitised; ``fallbackName`` when there is none.
    static func name(fromURL url: URL) -> String {
        var path = url.path(percentEncoded: true)
        // The bytes after the last slash, found in the path's contiguous bytes, without splitting the path into
        // components character by character.
        let (last, isEncoded) = path.withUTF8 { bytes -> (String?, Bool) in
            guard let end = bytes.last, end != UInt8(ascii: "/") else { return (nil, false) }
            let start = (bytes.lastIndex(of: UInt8(ascii: "/")) ?? -1) + 1
            let name = UnsafeBufferPointer(rebasing: bytes[start...])
            return (String(decoding: name, as: UTF8.self), name.contains(UInt8(ascii: "%")))
        }
        guard let last else { return self.fallbackName }
        let decoded = isEncoded ? last.removingPercentEncoding ?? last : last
        return self.sanitizedName(decoded) ?? self.fallbackName
    }

    /// The name a policy gives, before any server response is known (for `contentDisposition`, the URL's name).
    static func name(for id: TransferID, url: URL, policy: NamingPolicy) -> [String] {
        switch policy.base {
        case .urlPath, .contentDisposition:
            return [self.name(fromURL: url)]
        case .uuidPrefix:
            return [self.sanitizedName(UUID().uuidString.lowercased() + "-" + self.name(fromURL: url))!]
        case .urlHash:
            let digest = String(hexOf: SHA256.hash(data: Array(url.absoluteString.utf8)))
            let ext = self.pathExtension(of: self.name(fromURL: url))
            return [ext.isEmpty ? digest : digest + "." + ext]
        case .custom(let makeName):
            return self.sanitizedRelativePath(makeName(id, url)) ?? [self.name(fromURL: url)]
        }
    }

    /// The candidate for the `n`th conflict: `name.n.ext` (`archive.tar.1.gz`, `README.1`).
    static func numbered(_ name: String, _ n: Int) -> String {
        let ext = self.pathExtension(of: name)
        guard !ext.isEmpty else { return self.truncated("\(name).\(n)") }
        let stem = name.dropLast(ext.count + 1)
        return self.truncated("\(stem).\(n).\(ext)")
    }

    /// The text after the last dot, if that dot is not the first character; else empty.
    static func pathExtension(of name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return String(name[name.index(after: dot)...])
    }

    /// The name cut to ``maximumNameBytes`` bytes, keeping a short extension and whole characters.
    static func truncated(_ name: String, maximumBytes: Int = FileNaming.maximumNameBytes) -> String {
        guard name.utf8.count > maximumBytes else { return name }
        var ext = self.pathExtension(of: name)
        if ext.utf8.count > 16 { ext = "" }
        let suffix = ext.isEmpty ? "" : "." + ext
        var stem = Substring(ext.isEmpty ? name : String(name.dropLast(ext.count + 1)))
        while stem.utf8.count + suffix.utf8.count > maximumBytes { stem = stem.dropLast() }
        return String(stem) + suffix
    }
}

extension StringProtocol {
    /// The text without the white space around it (Unicode's space separators and tab, as
    /// `CharacterSet.whitespaces`), with no Foundation call when both ends are ASCII and not blank: nearly always for
    /// URLs, names and header values, and Foundation's trimming bridges through `NSString` (2 % of the CPU on a list of
    /// small files).
    package func trimmingWhitespace() -> String {
        let scalars = self.unicodeScalars
        if let first = scalars.first, let last = scalars.last, first.isASCII, last.isASCII, first != " ",
            first != "\t", last != " ", last != "\t"
        {
            return String(self)
        }
        return self.trimmingCharacters(in: .whitespaces)
    }
}
