import Foundation

/// The file name in a `Content-Disposition` header (RFC 6266), parsed without trusting it.
///
/// `filename*` (RFC 8187/5987: `UTF-8''percent-encoded`) wins over `filename`. The result is not yet sanitised:
/// pass it through ``FileNaming/sanitizedName(_:)``.
enum ContentDisposition {
    /// The file name the header offers, or `nil` when it has none or cannot be parsed.
    static func fileName(in header: String) -> String? {
        guard let parameters = self.parameters(of: header) else { return nil }
        if let extended = parameters["filename*"], let decoded = self.decodeExtendedValue(extended) {
            return decoded
        }
        return parameters["filename"]
    }

    /// The part of an offered name after its last `/` or `\\`: a server's folders are not followed, and the name at
    /// the end is what curl's `-J` and wget's `--content-disposition` keep (`../../etc/passwd` is `passwd`, where
    /// sanitising the whole text gave `___.._etc_passwd`). Empty when the name ends with a separator.
    static func lastComponent(of name: String) -> String {
        guard let cut = name.lastIndex(where: { $0 == "/" || $0 == "\\" }) else { return name }
        return String(name[name.index(after: cut)...])
    }

    /// The parameters after the disposition type, names lower-cased, quoted strings unquoted.
    static func parameters(of header: String) -> [String: String]? {
        var parameters: [String: String] = [:]
        var scalars = Substring(header).unicodeScalars[...]
        // The disposition type: a token up to the first `;`.
        guard let firstSemicolon = scalars.firstIndex(of: ";") else { return [:] }
        scalars = scalars[scalars.index(after: firstSemicolon)...]
        while !scalars.isEmpty {
            scalars = scalars.drop(while: { $0 == " " || $0 == "\t" })
            guard let equals = scalars.firstIndex(of: "=") else { return parameters.isEmpty ? nil : parameters }
            let name = String(String.UnicodeScalarView(scalars[..<equals])).trimmingCharacters(in: .whitespaces)
                .lowercased()
            scalars = scalars[scalars.index(after: equals)...].drop(while: { $0 == " " || $0 == "\t" })
            var value = String.UnicodeScalarView()
            if scalars.first == "\"" {
                scalars = scalars.dropFirst()
                var closed = false
                while let scalar = scalars.first {
                    scalars = scalars.dropFirst()
                    if scalar == "\\", let escaped = scalars.first {
                        value.append(escaped)
                        scalars = scalars.dropFirst()
                    } else if scalar == "\"" {
                        closed = true
                        break
                    } else {
                        value.append(scalar)
                    }
                }
                guard closed else { return nil }
                scalars = scalars.drop(while: { $0 != ";" })
            } else {
                let end = scalars.firstIndex(of: ";") ?? scalars.endIndex
                value.append(contentsOf: scalars[..<end])
                scalars = scalars[end...]
            }
            if !name.isEmpty, parameters[name] == nil {
                parameters[name] = String(value).trimmingCharacters(in: .whitespaces)
            }
            scalars = scalars.dropFirst()  // the `;`
        }
        return parameters
    }

    /// Decodes `charset'language'percent-encoded` (RFC 8187); only UTF-8 and ISO-8859-1 are accepted.
    static func decodeExtendedValue(_ value: String) -> String? {
        let parts = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        let charset = parts[0].lowercased()
        var bytes: [UInt8] = []
        var utf8 = parts[2].utf8[...]
        while let byte = utf8.first {
            utf8 = utf8.dropFirst()
            if byte == UInt8(ascii: "%") {
                guard utf8.count >= 2, let high = hexValue(utf8.first!), let low = hexValue(utf8.dropFirst().first!)
                else { return nil }
                bytes.append(high << 4 | low)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        switch charset {
        case "utf-8": return String(validating: bytes, as: UTF8.self)
        case "iso-8859-1": return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
        default: return nil
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
